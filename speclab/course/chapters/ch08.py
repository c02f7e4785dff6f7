"""Chapter 8 (EAGLE): the pages' shared setup and their figures, each called in one line from a page.

    from speclab.course.chapters import ch08
    ch = ch08.setup()                      # the bundled pair, both EAGLE heads' folders and logs
    figure("fig-08-heads", ch08.heads_diagram())
"""
from __future__ import annotations

import json
from types import SimpleNamespace

from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
import matplotlib.pyplot as plt
import numpy as np
import torch

import speclab
from speclab.course.notebook import html_table, precision, tree_layout
from speclab.methods import REGISTRY, eagle
from speclab.train.chat_data import trained_on
from speclab.train.eagle import unroll_mask

WIDTH = 7.5    # inches: the book's 780-pixel column
FONT = 9       # points: the smallest text a figure uses
GREEN, RED, DARK, YELLOW = "#b7e4b0", "#f4a6a6", "#4c9a4c", "#f5d76e"
# the chapter's two heads, as the registry names them (their folders and bench rows are read through it)
EAGLE1, EAGLE3 = eagle.NAME, eagle.NAME3


def count(module: torch.nn.Module) -> int:
    """Parameters of a module."""
    return sum(p.numel() for p in module.parameters())


def setup(threads: int = 1) -> SimpleNamespace:
    """What every page of chapter 8 starts from: the bundled pair (target, draft, tokenizer, device),
    the folders and training logs of the EAGLE-1 and EAGLE-3 heads shipped with it, the target's
    embedding and lm_head, greedy sampling, the timings' precision, and two small text helpers
    (ids_of: text -> token ids on the device; show: one token id -> its text, quoted)."""
    torch.set_num_threads(threads)    # live timings on one thread, as the machine line says
    target, draft, tokenizer, device = speclab.load_pair()
    eagle_dir = speclab.models.BUNDLED_DIR / REGISTRY[EAGLE1].bundled
    eagle3_dir = speclab.models.BUNDLED_DIR / REGISTRY[EAGLE3].bundled
    return SimpleNamespace(
        target=target, draft=draft, tokenizer=tokenizer, device=device,
        eagle_dir=eagle_dir, eagle3_dir=eagle3_dir,
        record1=json.loads((eagle_dir / "record.json").read_text()),
        record3=json.loads((eagle3_dir / "record.json").read_text()),
        embed=target.get_input_embeddings(), lm_head=target.get_output_embeddings(),
        greedy=speclab.SamplingParams(0.0), dtype=precision(target, draft),
        ids_of=lambda text: tokenizer(text, return_tensors="pt").input_ids[0].to(device),
        show=lambda t: repr(tokenizer.decode([int(t)])))


# ---------------------------------------------------------------- boxes and arrows

def _box(ax, x: float, y: float, w: float, h: float, text: str, color: str = "white") -> None:
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02",
                                fc=color, ec="k", lw=0.8))
    ax.text(x, y, text, ha="center", va="center", fontsize=FONT)


def _arrow(ax, a: tuple[float, float], b: tuple[float, float], style: str = "-|>", **kw) -> None:
    ax.add_patch(FancyArrowPatch(a, b, arrowstyle=style, mutation_scale=10, lw=0.9,
                                 shrinkA=0, shrinkB=0, **kw))


