"""Chapter 9 (the target drafts for itself): reading its records, its tables and its figures, each
called in one line from a page.

    from speclab.course.chapters import ch09
    table = ch09.layer_skip_table(L)              # section 9.2's record, one dict per exit
    figure("fig-09-layer-skip", ch09.layer_skip_figure(table))
"""
from __future__ import annotations

import json
import re

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

import speclab
import speclab.measure.bench
from speclab import theory
from speclab.course.notebook import html_table, read_record
from speclab.methods import current_row

WIDTH = 7.5    # inches: the book's 780-pixel column
FONT = 9       # points: the smallest text a figure uses

# what a method of part II needs trained before it can draft for the bundled target
TRAINED = {
    "speclab draft_model": "draft model", "speclab draft_model adaptive-heuristic": "draft model",
    "speclab draft_model adaptive-confidence": "draft model", "hf assisted": "draft model",
    "speclab ngram": "nothing", "hf prompt-lookup": "nothing",
    "speclab lookahead": "nothing", "speclab medusa": "Medusa heads",
    "speclab medusa chain": "Medusa heads", "speclab medusa typical": "Medusa heads",
    "speclab eagle": "EAGLE-1 head", "speclab eagle tree": "EAGLE-1 head",
    "speclab eagle chain": "EAGLE-1 head", "speclab eagle3": "EAGLE-3 head",
    "speclab eagle3 tree": "EAGLE-3 head", "speclab mtp": "MTP module",
    "speclab mtp chain": "MTP module"}


def read_json(path) -> dict:
    """A JSON file (a drafter's training record, its timed settings) as a dict."""
    return json.loads(path.read_text())


def bench_rows(name: str) -> dict[str, tuple[dict, dict[str, dict]]]:
    """A bench record by workload: workload -> (its summary, method -> row)."""
    record = read_record(name)
    summaries = record["workloads"] if "workloads" in record else [record]
    return {s["workload"]: (s, {r["method"]: r for r in s["rows"]}) for s in summaries}


def exit_figure(exits: list[int], live: dict, rec: dict, layers: int) -> Figure:
    """Section 9.1: top-1 agreement of every early exit with the target, with and without the adapter,
    live and recorded, against the share E/L of the layers a draft step runs."""
    fig, ax = plt.subplots(figsize=(WIDTH, 3.6))
    ax.plot(exits, live["plain"], "o-", label="exit, no adapter (live)")
    ax.plot(exits, live["adapter"], "s-", label="exit + adapter (live)")
    ax.plot(exits, rec["plain"], "x--", color="C0", alpha=0.6, label="no adapter (record)")
    ax.plot(exits, rec["adapter"], "x--", color="C1", alpha=0.6, label="adapter (record)")
    ax.plot(exits, [e / layers for e in exits], "k:", label="E / L, a draft step's share")
    ax.set_xlabel("exit layer E", fontsize=FONT + 1)
    ax.set_xticks(exits)
    ax.set_ylabel("top-1 = target", fontsize=FONT + 1)
    ax.set_ylim(0, 1)
    ax.tick_params(labelsize=FONT)
    ax.legend(fontsize=FONT)
    fig.tight_layout()
    return fig


def layer_skip_table(layers: int, name: str = "09_layer_skip.json") -> tuple[dict, dict]:
    """Section 9.2's record: (its summary, {(exit, with adapter): speed, tokens a pass, alpha, draft
    step c and verification v in decode steps, chapter 4's modelled speed, and that speed with the
    verification shortened by E/L as a shared cache would})."""
    summary, rows = bench_rows(name)["code"]
    base = rows["speclab target-only"]
    unit = base["stats"]["target_s"] / base["stats"]["rounds"]     # one decode step (s)
    table = {}
    for method, r in rows.items():
        m = re.fullmatch(r"speclab layer_skip E=(\d+)(\+adapter)?", method)
        if m is None:
            continue
        st, e = r["stats"], int(m.group(1))
        c = st["draft_s"] / st["drafted"] / unit
        v = st["target_s"] / st["rounds"] / unit
        table[e, m.group(2) is not None] = dict(
            speed=r["tokens_per_s"] / base["tokens_per_s"], tpr=st["mean_tokens_per_round"],
            alpha=st["alpha"], c=c, v=v, same=r["matches_target_only"],
            modelled=theory.speedup(st["alpha"], summary["k"], c, v),
            shared=theory.speedup(st["alpha"], summary["k"], c, v * (1 - e / layers)))
    return summary, table


