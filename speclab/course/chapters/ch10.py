"""Chapter 10's plumbing: reading its records, drawing its figures and laying out its tables, so that the
pages keep in view only the speclab calls that teach."""
from __future__ import annotations

import ast
import inspect
import io
import textwrap
import tokenize

import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
import matplotlib.pyplot as plt

from speclab.fast_model import rotate_half
from speclab.measure.bench import BenchRow, round_costs
from speclab.methods import current_row

PARTS = ("matrix products", "attention", "generated kernels", "other operators", "framework")


def speclab_rows(record: dict) -> dict[str, BenchRow]:
    """A bench record's speclab rows by method name without the "speclab " prefix (eager and "(fast)")."""
    rows = map(BenchRow.from_record, record["rows"])  # labels as the rows are named now
    return {row.method.removeprefix("speclab "): row for row in rows if row.method.startswith("speclab ")}


def step_bars(rows: dict[str, tuple[dict, float]], floor: float | None = None) -> Figure:
    """Horizontal bars, one per step: `rows` maps a label to (a step_breakdown dict, the unit it is
    divided by). A dict holding only "total" is drawn grey (timed, not split). `floor`, in the same
    units, is drawn as a dashed line."""
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    grey = False
    for i, (name, (parts, unit)) in enumerate(rows.items()):
        if set(parts) == {"total"}:
            ax.barh(i, parts["total"] / unit, color="0.7", label=None if grey else "timed, not split")
            grey = True
            continue
        left = 0.0
        for j, part in enumerate(PARTS):
            ax.barh(i, parts[part] / unit, left=left, color=f"C{j}", label=part if i == 0 else None)
            left += parts[part] / unit
    if floor is not None:
        ax.axvline(floor, color="k", ls="--", lw=1, label="bandwidth floor")
    ax.set_yticks(range(len(rows)), list(rows), fontsize=9)
    ax.set_xlabel("a decode step, in that host's eager steps", fontsize=10)
    ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.4, -0.22), ncol=4, frameon=False)
    fig.tight_layout()
    return fig


def thread_scaling(record: dict) -> tuple[dict[int, dict], float, float]:
    """A profile record's compiled step and floor by thread count, and what the second core bought:
    (by threads, floor 1 thread / floor 2 threads, step 1 thread / step 2 threads)."""
    scaling = {int(n): at for n, at in record["thread_scaling"].items()}
    return (scaling, scaling[1]["floor_ms"] / scaling[2]["floor_ms"],
            scaling[1]["step_ms"] / scaling[2]["step_ms"])


def scaling_lines(record: dict) -> list[str]:
    """`thread_scaling` as printable lines, one per thread count and one for the second core's gain."""
    scaling, floor_gain, step_gain = thread_scaling(record)
    lines = [f"  {n} thread{'s' if n > 1 else ''}: step {at['step_ms']:.2f} ms, floor {at['floor_ms']:.2f} ms "
             f"({at['gemv_gbs']:.1f} GB/s): {at['step_over_floor']:.2f}x" for n, at in scaling.items()]
    return lines + [f"  the second core: floor {floor_gain:.2f}x lower, step {step_gain:.2f}x faster"]


def width_figure(curves: dict[str, dict[int, float]]) -> Figure:
    """A pass's cost by its positions, each curve in units of its own one-position pass: `curves` maps a
    label (host and path) to {positions: ms}."""
    fig, ax = plt.subplots(figsize=(7.0, 3.2))
    for i, (label, ms) in enumerate(curves.items()):
        widths = sorted(ms)
        style = "o-" if "live" in label else "s--"
        ax.plot(widths, [ms[w] / ms[widths[0]] for w in widths], style, color=f"C{i}",
                label=f"{label} (1 position: {ms[widths[0]]:.1f} ms)")
    ax.set_xlabel("positions in one pass (K + 1)", fontsize=10)
    ax.set_ylabel("cost in that path's steps", fontsize=10)
    ax.tick_params(labelsize=9)
    ax.legend(fontsize=9)
    fig.tight_layout()
    return fig