def heads_diagram() -> Figure:
    """The EAGLE-1 head and the EAGLE-3 head side by side, boxes and arrows: what each reads, the fc
    that projects it, the one decoder layer, and what it gives back (a feature for the target's
    lm_head; a hidden state for the head's own lm_head, unrolled in training)."""
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH, 4.6))
    frozen, learnt = "#e8e8e8", "#cfe0f3"
    w, h = 2.3, 0.5
    # EAGLE-1 (cnets1.py)
    ax = axes[0]
    _box(ax, 0.9, 0.4, 1.6, h, "token $x_{t+1}$\n-> embedding", frozen)
    _box(ax, 3.1, 0.4, 1.6, h, "last feature $f_t$", frozen)
    _box(ax, 2.0, 1.5, w, h, "fc: [e; f], 2H -> H", learnt)
    _box(ax, 2.0, 2.5, w, h, "one decoder layer", learnt)
    _box(ax, 2.0, 3.5, w, h, r"feature $\hat f_{t+1}$", learnt)
    _box(ax, 2.0, 4.5, w, h, "target's lm_head\n-> draft token", frozen)
    for a, b in [((0.9, 0.65), (1.6, 1.25)), ((3.1, 0.65), (2.4, 1.25)), ((2.0, 1.75), (2.0, 2.25)),
                 ((2.0, 2.75), (2.0, 3.25)), ((2.0, 3.75), (2.0, 4.25))]:
        _arrow(ax, a, b)
    _arrow(ax, (3.15, 3.5), (3.6, 0.65), style="-|>", connectionstyle="arc3,rad=-0.35", ls="--")
    ax.text(3.95, 2.1, "next step:\nreads $\\hat f$", fontsize=FONT, ha="center")
    ax.set_title("EAGLE-1 head (cnets1.py)", fontsize=FONT + 1)
    # EAGLE-3 (cnets.py)
    ax = axes[1]
    for x, name in [(0.7, "low"), (2.0, "mid"), (3.3, "high")]:
        _box(ax, x, 0.4, 1.1, h, f"{name}\nlayer", frozen)
        _arrow(ax, (x, 0.65), (2.0 + (x - 2.0) * 0.4, 1.25))
    _box(ax, 2.0, 1.5, w, h, "fc: fuse, 3H -> H", learnt)
    _box(ax, 0.5, 2.5, 0.9, h, "token\nembed.", frozen)
    _box(ax, 2.2, 2.5, 1.9, h, "decoder layer\n(q, k, v read 2H)", learnt)
    _arrow(ax, (2.0, 1.75), (2.0, 2.25))
    _arrow(ax, (0.95, 2.5), (1.25, 2.5))
    _box(ax, 2.0, 3.5, w, h, "norm -> own lm_head\n(draft vocabulary)", learnt)
    _box(ax, 2.0, 4.5, w, h, "draft token (d2t -> target id)", frozen)
    _arrow(ax, (2.0, 2.75), (2.0, 3.25))
    _arrow(ax, (2.0, 3.75), (2.0, 4.25))
    _arrow(ax, (3.15, 2.65), (2.45, 2.0), connectionstyle="arc3,rad=-1.2", ls="--")
    ax.text(3.95, 1.75, "next step\nreads its\nown output\n(trained so:\ntraining-\ntime test)",
            fontsize=FONT, ha="center")
    ax.set_title("EAGLE-3 head (cnets.py)", fontsize=FONT + 1)
    for ax in axes:
        ax.set_xlim(-0.2, 4.4)
        ax.set_ylim(0, 5)
        ax.axis("off")
    axes[0].text(0.0, -0.05, "grey: the target's, frozen; blue: the head's, trained", fontsize=FONT,
                 transform=axes[0].transAxes)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- 8.2-8.4

def ablation_figure(ablation: dict, live: dict, variants: dict, live_rows: int, live_len: int) -> Figure:
    """Held-out top-1 against training step for the input variants: the record's (all of `variants`) on the
    left, the live runs (quick_eagle's third result, (step, top-1) pairs; the variants `live` holds) on the
    right, in the same colours."""
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH, 3.3), sharey=True)
    for i, (key, label) in enumerate(variants.items()):
        evals = ablation[key]["log"]["evals"]
        axes[0].plot([e["step"] for e in evals], [e["heldout_top1"] for e in evals], color=f"C{i}", label=label)
        if key in live:
            steps, acc = zip(*live[key][2])
            axes[1].plot(steps, acc, "o-", ms=3, color=f"C{i}", label=label)
    axes[0].set_title("recorded (train eagle --inputs)", fontsize=FONT)
    axes[1].set_title(f"live here: {live_rows} rows of {live_len} tokens", fontsize=FONT)
    axes[0].set_ylabel("held-out top-1 = target", fontsize=FONT)
    for ax in axes:
        ax.set_xlabel("training step", fontsize=FONT)
        ax.tick_params(labelsize=FONT)
    axes[0].legend(fontsize=FONT)
    if len(live) < len(variants):
        axes[1].legend(fontsize=FONT)
    fig.tight_layout()
    return fig


def ablation_order(ablation: dict) -> dict[str, float]:
    """What 8.2's prose says of the recorded ablation, read from its evaluations after step 0 and asserted: the
    head reading the feature and the token ahead of both single inputs at every evaluation; of the two alone,
    the feature ahead at the first evaluation, the token ahead from a later one to the end, gaining more than
    the feature over that stretch. Returns the first step, the step from which the token stays ahead, and the
    single inputs' top-1 at the first step."""
    top1 = {k: {e["step"]: e["heldout_top1"] for e in ablation[k]["log"]["evals"] if e["step"] > 0}
            for k in ("feature+token", "feature", "token")}
    pair, feature, token = top1["feature+token"], top1["feature"], top1["token"]
    steps = sorted(feature)
    assert all(pair[s] > max(feature[s], token[s]) for s in steps), "prose: the pair leads at every evaluation"
    first, last = steps[0], steps[-1]
    assert feature[first] > token[first], "prose: the feature alone is ahead of the token alone at first"
    assert token[last] > feature[last], "prose: the token alone is ahead at the end"
    cross = steps[max(i for i, s in enumerate(steps) if token[s] <= feature[s]) + 1]
    assert token[last] - token[cross] > feature[last] - feature[cross], "prose: the token alone gains more"
    return {"first": first, "cross": cross, "feature_first": feature[first], "token_first": token[first]}


