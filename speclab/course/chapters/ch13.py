"""Chapter 13 (past the token-wise rule): its bench records read back as tables, a figure and the numbers
the prose glues. Plumbing only; the lesson's code stays in the notebook."""
from __future__ import annotations

import matplotlib.pyplot as plt

from speclab.course.notebook import read_record
from speclab.measure.bench import BenchRow
from speclab.methods import current_row


def workloads(name: str) -> list[dict]:
    """A bench --json record's workloads: one workload's table, or its list under "workloads"."""
    record = read_record(name)
    return record.get("workloads", [record])


def record_line(name: str, workloads: dict | list[dict]) -> str:
    """A record's host and settings (from its first workload) and the prompts of each workload, in three
    lines that fit the column."""
    workloads = [workloads] if isinstance(workloads, dict) else workloads
    first = workloads[0]
    prompts = ", ".join(f"{len(w['rows'][0]['prompt_seconds'])} {w['workload']}" for w in workloads)
    return (f"record ({name}): {first['cpu']}, {first['threads']} threads, {first.get('fast') or 'eager'} path,\n"
            f"  torch {first['torch']}, K = {first['k']}, {first['max_new_tokens']} new tokens, "
            f"temperature {first['temperature']},\n  prompts: {prompts}")


def bench_table(workload: dict, names: list[str] | None = None) -> tuple[str, dict[str, dict]]:
    """A workload's rows (all, or those in `names`) as text: tokens/s, speedup over target-only, tokens a
    round and drafting ms a round; and the same numbers by method name (speedup, tpr, draft_ms, same)."""
    rows = {row.method: row for row in map(BenchRow.from_record, workload["rows"])}
    names = None if names is None else [current_row(n) for n in names]  # an older label names the row too
    base = rows["speclab target-only"].tokens_per_s
    lines = [f"{'method':22} {'tok/s':>6} {'speedup':>8} {'tok/round':>10} {'draft ms/round':>15}"]
    out: dict[str, dict] = {}
    for name, row in rows.items():
        if names is not None and name not in names:
            continue
        rounds = row.stats.rounds if row.stats else 0
        draft_ms = 1000 * row.stats.draft_s / rounds if rounds and row.has_drafts else None
        out[name] = dict(speedup=row.tokens_per_s / base, tpr=row.tokens_per_round, draft_ms=draft_ms,
                         same=row.matches_target_only)
        lines.append(f"{name.removeprefix('speclab '):22} {row.tokens_per_s:6.1f} {row.tokens_per_s / base:7.2f}x "
                     + (f"{row.tokens_per_round:10.2f} " if row.tokens_per_round else " " * 11)
                     + (f"{draft_ms:15.2f}" if draft_ms is not None else ""))
    return "\n".join(lines).rstrip(), out


def block_pairs(rows: dict[str, dict]) -> list[tuple[str, str]]:
    """(token-wise row, block row) name pairs of a bench --block table."""
    return [(m, m + " (block)") for m in rows if m + " (block)" in rows]


def block_gains(rows: dict[str, dict]) -> dict[str, float]:
    """Tokens a round with block verification over the token-wise rule's, by drafter."""
    return {m: rows[b]["tpr"] / rows[m]["tpr"] for m, b in block_pairs(rows)}


def plot_block(rows: dict[str, dict]):
    """Figure: tokens a round and speedup, token-wise against block verification, a pair of bars per
    drafter."""

    pairs = block_pairs(rows)
    names = [m.removeprefix("speclab ") for m, _ in pairs]
    x = range(len(pairs))
    fig, axes = plt.subplots(1, 2, figsize=(7.5, 3.2))
    for ax, key, label in zip(axes, ("tpr", "speedup"), ("tokens a round", "speedup over target-only")):
        for shift, (rule, pick) in zip((-0.2, 0.2), (("token-wise", 0), ("block", 1))):
            ax.bar([i + shift for i in x], [rows[p[pick]][key] for p in pairs], width=0.4, label=rule)
        for i, (m, b) in enumerate(pairs):
            gain = 100 * (rows[b][key] / rows[m][key] - 1)
            ax.text(i + 0.2, rows[b][key], f"{gain:+.0f}%", ha="center", va="bottom", fontsize=9)
        ax.set_xticks(list(x), names, rotation=20, fontsize=9)
        ax.set_ylabel(label)
        ax.set_ylim(0, 1.3 * max(rows[n][key] for p in pairs for n in p))
    axes[0].legend(fontsize=9, ncol=2, loc="upper left")
    fig.tight_layout()
    return fig


def part2_speedups(name: str = "part2_bench") -> tuple[str, dict[tuple[str, str], float]]:
    """The part II bench record's host and its speedups over target-only by (workload, method)."""
    record = read_record(name)
    out = {}
    for w in record["workloads"]:
        base = next(r for r in w["rows"] if r["method"] == "speclab target-only")["tokens_per_s"]
        for r in w["rows"]:
            out[w["workload"], r["method"]] = r["tokens_per_s"] / base
    return record["workloads"][0]["cpu"], out