def layer_skip_html(table: dict, layers: int):
    """Section 9.2's record as an HTML table: one row per exit."""
    rows = [[f"E={e}" + (" + adapter" if a else ""), f"{t['speed']:.2f}x", f"{t['tpr']:.2f}",
             f"{t['alpha']:.3f}", f"{t['c']:.2f}", f"{e / layers:.2f}", f"{t['v']:.2f}",
             f"{t['modelled']:.2f}x", f"{t['shared']:.2f}x"] for (e, a), t in sorted(table.items())]
    header = ["exit", "speed", "tokens/pass", "alpha", "draft step", "E/L", "verify", "modelled",
              "shared cache"]
    return html_table(rows, header, align="lrrrrrrrr")


def layer_skip_figure(table: dict) -> Figure:
    """Section 9.2: measured speed of every exit against target-only, and the speed chapter 4's model
    gives it with a cache shared with the verifier."""
    exits = sorted({e for e, _ in table})
    fig, ax = plt.subplots(figsize=(WIDTH, 3.4))
    for a, label in [(False, "no adapter"), (True, "adapter")]:
        es = [e for e in exits if (e, a) in table]
        ax.plot(es, [table[e, a]["speed"] for e in es], "o-", label=f"{label}: measured")
        ax.plot(es, [table[e, a]["shared"] for e in es], "x:", color=ax.lines[-1].get_color(),
                label=f"{label}: modelled, shared cache")
    ax.axhline(1, color="k", lw=0.8)
    ax.set_xlabel("exit layer E", fontsize=FONT + 1)
    ax.set_ylabel("speed vs target-only", fontsize=FONT + 1)
    ax.set_xticks(exits)
    ax.tick_params(labelsize=FONT)
    ax.legend(fontsize=FONT)
    fig.tight_layout()
    return fig


def unrolled_figure(by_step: dict, rec_step: dict) -> Figure:
    """Section 9.3: each head's top-1 agreement by draft position, chained on its own outputs, live
    (solid) and in its training record (dashed)."""
    fig, ax = plt.subplots(figsize=(WIDTH, 3.6))
    for (name, live), marker in zip(by_step.items(), "o^s"):
        pos = np.arange(1, len(live) + 1)
        ax.plot(pos, live, marker + "-", label=f"{name}, live")
        ax.plot(pos, rec_step[name], marker + "--", color=ax.lines[-1].get_color(), alpha=0.5,
                label=f"{name}, training record")
    ax.set_xlabel("draft position j (steps on its own outputs)", fontsize=FONT + 1)
    ax.set_ylabel("top-1 = target", fontsize=FONT + 1)
    ax.tick_params(labelsize=FONT)
    ax.legend(fontsize=FONT, ncol=2)
    fig.tight_layout()
    return fig


def trace_figure(traces: dict) -> Figure:
    """Section 9.4: drafted and accepted tokens round by round, one panel per (workload, rule)."""
    fig, axes = plt.subplots(2, 2, figsize=(WIDTH, 4.6), sharey=True)
    for (workload, rule), ax in zip(traces, axes.T.flat):
        rounds = traces[workload, rule].trace
        x = np.arange(1, len(rounds) + 1)
        ax.bar(x, [len(r.drafted) for r in rounds], color="#cccccc", label="drafted")
        ax.bar(x, [r.accepted for r in rounds], color="#4c72b0", label="accepted")
        ax.set_title(f"{workload}: {rule}", fontsize=FONT + 1)
        ax.set_xlabel("round", fontsize=FONT)
        ax.tick_params(labelsize=FONT)
    for ax in axes[:, 0]:
        ax.set_ylabel("tokens", fontsize=FONT)
    axes[0, 0].legend(fontsize=FONT)
    fig.tight_layout()
    return fig