def training_figure(record: dict, live_losses: np.ndarray) -> Figure:
    """The EAGLE-1 head's training log (feature loss and cross-entropy, training and held out, on a
    log step axis) with a live run's losses (one row per step: feature loss, cross-entropy)."""
    train_log = np.array(record["log"]["train"])          # step, feature loss, cross-entropy
    evals = [e for e in record["log"]["evals"] if e["step"] > 0]   # a log axis has no 0
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH, 3.2))
    for ax, col, key, title in [(axes[0], 1, "heldout_feature_loss", "smooth L1 on features"),
                                (axes[1], 2, "heldout_ce", "cross-entropy vs the target")]:
        ax.plot(train_log[:, 0], train_log[:, col], lw=0.5, alpha=0.5, label="recorded: training")
        ax.plot([e["step"] for e in evals], [e[key] for e in evals], "ko", ms=2.5, label="recorded: held out")
        ax.plot(np.arange(1, len(live_losses) + 1), live_losses[:, col - 1], "r", lw=1.5, label="live run")
        ax.set_xscale("log")
        ax.set_xlabel("training step", fontsize=FONT)
        ax.set_title(title, fontsize=FONT)
        ax.tick_params(labelsize=FONT)
    axes[0].legend(fontsize=FONT)
    fig.tight_layout()
    return fig


CACHE_COLORS = {"true pairs kept": GREEN, "guessed rows, rolled back": RED,
                "true pairs fed by the catch-up": DARK, "rows drafted from the head's guesses": YELLOW}


def cache_figure(snapshots: list[tuple[int, int, int, int]], shown: int = 4) -> Figure:
    """The head's cache round by round: per round (rows before, true pairs before, true pairs after the
    catch-up, rows after drafting), an upper bar before the round and a lower one after drafting,
    from `shown` rows before the first round's last true pair."""
    start = snapshots[0][2] - shown
    fig, ax = plt.subplots(figsize=(WIDTH, 2.9))
    for r, (rows_b, true_b, true_a, rows_a) in enumerate(snapshots):
        y = len(snapshots) - 1 - r
        spans = [(start, true_b, y + 0.18, "true pairs kept"),
                 (true_b, rows_b, y + 0.18, "guessed rows, rolled back"),
                 (start, true_b, y - 0.18, "true pairs kept"),
                 (true_b, true_a, y - 0.18, "true pairs fed by the catch-up"),
                 (true_a, rows_a, y - 0.18, "rows drafted from the head's guesses")]
        for lo, hi, bar_y, label in spans:
            lo = max(lo, start)
            if hi > lo:
                ax.barh(bar_y, hi - lo, left=lo - start, height=0.32, color=CACHE_COLORS[label],
                        edgecolor="white")
    ax.set_yticks(range(len(snapshots)), [f"round {len(snapshots) - y}" for y in range(len(snapshots))])
    ax.set_xlabel(f"rows of the head's cache, from row {start}", fontsize=FONT)
    ax.tick_params(labelsize=FONT)
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c) for c in CACHE_COLORS.values()],
              labels=list(CACHE_COLORS), fontsize=FONT, loc="upper center", bbox_to_anchor=(0.5, -0.28),
              ncol=2, frameon=False)
    fig.tight_layout()
    return fig


def position_figure(by_pos: dict, k: int) -> Figure:
    """Acceptance by draft position (position_acceptance's result), one line per drafter."""
    fig, ax = plt.subplots(figsize=(6.8, 3.4))
    for name, r in by_pos.items():
        ax.plot(range(1, k + 1), r["by_position"], "o-", ms=4,
                label=f"{name} ({r['tokens_per_round']:.2f} tokens/round)")
    ax.set_xlabel("draft position j", fontsize=FONT)
    ax.set_ylabel("P(accept j | 1..j-1 accepted)", fontsize=FONT)
    ax.set_ylim(0, 1.02)
    ax.tick_params(labelsize=FONT)
    ax.legend(fontsize=FONT, loc="lower left")
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- 8.5