def path_table(bench: dict) -> tuple[dict[str, tuple[float, float]], list[list], list[str]]:
    """Every drafting method of a `bench --fast` record on both paths: {method: (eager speedup, fast
    speedup)}, and the rows and header of a table with the speedups, tokens/s, and each round's
    draft + verify + other cost in its own path's target steps (eager, then fast)."""
    rows = speclab_rows(bench)
    base_e, base_f = rows["target-only"], rows["target-only (fast)"]
    ratios, table = {}, []
    for name, row in rows.items():
        if name.endswith("(fast)") or name == "target-only":
            continue
        fast = rows[name + " (fast)"]
        e, f = row.tokens_per_s / base_e.tokens_per_s, fast.tokens_per_s / base_f.tokens_per_s
        ratios[name] = (e, f)
        ce, cf = round_costs(row, base_e), round_costs(fast, base_f)
        cost = lambda c: f"{c['draft']:.2f}+{c['verify']:.2f}+{c['other']:.2f}"  # noqa: E731
        table.append([name, f"{e:.2f} → {f:.2f}", f"{row.tokens_per_s:.0f} → {fast.tokens_per_s:.0f}",
                      cost(ce), cost(cf)])
    header = ["method", "speedup, eager → fast", "tok/s, eager → fast", "eager round d+v+o", "fast round d+v+o"]
    return ratios, table, header


def speedup_figure(ratios: dict[str, tuple[float, float]], host: str, fast: str = "fast path") -> Figure:
    """Each method's speedup over target-only on the eager path and on the fast path (named `fast`),
    joined by a line."""
    names = list(ratios)
    fig, ax = plt.subplots(figsize=(7.5, 5.2))
    for i, name in enumerate(names):
        e, f = ratios[name]
        ax.plot([e, f], [i, i], color="0.6", lw=1.5, zorder=1)
    ax.scatter([ratios[n][0] for n in names], range(len(names)), color="C0", label="eager path", zorder=2)
    ax.scatter([ratios[n][1] for n in names], range(len(names)), color="C3", label=fast, zorder=2)
    ax.axvline(1.0, color="k", lw=1, ls="--")
    ax.set_yticks(range(len(names)), names, fontsize=9)
    ax.invert_yaxis()
    ax.set_xlabel(f"speedup over target-only on the same path ({host})", fontsize=10)
    ax.tick_params(axis="x", labelsize=9)
    ax.legend(fontsize=9, loc="lower right")
    fig.tight_layout()
    return fig


def by_category(workloads: list[dict], methods: tuple[str, ...]) -> dict[str, dict]:
    """A `bench --workload chat` record's categories: for each, target-only's fast/eager tokens/s
    ("fast_x"), each method's (fast-path, eager-path) speedup ("ratios"), the distilled draft's fast-path
    acceptance ("alpha", where that row exists), the mean answer length ("tokens") and whether every
    drafting row's greedy output equals target-only's ("same": a list of booleans)."""
    out = {}
    now = {m: current_row("speclab " + m).removeprefix("speclab ") for m in methods}  # an older label names it too
    for w in workloads:
        rows = speclab_rows(w)
        be, bf = rows["target-only"], rows["target-only (fast)"]
        ratios = {m: (rows[now[m] + " (fast)"].tokens_per_s / bf.tokens_per_s,
                      rows[now[m]].tokens_per_s / be.tokens_per_s) for m in methods}
        draft = rows.get("draft_model (fast)")
        out[w["workload"].removeprefix("chat-")] = dict(
            fast_x=bf.tokens_per_s / be.tokens_per_s, ratios=ratios,
            alpha=draft.alpha if draft is not None else None,
            tokens=be.new_tokens / len(be.prompt_seconds),
            same=[r.matches_target_only for n, r in rows.items() if n != "target-only"], rows=rows)
    return out


def category_rows(cats: dict[str, dict], methods: tuple[str, ...]) -> list[list]:
    """Table rows for `by_category`: category, target-only fast/eager, then "fast (eager)" per method."""
    return [[name, round(c["fast_x"], 2)] + [f"{c['ratios'][m][0]:.2f} ({c['ratios'][m][1]:.2f})" for m in methods]
            for name, c in cats.items()]