def adaptive_speeds(adaptive: dict) -> tuple[dict, dict, dict, dict]:
    """Section 9.4's record: per workload, speed over target-only of each fixed K, of each confidence
    threshold and of the heuristic schedule, and the draft's alpha at the bench's own K."""
    fixed, conf, heur, alpha = {}, {}, {}, {}
    for workload, (summary, rows) in adaptive.items():
        base = rows["speclab target-only"]
        assert all(r["matches_target_only"] in (None, True) for r in rows.values())
        x = {name: r["tokens_per_s"] / base["tokens_per_s"] for name, r in rows.items()}
        fixed[workload] = {summary["k"]: x["speclab draft_model"]}
        fixed[workload].update({int(n.split("=")[1]): v for n, v in x.items()
                                if n.startswith("speclab draft_model K=")})
        conf[workload] = {float(n.split()[-1]): v for n, v in x.items()
                          if n.startswith("speclab draft_model adaptive-confidence ")}
        heur[workload] = x["speclab draft_model adaptive-heuristic"]
        alpha[workload] = rows["speclab draft_model"]["stats"]["alpha"]
    return fixed, conf, heur, alpha


def adaptive_html(fixed: dict, conf: dict, heur: dict, alpha: dict):
    """Section 9.4's record as an HTML table: a row per workload, a column per rule."""
    names = list(fixed)
    ks, ts = sorted(fixed[names[0]]), sorted(conf[names[0]])
    header = ["workload", "alpha"] + [f"K={k}" for k in ks] + ["heuristic"] + [f"stop {t:g}" for t in ts]
    rows = [[w, f"{alpha[w]:.3f}"] + [f"{fixed[w][k]:.2f}" for k in ks] + [f"{heur[w]:.2f}"]
            + [f"{conf[w][t]:.2f}" for t in ts] for w in names]
    return html_table(rows, header, align="l" + "r" * (len(header) - 1))


def adaptive_figure(fixed: dict, conf: dict, heur: dict, alpha: dict) -> Figure:
    """Section 9.4: speed against fixed K per workload, with the heuristic schedule and the confidence
    stop at each threshold as horizontal lines."""
    names = list(fixed)
    ks, ts = sorted(fixed[names[0]]), sorted(conf[names[0]])
    fig, axes = plt.subplots(1, len(names), figsize=(WIDTH, 3.4), sharey=True)
    for ax, w in zip(axes, names):
        ax.plot(ks, [fixed[w][k] for k in ks], "o-", color="#777777", label="fixed K")
        ax.axhline(heur[w], color="C0", lw=1.5, label="heuristic")
        for t, style in zip(ts, (":", "--", "-.")):
            ax.axhline(conf[w][t], color="C1", ls=style, lw=1.2, label=f"stop {t:g}")
        ax.set_title(f"{w} (alpha {alpha[w]:.2f})", fontsize=FONT + 1)
        ax.set_xlabel("K, or the bound", fontsize=FONT)
        ax.set_xticks(ks)
        ax.tick_params(labelsize=FONT)
    axes[0].set_ylabel("speed vs target-only", fontsize=FONT)
    axes[0].legend(fontsize=FONT - 1, loc="lower right")
    fig.tight_layout()
    return fig


def adaptive_best_threshold(workload: str = "code") -> float:
    """The confidence threshold that ran fastest on `workload` in section 9.4's record."""
    _, conf, _, _ = adaptive_speeds(bench_rows("09_adaptive.json"))
    return max(conf[workload], key=conf[workload].get)


def _panel(ax, title: str, reads: list, box: str, predicts: str, shade: float | None = None) -> None:
    """One drafter: the target as a column of layers, tokens in at the bottom; `reads`: (height, label)
    of what the drafter reads (-1: the tokens); `box`: the drafter; `shade`: the layers it runs."""
    bottom, top = 0.14, 0.80
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.12, 1)
    ax.axis("off")
    height = top - bottom
    ax.add_patch(Rectangle((0.04, bottom), 0.22, height, fc="#eef2f7", ec="#555555"))
    if shade:
        ax.add_patch(Rectangle((0.04, bottom), 0.22, shade * height, fc="#b7e4b0", ec="#555555"))
        ax.text(0.15, bottom + shade * height / 2, "E\nlayers", ha="center", va="center", fontsize=FONT)
    ax.text(0.15, 0.03, "tokens", ha="center", fontsize=FONT)
    ax.text(0.15, 0.84, "target", ha="center", fontsize=FONT)
    ax.add_patch(Rectangle((0.5, 0.34), 0.47, 0.32, fc="#f5d76e", ec="#555555"))
    ax.text(0.735, 0.5, box, ha="center", va="center", fontsize=FONT)
    for level, label in reads:
        y = bottom + level * height if level >= 0 else 0.06
        ax.add_patch(FancyArrowPatch((0.26, y), (0.5, 0.5), arrowstyle="-|>", mutation_scale=8,
                                     color="#4c72b0"))
        ax.text(0.28, y + 0.06, label, fontsize=FONT, color="#4c72b0")
    ax.set_title(title, fontsize=FONT + 1)
    ax.text(0.5, -0.1, predicts, ha="center", fontsize=FONT)