def tree_figure(parents: list[int], labels: list[str], colors: list[str], root: str) -> Figure:
    """A token tree drawn left to right for the column: depth across, one labelled box per node
    (labels[i], filled colors[i]), the root on the left labelled `root`."""
    x, y = tree_layout(parents)           # x: leaf order, y: -depth
    leaves = max(x.values()) + 1
    depth = -min(y.values())
    fig, ax = plt.subplots(figsize=(WIDTH, max(3.0, 0.42 * leaves + 0.6)))
    pos = {n: (-y[n], -x[n]) for n in x}  # across: depth; down: leaf order
    for i, p in enumerate(parents):
        ax.plot([pos[p][0], pos[i][0]], [pos[p][1], pos[i][1]], "k-", lw=0.7, zorder=1)
    fill = {-1: "white", **dict(enumerate(colors))}
    for n, label in [(-1, root)] + list(enumerate(labels)):
        ax.text(*pos[n], label, ha="center", va="center", fontsize=FONT, zorder=3,
                bbox=dict(boxstyle="round,pad=0.25", fc=fill[n], ec="k", lw=0.6))
    ax.set_xlim(-0.5, depth + 0.5)
    ax.set_ylim(-leaves + 0.4, 0.6)
    ax.axis("off")
    fig.tight_layout()
    return fig


def calibration_figure(calib: dict, panels: list[tuple], error) -> Figure:
    """Reliability diagrams, one panel per (kind, title) in `panels`, each with the EAGLE-1 and EAGLE-3
    heads' bins (calib[name, kind]: rows of confidence and outcome) and `error`(bins) in the legend."""
    fig, axes = plt.subplots(1, len(panels), figsize=(WIDTH, 3.0), sharey=True)
    for ax, (kind, title) in zip(axes, panels):
        ax.plot([0, 1], [0, 1], color="#999999", lw=0.8, ls="--")
        for name, color in [("EAGLE-1", "#4c72b0"), ("EAGLE-3", "#dd8452")]:
            t = calib[name, kind]
            ax.plot([r["confidence"] for r in t], [r["outcome"] for r in t], "o-", ms=3, color=color,
                    label=f"{name}: {error(t):.3f}")
        ax.set_title(title, fontsize=FONT)
        ax.set_xlabel("head's confidence", fontsize=FONT)
        ax.tick_params(labelsize=FONT)
        ax.legend(fontsize=FONT, loc="lower right", title="error", title_fontsize=FONT)
    axes[0].set_ylabel("accepted", fontsize=FONT)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- 8.6

def mask_figure(n: int = 4) -> Figure:
    """The training-time test's attention masks (speclab.train.eagle.unroll_mask) for `n` anchors and
    steps 0 to 3: steps 0-2 on one row, step 3 below, every cell the same size so that labels read at
    the column's width."""

    fig = plt.figure(figsize=(WIDTH, 4.6))
    grid = fig.add_gridspec(2, 3, width_ratios=[4, 8, 12])
    places = [grid[0, 0], grid[0, 1], grid[0, 2], grid[1, 1:]]
    for step, place in enumerate(places):
        ax = fig.add_subplot(place)
        sees = (unroll_mask(n, step, torch.float32)[0, 0] == 0).numpy()
        ax.imshow(sees, cmap="Greens", vmin=0, vmax=1.4, aspect="equal")
        ax.set_xticks(range(n * (step + 1)), [f"{s}:{t}" for s in range(step + 1) for t in range(n)],
                      fontsize=FONT, rotation=90)
        ax.set_yticks(range(n), [f"anchor {t}" for t in range(n)], fontsize=FONT)
        for s in range(1, step + 1):
            ax.axvline(s * n - 0.5, color="k", lw=0.8)
        ax.set_title(f"step {step}", fontsize=FONT)
    fig.supxlabel("columns: step:anchor of a cached row; green: the row sees it", fontsize=FONT)
    fig.tight_layout()
    return fig


def depth_figure(by_step: dict, end_rec: dict, evals3: list[dict], depth: int) -> Figure:
    """Left: top-1 agreement by draft position, live (by_step) and from the records (end_rec); right:
    the EAGLE-3 record's held-out accuracy at three positions over its training steps."""
    pos = np.arange(1, depth + 1)
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH, 3.4))
    for name, marker in [("EAGLE-1", "s-"), ("EAGLE-3", "o-")]:
        axes[0].plot(pos, by_step[name], marker, label=f"{name} (live)")
    axes[0].plot(pos, end_rec["EAGLE-3"], "k--", label="EAGLE-3 record")
    axes[0].plot(pos, end_rec["EAGLE-3, earlier layout"], ":", color="#777777", label="earlier layout, record")
    axes[0].set_xlabel("draft position j", fontsize=FONT)
    axes[0].set_ylabel("top-1 = target", fontsize=FONT)
    axes[0].legend(fontsize=FONT)
    steps3 = [e["step"] for e in evals3]
    for j in (0, 2, depth - 1):
        axes[1].plot(steps3, [e["heldout_top1_by_step"][j] for e in evals3], label=f"position {j + 1}")
    axes[1].set_xlabel("EAGLE-3 training step", fontsize=FONT)
    axes[1].legend(fontsize=FONT)
    for ax in axes:
        ax.tick_params(labelsize=FONT)
    fig.tight_layout()
    return fig