def width_steps(workload: dict) -> dict[int, float]:
    """A bench record's compiled pass by width, in single steps (its fast_path width_ms over width 1)."""
    ms = {int(w): v for w, v in workload["fast_path"]["width_ms"].items()}
    return {w: v / ms[1] for w, v in ms.items()}


def trimmed(source: str, docstrings: bool = True, comments: bool = True) -> str:
    """`source` without its docstrings and/or its comments (the blank lines they leave dropped)."""
    drop = set()
    if not docstrings:
        for node in ast.walk(ast.parse(source)):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                    and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                drop.update(range(body[0].lineno, body[0].end_lineno + 1))
    lines = source.splitlines()
    if not comments:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                row, col = tok.start
                lines[row - 1] = lines[row - 1][:col].rstrip()
    return "\n".join(line for i, line in enumerate(lines, 1) if i not in drop and line.strip())


def show_source(obj, width: int = 84, docstrings: bool = True, comments: bool = True) -> None:
    """Print `obj`'s source, dedented (without docstrings or comments when told), a line longer than
    `width` folded at a space onto an indented next line (marked with a trailing backslash), so that it
    fits the book's column."""
    source = trimmed(textwrap.dedent(inspect.getsource(obj)).rstrip(), docstrings, comments)
    for line in source.splitlines():
        if len(line) <= width:
            print(line)
            continue
        indent = " " * (len(line) - len(line.lstrip()) + 4)
        parts = textwrap.wrap(line, width - 2, subsequent_indent=indent, drop_whitespace=True,
                              break_long_words=False, break_on_hyphens=False)
        print(" \\\n".join(parts))


def attention(self, layer, h, slots, cos, sin, mask, end):
    """speclab.fast_model.FastLlama.attention for one sequence in cache row 0, uncompiled, with the
    branches for a batch and for compiled few-row passes left out: section 10.2's listing. `self` is
    the FastLlama; tests/course/chapters/test_ch10.py checks that both give the same."""
    n, d = h.shape[1], self.head_dim
    qk, v = self.linear(h, layer.qkv).split([(self.heads + self.kv_heads) * d,
                                             self.kv_heads * d], dim=-1)
    qk = qk.view(1, n, -1, d).transpose(1, 2)   # (1, heads + kv_heads, n, d)
    qk = qk * cos + rotate_half(qk) * sin       # q and k rotated in one call
    q, k = qk.split([self.heads, self.kv_heads], dim=1)
    v = v.view(1, n, -1, d).transpose(1, 2)
    keys, values = layer.keys[:1], layer.values[:1]   # this sequence's cache row
    keys.index_copy_(2, slots[0], k)                  # written at its slots, in place
    values.index_copy_(2, slots[0], v)
    o = F.scaled_dot_product_attention(               # reads every slot up to `end`;
        q, keys[:, :, :end], values[:, :, :end],      # the mask says which each sees
        attn_mask=mask, enable_gqa=self.heads != self.kv_heads)
    return self.linear(o.transpose(1, 2).reshape(1, n, -1), layer.out)


def records_table(records: dict[str, dict]) -> tuple[list[list], list[str]]:
    """`profile --fast compiled` records side by side (label -> record): threads, eager step, compile
    alone, static + compiled, the floor (ms and the GB/s it divides by) and compiled over floor."""
    rows = []
    for label, r in records.items():
        fast = r["steps"]["fast"]["total"]
        rows.append([label, r["threads"], f"{r['steps']['eager']['total']:.2f}", f"{r['compiled_alone_ms']:.2f}",
                     f"{fast:.2f}", f"{r['floor_ms']:.2f}", f"{r['gemv_bandwidth_gbs']:.1f}",
                     f"{fast / r['floor_ms']:.2f}"])
    header = ["host", "threads", "eager ms", "compile alone ms", "static + compiled ms", "floor ms",
              "floor GB/s", "compiled / floor"]
    return rows, header