def drafter_panels() -> Figure:
    """Section 9.5: where each drafter of part II reads from the target, and what it predicts."""
    panels = [
        ("draft model (ch. 2-5)", [(-1, "tokens")], "a small\nmodel",
         "x(t+1), x(t+2), ...: a pass each"),
        ("Medusa (ch. 7)", [(1.0, "last hidden")], "K heads", "x(t+2) ... x(t+K+1) at once"),
        ("EAGLE-1 (ch. 8)", [(1.0, "feature f(t)"), (-1, "x(t+1)")], "one layer,\nlm_head",
         "f(t+1), so x(t+2); then on its f"),
        ("EAGLE-3 (ch. 8)", [(0.1, "low"), (0.5, "mid"), (0.9, "high"), (-1, "x(t+1)")],
         "fc, layer,\nown head", "x(t+2); then on its own output"),
        ("MTP (9.3)", [(1.0, "last hidden"), (-1, "x(t+1)")], "one block,\nlm_head",
         "x(t+2); chained on its output"),
        ("layer skip (9.1)", [(0.45, "layer E")], "norm,\nlm_head",
         "x(t+1), ...; the whole target verifies", 0.45),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(WIDTH, 5.2))
    for ax, spec in zip(axes.flat, panels):
        _panel(ax, *spec)
    fig.tight_layout()
    return fig


def added_weights(drafter, target: torch.nn.Module) -> tuple[int, int]:
    """The weights a drafter holds that the target does not (its own model, heads or adapter): how many,
    and the bytes they take in the dtype they are stored in."""
    if drafter is None:
        return 0, 0
    mine = {id(p) for p in target.parameters()}
    parts = [getattr(drafter, a) for a in ("heads", "head", "model") if hasattr(drafter, a)]
    module = drafter if isinstance(drafter, torch.nn.Module) else (parts or [None])[0]
    if module is None:
        return 0, 0
    own = [p for p in module.parameters() if id(p) not in mine]
    return sum(p.numel() for p in own), sum(p.numel() * p.element_size() for p in own)


def speed_ratios(rows: dict[str, dict]) -> dict[str, tuple[float, tuple | None]]:
    """Each row's speed over target-only, and its 95% interval over the prompts."""
    recorded = {m: speclab.measure.bench.BenchRow.from_record(r) for m, r in rows.items()}
    base = recorded["speclab target-only"]
    return {m: (r.tokens_per_s / base.tokens_per_s, speclab.measure.bench.speedup_interval(r, base))
            for m, r in recorded.items()}


def part2_rows(target: torch.nn.Module, drafters: dict, greedy: dict, sampled_rows: dict) -> tuple[dict, list]:
    """Section 9.5's table from part II's two records: per method, its speed over target-only on each
    (workload, temperature) column with the interval over prompts, tokens a pass (code, greedy),
    acceptance of drafts at T = 1, what it needs trained, the weights it adds, whether it is lossless
    and whether it gave the target's greedy text everywhere. Returns (rows, columns)."""
    columns = [(w, "greedy") for w in greedy] + [("code", "T=1")]
    speed = {(w, "greedy"): speed_ratios(rows_w) for w, (_, rows_w) in greedy.items()}
    speed["code", "T=1"] = speed_ratios(sampled_rows)
    rows = {}
    for m, r in greedy["code"][1].items():
        st, s_st = r["stats"], sampled_rows[m]["stats"]
        trained = TRAINED.get(m, "-")
        if m.startswith("speclab layer_skip"):
            trained = "exit adapter" if m.endswith("+adapter") else "nothing"
        weights, stored = added_weights(drafters.get(m), target)
        rows[m] = dict(x={col: speed[col][m] for col in columns},
                       tpr=st["mean_tokens_per_round"] if st and st["drafted"] else None,
                       accept=s_st["acceptance_rate"] if s_st and s_st["drafted"] else None,
                       trained=trained, weights=weights, mb=stored / 2**20,
                       lossless=st is None or st["lossless"],
                       same=all(rows_w[m]["matches_target_only"] in (None, True)
                                for _, rows_w in greedy.values()))
    return rows, columns