DRAFTERS = {"head": "EAGLE-3 head", "draft": "draft"}
# where a point's drafters were met, greedy, K = 4 (the figure's label for each): the same prompts at every point
# (scaling.same_prompts), requests in the stream's everyday and varied forms that none of its conversations holds,
# and the chat workloads' hand-written prompts
ROUNDS_WHERE = {"everyday forms": "requests in the everyday forms", "varied forms": "requests in the varied forms",
                "hand-written prompts": "hand-written chat prompts"}
ROUNDS_STYLE = {"everyday forms": "-", "varied forms": "--", "hand-written prompts": ":"}


def tokens_a_round(curve: dict, point: dict) -> dict[tuple[str, str], float | None]:
    """A scaling point's tokens a round by (drafter, where: ROUNDS_WHERE), None where not measured."""
    same = curve.get("same_prompts", {})
    return {(d, where): same.get(where, {}).get("points", {}).get(str(point["conversations"]), {})
            .get(d, {}).get("tokens_per_round") for d in DRAFTERS for where in ROUNDS_WHERE}


def scaling_rows(curve: dict) -> list[tuple[str, list]]:
    """The data-scaling curve's measures, a (label, values by point) pair each, the points by training tokens
    (None: not measured): the data, training steps and minutes, how often the first draft is the target's
    token on held-out answers, tokens a round (tokens_a_round), speed over target-only on the bench's chat
    prompts, and the host each point's speeds were timed on."""
    points = sorted(curve["points"], key=lambda p: p["tokens"])
    rounds = [tokens_a_round(curve, p) for p in points]
    rows = [("conversations trained on", [trained_on(p["conversations"]) for p in points]),
            ("tokens in its conversations (requests, held-out too)", [p["tokens"] for p in points]),
            ("training steps: head", [p["head"]["steps"] for p in points]),
            ("training steps: draft", [p["draft"]["steps"] for p in points]),
            ("training minutes: head", [p["head"].get("train_minutes") for p in points]),
            ("training minutes: draft", [p["draft"].get("train_minutes") for p in points]),
            ("first draft right, held-out answers: head",
             [(p["head"].get("heldout_answer_top1_by_step") or [None])[0] for p in points]),
            ("first draft right, held-out answers: draft", [p["draft"].get("heldout_answer_top1") for p in points])]
    for d in DRAFTERS:
        for where in ROUNDS_WHERE:
            rows.append((f"tokens a round, {where}: {d}", [r[d, where] for r in rounds]))
    rows += [(f"speed on the bench, {path}: {d}",
              [p.get("speeds", {}).get(d, {}).get(path, {}).get("speedup") for p in points])
             for d in DRAFTERS for path in ("eager", "fast")]
    # speeds compare only on one machine: each point's bench names its own
    rows.append(("speeds timed on", [p.get("speeds", {}).get("host") for p in points]))
    return rows


def short_host(host: str | None) -> str:
    """A bench's host (scaling.bench_host) without its threads and trademarks, for a figure's legend."""
    if host is None:
        return "host not recorded"
    return host.rsplit(", ", 1)[0].replace("(R)", "").replace(" Processor", "")