def short(method: str, lossless: bool = True) -> str:
    """A bench row's name as the tables print it: without 'speclab ', a * where it is not lossless."""
    return method.replace("speclab ", "") + ("" if lossless else "*")


def part2_html(rows: dict, columns: list, order: list[str]):
    """Section 9.5's table as HTML, rows in `order`."""
    header = ["method", "trained", "weights added"] + [
        w if t == "greedy" else f"{w} T=1" for w, t in columns] + ["accept T=1", "tok/pass"]
    body = []
    for m in order:
        row = rows[m]
        body.append([short(m, row["lossless"]), row["trained"], f"{row['weights']:,}"]
                    + [f"{row['x'][col][0]:.2f}x" for col in columns]
                    + [f"{row['accept']:.2f}" if row["accept"] is not None else "-",
                       f"{row['tpr']:.2f}" if row["tpr"] else "-"])
    return html_table(body, header, align="ll" + "r" * (len(header) - 2))


def part2_figure(rows: dict, columns: list, order: list[str]) -> Figure:
    """Section 9.5: every method's speed over target-only, greedy on three workloads (left) and sampled
    on code (right), with the 95% interval over the code prompts."""
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH, 5.6), sharey=True)
    y = np.arange(len(order))[::-1]
    marks = {"code": "o", "edit": "s", "quote": "^"}
    for ax, panel in zip(axes, ("greedy", "T=1")):
        for w, mark in marks.items():
            if (w, panel) not in columns:
                continue
            xs = [rows[m]["x"][w, panel][0] for m in order]
            spans = [rows[m]["x"][w, panel][1] for m in order]
            err = np.array([[x - s[0], s[1] - x] if s else [0, 0] for x, s in zip(xs, spans)]).T
            ax.errorbar(xs, y, xerr=err if w == "code" else None, fmt=mark, ms=4, capsize=2,
                        label=w + (" (95%)" if w == "code" else ""))
        ax.axvline(1, color="k", lw=0.8)
        ax.set_xlabel(f"speed vs target-only, {panel}", fontsize=FONT)
        ax.tick_params(labelsize=FONT)
        ax.legend(fontsize=FONT, loc="lower right")
    axes[0].set_yticks(y, [short(m, rows[m]["lossless"]) for m in order], fontsize=FONT)
    fig.tight_layout()
    return fig


def by_category(record: dict) -> dict[tuple[str, str], tuple[float, float | None]]:
    """A chat record by category: (method, category) -> (speed over target-only, tokens a target pass
    emits, None for a row that drafts nothing)."""
    out = {}
    for w, (_, rows_w) in record.items():
        base_tps = rows_w["speclab target-only"]["tokens_per_s"]
        for m, r in rows_w.items():
            st = r["stats"]
            tpr = st["mean_tokens_per_round"] if st and st["drafted"] else None
            out[m, w.removeprefix("chat-")] = (r["tokens_per_s"] / base_tps, tpr)
    return out


def category_html(record: dict, speeds: dict, labels: dict[str, str]):
    """A chat record as HTML: a row per category, target-only's tokens/s, then each labelled method's
    speed over it."""
    labels = {current_row(m): label for m, label in labels.items()}  # an older label names the row too
    body = []
    for w, (_, rows_w) in record.items():
        c = w.removeprefix("chat-")
        body.append([c, f"{rows_w['speclab target-only']['tokens_per_s']:.1f}"]
                    + [f"{speeds[m, c][0]:.2f}x" for m in labels])
    return html_table(body, ["category", "target tok/s"] + list(labels.values()),
                      align="l" + "r" * (len(labels) + 1))


def verify_steps(name: str = "part2_bench.json") -> list[float]:
    """The draft model's verification pass over K + 1 positions, in decode steps, per workload of a
    bench record (its model_check)."""
    return [s["model_check"]["verify_cost"] for s, _ in bench_rows(name).values()]


def tree_settings(folder) -> str:
    """An EAGLE head's timed settings (its tree.json), greedy and sampled, in words."""
    tree = json.loads((folder / "tree.json").read_text())
    describe = speclab.methods.eagle.describe_tree
    return f"{describe(tree)} (greedy);\n  {describe(tree.get('sampled', tree))} (sampled)"