def scaling_figure(curve: dict) -> Figure:
    """A data-scaling curve (`python -m speclab train scale`'s curve.json) against each point's conversations:
    left, each drafter's tokens a round, greedy, K = 4, on the same prompts at every point (ROUNDS_WHERE);
    right, each drafter's speed over target-only on the bench's chat prompts, eager and on the fast path
    (the timed points only, a line joining those timed on one host, each host after the first in hollow
    markers; a bar joins two timings of one setting)."""
    points = sorted(curve["points"], key=lambda p: p["tokens"])
    hosts = list(dict.fromkeys(p["speeds"].get("host") for p in points if "speeds" in p))
    legend_rows = max(len(DRAFTERS) * len(ROUNDS_WHERE), 2 * len(DRAFTERS) * max(len(hosts), 1))
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH, 2.8 + 0.3 * legend_rows))  # the legends below the panels
    colors = {"head": "#4c72b0", "draft": "#999999"}
    for d in DRAFTERS:
        for where, style in ROUNDS_STYLE.items():
            have = [(p["tokens"] / 1e6, tokens_a_round(curve, p)[d, where]) for p in points
                    if tokens_a_round(curve, p)[d, where] is not None]
            if have:
                axes[0].plot(*zip(*have), ("o" if d == "head" else "s") + style, color=colors[d],
                             label=f"{DRAFTERS[d]}, {ROUNDS_WHERE[where]}")
        for path, style in (("eager", "-"), ("fast", ":")):
            timed = [p for p in points if path in p.get("speeds", {}).get(d, {})]
            # a line joins the points timed on one host only: speeds from two machines do not compare
            for host in dict.fromkeys(p["speeds"].get("host") for p in timed):
                have = [p for p in timed if p["speeds"].get("host") == host]
                where = f" ({short_host(host)})" if len(hosts) > 1 else ""
                axes[1].plot([p["tokens"] / 1e6 for p in have], [p["speeds"][d][path]["speedup"] for p in have],
                             ("o" if d == "head" else "s") + style, color=colors[d],
                             markerfacecolor=colors[d] if hosts.index(host) == 0 else "white",
                             label=f"{DRAFTERS[d]}, {path}{where}")
            for p in timed:  # where one setting was timed twice, both timings
                each = p["speeds"][d][path].get("each")
                if each:
                    axes[1].plot([p["tokens"] / 1e6] * 2, [min(each), max(each)], "-", color=colors[d], lw=3,
                                 alpha=0.5)
    axes[0].set_ylabel("tokens a round (K = 4, greedy)", fontsize=FONT)
    axes[1].axhline(1, color="k", lw=0.8)
    low, high = axes[1].get_ylim()  # at least 0.85-1.15, so that a few percent looks like a few percent
    axes[1].set_ylim(min(low, 0.85), max(high, 1.15))
    axes[1].set_ylabel("speed vs target-only, the bench", fontsize=FONT)
    ticks = [p["tokens"] / 1e6 for p in points]
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xticks(ticks, [f"{p['conversations']:,}\n{p['tokens'] / 1e6:.2f}M" for p in points])
        ax.minorticks_off()
        ax.set_xlabel("conversations (and their tokens)", fontsize=FONT)
        ax.tick_params(labelsize=FONT)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=FONT, loc="upper center", bbox_to_anchor=(0.5, -0.42))
    fig.tight_layout()
    return fig


def _runs(curve: dict, where: str, drafter: str, ends: tuple[int, int], categories=None) -> list[np.ndarray]:
    """(new tokens, rounds) by prompt at two points on one set of the same prompts, those of `categories` only
    where given (the set's "categories" say each prompt's)."""
    same = curve["same_prompts"][where]
    runs = [np.array(same["points"][str(n)][drafter]["by_prompt"], dtype=float) for n in ends]
    if categories is None:
        return runs
    keep = [i for i, c in enumerate(same["categories"]) if c in categories]
    if not keep:
        raise ValueError(f"the {where!r} prompts hold none in {categories}; "
                         f"they are in {sorted(set(same['categories']))}")
    return [r[keep] for r in runs]


def _gain(runs: list[np.ndarray], rows: np.ndarray) -> float:
    (t0, r0), (t1, r1) = (r[rows].sum(axis=0) for r in runs)  # tokens a round: summed tokens / summed rounds
    return float((t1 / r1) / (t0 / r0) - 1)


def gain_interval(curve: dict, where: str, drafter: str, small: int, large: int, categories=None,
                  draws: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """The gain in tokens a round from point `small` to point `large` (conversations) on one set of the same
    prompts (ROUNDS_WHERE; its prompts of `categories` only, where given), and its 95% interval over those
    prompts: each draw resamples them with replacement, the same draw at both points (a paired comparison)."""
    runs = _runs(curve, where, drafter, (small, large), categories)
    n, rng = len(runs[0]), np.random.default_rng(seed)
    lo, hi = np.percentile([_gain(runs, rng.integers(0, n, n)) for _ in range(draws)], [2.5, 97.5])
    return _gain(runs, np.arange(n)), float(lo), float(hi)


def gain_difference(curve: dict, where: str, other: str, drafter: str, small: int, large: int, categories=None,
                    draws: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """How much more one set of prompts gained than another (their gain_interval gains, subtracted), and its
    95% interval: each draw resamples the two sets apart (they are different prompts), each the same at both
    points. `categories`: compare like with like, the prompts of these categories in both sets."""
    a, b = (_runs(curve, w, drafter, (small, large), categories) for w in (where, other))
    rng = np.random.default_rng(seed)
    diffs = [_gain(a, rng.integers(0, len(a[0]), len(a[0]))) - _gain(b, rng.integers(0, len(b[0]), len(b[0])))
             for _ in range(draws)]
    lo, hi = np.percentile(diffs, [2.5, 97.5])
    return _gain(a, np.arange(len(a[0]))) - _gain(b, np.arange(len(b[0]))), float(lo), float(hi)


def line_check(curve: dict, where: str, drafter: str, points: tuple[int, int, int], categories=None,
               draws: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Does the straight line (log tokens a round against log data) through the first two of `points`
    (conversations) hold at the third? Its measured tokens a round over the line's prediction there, and
    the 95% interval over one set's prompts (ROUNDS_WHERE; those of `categories` only, where given), each
    draw the same prompts at all three points: below 1, the curve bends down (more data buys less)."""
    by_n = {p["conversations"]: p["tokens"] for p in curve["points"]}
    logs = np.log([by_n[n] for n in points])
    slope_x = (logs[2] - logs[1]) / (logs[1] - logs[0])  # the third step's length in the first step's
    runs = _runs(curve, where, drafter, points[:2], categories) + _runs(curve, where, drafter, points[2:], categories)

    def held(rows: np.ndarray) -> float:
        tpr = [r[rows, 0].sum() / r[rows, 1].sum() for r in runs]
        return float(tpr[2] / (tpr[1] * (tpr[1] / tpr[0]) ** slope_x))

    n, rng = len(runs[0]), np.random.default_rng(seed)
    lo, hi = np.percentile([held(rng.integers(0, n, n)) for _ in range(draws)], [2.5, 97.5])
    return held(np.arange(n)), float(lo), float(hi)


def rounds_needed(point: dict, drafter: str, path: str, goal: float) -> tuple[float, float]:
    """What a goal speed asks of acceptance at a point's measured costs: (tokens a round needed, as a multiple
    of the point's). A round's cost in target steps is its tokens a round over its speedup; at a fixed K a
    chain drafts K and verifies K + 1 whatever is accepted, so that cost stays while acceptance moves, but for
    small terms (the head's catch-up over the accepted tokens, an answer's budget-cut last round) and the
    prompt's prefill, which a bench's whole-answer speeds include and speculation does not shorten."""
    timed = point["speeds"][drafter][path]
    needed = timed["tokens_per_round"] / timed["speedup"] * goal
    return needed, needed / timed["tokens_per_round"]


def data_multiple(ratio: float, times: float, gain: float) -> float:
    """The data, as a multiple of the last point's, at which tokens a round have grown `times`-fold, if each
    further `ratio`-fold step of data adds `gain` as the measured step did (inf where gain <= 0)."""
    return float(ratio ** (np.log(times) / np.log(1 + gain))) if gain > 0 else np.inf


def data_for_goals(curve: dict, goals: list[tuple[str, str, float]], per_category: int,
                   draws: int = 2000, seed: int = 0) -> list[dict]:
    """For each (drafter, path, goal speed): what the goal asks of the curve's last point (rounds_needed), and
    the data it would take if each further step of the first-to-last data ratio multiplied tokens a round as
    that step did (a straight line through two points on log scales), with its 95% interval over the timed
    prompts: the first `per_category` hand-written prompts of each category (the bench's), resampled, the
    same draw at both points (gain_interval). A gain at or below zero never reaches the goal (inf)."""
    points = sorted(curve["points"], key=lambda p: p["tokens"])
    first, last = points[0], points[-1]
    ratio = last["tokens"] / first["tokens"]
    where = "hand-written prompts"
    order = curve["same_prompts"][where]["categories"]
    timed = np.array([i for i, c in enumerate(order) if order[:i].count(c) < per_category])
    rng = np.random.default_rng(seed)

    def data_x(times: float, grew: float) -> float:
        return data_multiple(ratio, times, grew - 1)

    rows = []
    for drafter, path, goal in goals:
        now = last["speeds"][drafter][path]
        needed, times = rounds_needed(last, drafter, path, goal)
        grew = now["tokens_per_round"] / first["speeds"][drafter][path]["tokens_per_round"]
        runs = [r[timed] for r in _runs(curve, where, drafter, (first["conversations"], last["conversations"]))]
        lo, hi = np.percentile([_gain(runs, rng.integers(0, len(timed), len(timed))) for _ in range(draws)],
                               [2.5, 97.5])
        rows.append({"drafter": drafter, "path": path, "goal": goal, "speedup": now["speedup"],
                     "tokens_per_round": now["tokens_per_round"], "needed": needed, "more": times - 1,
                     "grew": grew - 1, "grew_interval": (float(lo), float(hi)), "data_x": data_x(times, grew),
                     "data_x_interval": (data_x(times, 1 + hi), data_x(times, 1 + lo)),
                     "round_cost": [rounds_needed(p, drafter, path, 1)[0] for p in points]})
    return rows


def goal_table(goals: list[dict], ends: tuple[int, int], timed: int):
    """data_for_goals' rows as a table: each goal, today's speed, tokens a round now and needed, a round's
    cost at each point, the gain between `ends` and the data the goal would take, each with its interval."""
    def pct(x: float) -> str:
        return f"{x:+.0%}".replace("+0%", "0%").replace("-0%", "0%")

    def times(x: float) -> str:
        return "never" if x == np.inf else "over 10,000x" if x > 1e4 else f"{x:,.0f}x"

    rows = [[DRAFTERS[g["drafter"]], g["path"], f"{g['goal']:.1f}x", f"{g['speedup']:.2f}x",
             f"{g['tokens_per_round']:.2f} → {g['needed']:.2f} ({pct(g['more'])})",
             " → ".join(f"{c:.2f}" for c in g["round_cost"]),
             f"{pct(g['grew'])} ({' to '.join(map(pct, g['grew_interval']))})",
             f"{times(g['data_x'])} ({' to '.join(map(times, g['data_x_interval']))})"] for g in goals]
    header = ["drafter", "path", "goal", "now", "tokens a round: now → needed",
              f"round cost, target steps ({ends[0]:,} → {ends[-1]:,})", f"gain, {ends[0]:,} → {ends[-1]:,} (95%)",
              f"data, × the {ends[-1]:,} point's (95%)"]
    return html_table(rows, header, align="llrrrrrr",
                      caption=f"what a goal speed asks of the {ends[-1]:,}-conversation drafters at their "
                              f"measured costs, on the bench's {timed} chat prompts")


def scaling_table(curve: dict):
    """The data-scaling curve as a table (scaling_rows), a column per point, by training tokens ("-": not
    measured)."""
    def show(label: str, value) -> str:
        if value is None:
            return "-"
        if isinstance(value, str):
            return value
        if label.startswith("tokens in"):
            return f"{value / 1e6:.2f}M"
        if isinstance(value, int) or label.startswith("training minutes"):
            return f"{value:,.0f}"
        return f"{value:.2f}x" if label.startswith("speed") else f"{value:.3f}" if "right" in label else f"{value:.2f}"

    points = sorted(curve["points"], key=lambda p: p["tokens"])
    rows = [[label] + [show(label, v) for v in values] for label, values in scaling_rows(curve)]
    header = ["point (its first N conversations)"] + [f"{p['conversations']:,}" for p in points]
    return html_table(rows, header, align="l" + "r" * len(points))


# ---------------------------------------------------------------- 8.7-8.8

def bench_figure(ratio: dict[str, float], spread: dict[str, tuple[float, float]]) -> Figure:
    """Each method's speed against target-only with its interval over the prompts, slowest at the
    bottom; EAGLE rows in blue."""
    order = sorted(ratio, key=ratio.get)
    lo = [ratio[m] - spread[m][0] if m in spread else 0 for m in order]
    hi = [spread[m][1] - ratio[m] if m in spread else 0 for m in order]
    fig, ax = plt.subplots(figsize=(WIDTH, 4.2))
    ax.barh([m.replace("speclab ", "") for m in order], [ratio[m] for m in order], xerr=[lo, hi],
            capsize=2, color=["#4c72b0" if EAGLE1 in m else "#999999" for m in order])
    ax.axvline(1, color="k", lw=0.8)
    ax.set_xlabel("speed vs speclab target-only, with its 95% interval over the prompts", fontsize=FONT)
    ax.tick_params(labelsize=FONT)
    fig.tight_layout()
    return fig


def verify_cost_figure(widths: list[int], pass_cost: dict[int, float], gpu: dict[int, float]) -> Figure:
    """A verification pass's cost in decode steps against its positions: measured here, and a GPU's
    roofline model."""
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    ax.plot(widths, [pass_cost[n] for n in widths], "o-", ms=3, label="this machine, bundled target (measured)")
    ax.plot(widths, [gpu[n] for n in widths], "--", color="#999999",
            label="H100, 4096-wide 16-bit weights (roofline)")
    ax.set_xlabel("positions in the verification pass (drafts + root)", fontsize=FONT)
    ax.set_ylabel("cost in decode steps", fontsize=FONT)
    ax.set_ylim(0, None)
    ax.tick_params(labelsize=FONT)
    ax.legend(fontsize=FONT)
    fig.tight_layout()
    return fig


def tree_runs_table(runs: dict) -> None:
    """Print what each drafting of section 8.5 emitted, one row per name -> (drafter, k, the combined
    GenerationStats of its runs): its settings, stop, tokens per target pass and nodes verified a pass."""
    print(f"{'drafting':26} {'top_k, depth, total':>19} {'stop':>5} {'tokens/pass':>11} {'nodes/pass':>10}")
    for name, (d, k, st) in runs.items():
        if d.tree == "chain":
            setting, stop = f"1, {k}, {k}", "-"
        else:
            setting = f"{d.top_k}, {d.depth}, {d.total_tokens}"
            stop = "-" if d.min_confidence is None else f"{d.min_confidence:g}"
        print(f"{name:26} {setting:>19} {stop:>5} {st.mean_tokens_per_round:11.2f} "
              f"{st.drafted / st.rounds:10.1f}")
