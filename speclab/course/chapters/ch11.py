"""Chapter 11 (speculation under load): the batch sweep's record read back as tables, figures and the
numbers the prose glues. Plumbing only; the lesson's code stays in the notebook."""
from __future__ import annotations

import matplotlib.pyplot as plt

from speclab.course.notebook import read_record
from speclab.measure import batching

DM, PL, EAGLE_CHAIN = batching.DRAFT_MODEL, batching.PROMPT_LOOKUP, batching.EAGLE_CHAIN  # the sweep's rows
METHODS_KEYS = {DM: "dm", PL: "pl", EAGLE_CHAIN: batching.EAGLE}  # the prefix of each one's glued numbers ("dm_b1")


def sweep_record(name: str = "11_batch_static") -> dict:
    """The batch sweep's record, its methods named as the sweep names them now (batching.current_names)."""
    return batching.current_names(read_record(name))


def pass_costs(record: dict) -> dict[int, dict[int, float]]:
    """The target's measured pass time (ms) by batch size, then by width (positions a row)."""
    return {int(b): {int(w): ms for w, ms in by_w.items()} for b, by_w in record["target_pass_ms"].items()}


def roof_ms(record: dict, tokens: int) -> float:
    """The roofline's time (ms) for a pass over `tokens` tokens of the record's float32 target."""
    weight_bytes = record["weight_bytes"]
    return batching.roofline_ms(weight_bytes, weight_bytes / 4, tokens, record["bandwidth_gbs"], record["gflops"])


def ridge_tokens(record: dict) -> float:
    """Tokens a pass at which the compute roof meets the bandwidth roof (float32: 4 bytes, 2 flops a weight)."""
    return record["gflops"] * 4 / (2 * record["bandwidth_gbs"])


def cost_grid_text(record: dict) -> str:
    """The pass-cost grid as text: ms per pass (the roofline's ms) by batch size and width."""
    costs = pass_costs(record)
    widths = sorted(costs[1])
    lines = ["batch  " + "  ".join(f"w={w:<2d} ms (roof)" for w in widths)]
    for b, by_w in costs.items():
        lines.append(f"{b:5d}  " + "  ".join(f"{by_w[w]:6.1f} ({roof_ms(record, b * w):4.1f})" for w in widths))
    return "\n".join(lines)


def cost_numbers(record: dict) -> dict[str, float]:
    """What 11.2's prose argues from: the roofs, the ridge, steps at batch 1 and 64, how many steps a
    5-wide pass costs there, and how far above its roofline the 5-wide pass at batch 64 runs."""
    costs = pass_costs(record)
    big = max(costs)
    return {"gbs": record["bandwidth_gbs"], "gflops": record["gflops"], "ridge": ridge_tokens(record),
            "step1_ms": costs[1][1], "step64_ms": costs[big][1],
            "step1_over_roof": costs[1][1] / roof_ms(record, 1),
            "verify5_b1": costs[1][5] / costs[1][1], "verify5_b64": costs[big][5] / costs[big][1],
            "pass64_5_ms": costs[big][5], "roof64_5_ms": roof_ms(record, big * 5), "tokens64_5": big * 5,
            "pass64_5_over_roof": costs[big][5] / roof_ms(record, big * 5),
            "min_over_roof": min(ms / roof_ms(record, b * w) for b, by_w in costs.items() for w, ms in by_w.items()),
            # exercise 1: prompt lookup's break-even tokens a round at K = 1 (a 2-wide pass in one-wide steps)
            "ex1_b16": costs[16][2] / costs[16][1], "ex1_b64": costs[big][2] / costs[big][1]}


def plot_pass_costs(record: dict):
    """Figure: ms per pass against tokens in the pass, one line per batch size, and the roofline."""

    costs = pass_costs(record)
    fig, ax = plt.subplots(figsize=(7.2, 4))
    for b, by_w in costs.items():
        ax.plot([b * w for w in by_w], list(by_w.values()), "o-", ms=3, label=f"B={b}")
    span = sorted({b * w for b, by_w in costs.items() for w in by_w})
    ax.plot(span, [roof_ms(record, n) for n in span], "k--", label="roofline")
    ax.axvline(ridge_tokens(record), color="grey", lw=0.8, ls=":")
    ax.set(xscale="log", yscale="log", xlabel="tokens in the pass (B x width)", ylabel="ms per pass")
    ax.legend(fontsize=9, ncol=2)
    fig.tight_layout()
    return fig


def sweep_text(record: dict) -> str:
    """The sweep's summary: target-only tokens/s and each method's best speedup (its K) by batch size."""
    methods = list(record["summary"])
    base = {r["batch"]: r["tokens_per_s"] for r in record["rows"] if r["method"] == "target-only"}
    lines = ["batch  target tok/s  " + "  ".join(f"{m:>15s}" for m in methods)]
    for b in record["batch_sizes"]:
        s = [record["summary"][m] for m in methods]
        lines.append(f"{b:5d}  {base[b]:12.0f}  " + "  ".join(
            f"{x['best_speedup'][str(b)]:8.2f}x K={x['best_k'][str(b)]}" for x in s))
    lines.append("speculation stops paying from batch:")
    for m in methods:
        lines.append(f"  {m}: {record['summary'][m]['crossover_measured'] or 'never (to 64)'}")
    return "\n".join(lines)


def sweep_checks(record: dict) -> dict:
    """The sweep's facts the prose states, each computed: rows equal to target-only, prompts a batch
    size, who is fastest at batch 1 and at the largest batch, whether every best speedup fell, which K
    EAGLE's chain kept."""
    rows, summary, sizes = record["rows"], record["summary"], record["batch_sizes"]
    methods = list(summary)
    big = str(max(sizes))
    best = {m: {int(b): x for b, x in summary[m]["best_speedup"].items()} for m in methods}
    decoded = {r["batch"]: r["new_tokens"] // record["max_new_tokens"] for r in rows if r["method"] == "target-only"}
    eagle_ks = {summary[EAGLE_CHAIN]["best_k"][str(b)] for b in sizes if b > 1}
    return {"sequences": sum(r["new_tokens"] // record["max_new_tokens"] for r in rows),
            "equal": sum(r["equal_rows"] for r in rows), "decoded": decoded,
            "fastest_b1": max(methods, key=lambda m: best[m][1]),
            "fastest_big": max(methods, key=lambda m: best[m][int(big)]),
            "all_fell": all(best[m][max(sizes)] < best[m][1] for m in methods),
            "eagle_one_k": eagle_ks.pop() if len(eagle_ks) == 1 else None}


def plot_sweep(record: dict):
    """Figure: speedup over target-only against batch size, a panel per method, a line per K, and the
    rounds model's best-K prediction dotted."""

    methods, sizes, rows = list(record["summary"]), record["batch_sizes"], record["rows"]
    fig, axes = plt.subplots(1, len(methods), figsize=(7.5, 3.4), sharey=True)
    for ax, m in zip(axes, methods):
        for k in record["ks"]:
            picked = [r for r in rows if r["method"] == m and r["k"] == k]
            ax.plot([r["batch"] for r in picked], [r["speedup"] for r in picked], "o-", ms=3, label=f"K={k}")
        pred = record["summary"][m]["predicted_best"]
        ax.plot(sizes, [pred[str(b)] for b in sizes], "k:", label="rounds model (11.4)")
        ax.axhline(1, color="grey", lw=0.8)
        ax.set_xscale("log")
        ax.set_xticks(sizes, [str(b) for b in sizes], fontsize=9)
        ax.minorticks_off()
        ax.set_title(m, fontsize=10)
        ax.set_xlabel("batch size")
    axes[0].set_ylabel("speedup over target-only")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def models_text(record: dict) -> str:
    """The measured best-K speedup beside the rounds model's and the naive model's, and each crossover."""
    sizes = record["batch_sizes"]
    lines = ["best-K speedup      batch" + "".join(f"{b:>6d}" for b in sizes)]
    for m in record["summary"]:
        s = record["summary"][m]
        for what, key in (("measured", "best_speedup"), ("rounds model", "predicted_best"),
                           ("naive model", "naive_best")):
            lines.append(f"{m:14s}{what:>15s}" + "".join(f"{s[key][str(b)]:6.2f}" for b in sizes))
    lines.append("alpha at batch 1 (calibration): "
                 + ", ".join(f"{m} {a:.2f}" for m, a in record["alpha"].items()))
    lines.append("largest tail (rounds the batch ran / rounds its rows needed):")
    lines.append("  " + ", ".join(f"{m} {max(r['tail'] for r in record['rows'] if r['method'] == m):.2f}"
                                  for m in record["summary"]))
    lines.append("crossover (measured, rounds model, naive model):")
    for m, s in record["summary"].items():
        said = [str(s[k] or "none") for k in ("crossover_measured", "crossover_predicted", "crossover_naive")]
        lines.append(f"  {m}: " + ", ".join(said))
    return "\n".join(lines)


def model_numbers(record: dict) -> dict[str, float | str]:
    """What 11.4's prose argues from: the naive and rounds models against the measured speedups, the
    largest tail, the target's speed on the calibration and timed prompts."""
    summary, sizes, rows = record["summary"], record["batch_sizes"], record["rows"]
    dm, big = summary[DM], str(max(sizes))
    cal = {r["batch"]: r["tokens_per_s"] for r in record["calibration_rows"] if r["method"] == "target-only"}
    timed = {r["batch"]: r["tokens_per_s"] for r in rows if r["method"] == "target-only"}
    errors = {(m, b): summary[m]["predicted_best"][str(b)] / summary[m]["best_speedup"][str(b)] - 1
              for m in summary for b in sizes if b >= 8}
    worst = max(errors, key=lambda c: abs(errors[c]))
    err = abs(errors[worst])
    return {"naive_dm_64": dm["naive_best"][big], "measured_dm_64": dm["best_speedup"][big],
            "max_tail_dm": max(r["tail"] for r in rows if r["method"] == DM),
            "cal_target_b1": cal[1], "timed_target_b1": timed[1],
            "rounds_dm_1": dm["predicted_best"]["1"], "measured_dm_1": dm["best_speedup"]["1"],
            "rounds_pl_cross": str(summary[PL]["crossover_predicted"]),
            "rounds_err_large": err, "rounds_err_method": worst[0], "rounds_err_batch": worst[1],
            "rounds_err_pred": summary[worst[0]]["predicted_best"][str(worst[1])],
            "rounds_err_meas": summary[worst[0]]["best_speedup"][str(worst[1])],
            "naive_over_all": all(summary[m]["naive_best"][str(b)] > summary[m]["best_speedup"][str(b)]
                                  for m in summary for b in sizes),
            "crossovers_agree": all(s["crossover_predicted"] == s["crossover_measured"] for s in summary.values())}


def policy_analysis(record: dict) -> tuple[str, dict]:
    """The measured policy against the best fixed K and K = 4, per method and batch size, with how far
    the repeats moved the rows compared: (the table as text, the numbers the prose glues)."""
    rows, sizes, summary = record["rows"], record["batch_sizes"], record["summary"]
    lines, out, beyond_all = [], {}, 0
    for m, s in summary.items():
        fixed = {(r["batch"], r["k"]): r for r in rows if r["method"] == m}
        lines.append(f"{m}: policy K by batch " + ", ".join(f"{b}: {k}" for b, k in s["policy_k"].items()))
        lines.append("  batch  policy  best fixed   K=4  short  repeats moved (policy, best)")
        worst, beyond = 0.0, 0
        for b in sizes:
            pol, best = s["policy_speedup"][str(b)], s["best_speedup"][str(b)]
            kp, kb = s["policy_k"][str(b)], s["best_k"][str(b)]
            noise = max(fixed[b, k]["spread"] if k else 0.0 for k in (kp, kb))
            worst = max(worst, best - pol)
            beyond += (best - pol) > noise * best
            lines.append(f"  {b:5d}  {pol:6.2f}  {best:10.2f}  {s['k4_speedup'].get(str(b), float('nan')):4.2f}"
                         f"  {max(best - pol, 0):5.2f}  {100 * fixed[b, kp]['spread'] if kp else 0:4.0f}%, "
                         f"{100 * fixed[b, kb]['spread']:3.0f}%")
        key = m.replace(" ", "_")
        out[f"policy_worst_{key}"] = max(worst, 0.0)
        out[f"policy_wins_{key}"] = sum(s["policy_speedup"][str(b)] > s["k4_speedup"].get(str(b), 0) for b in sizes)
        beyond_all += beyond
    pl = summary[PL]
    off = [b for b in sizes if pl["policy_k"][str(b)] == 0 and pl["policy_speedup"][str(b)] > pl["best_speedup"][str(b)]]
    losing = [b for b in sizes if pl["policy_k"][str(b)] > 0 and pl["policy_speedup"][str(b)] < 1]
    out.update(policy_exact=sum(summary[m]["policy_k"][str(b)] == summary[m]["best_k"][str(b)]
                                for m in summary for b in sizes),
               cells_all=len(summary) * len(sizes), policy_beyond_all=beyond_all,
               pl_off=" and ".join(map(str, off)) or "none", pl_losing=" and ".join(map(str, losing)) or "none")
    return "\n".join(lines), out


POLICY_HEADER = ["method", "batch", "policy's K", "its speedup", "best fixed K", "fixed K = 4"]


def policy_table(record: dict) -> list[list]:
    """11.5's table: a row per (method, batch size) with the policy's K ('off' for K = 0) and, in the
    timed rows, its speedup, the best fixed K's speedup (that K) and fixed K = 4's."""
    out = []
    for m in METHODS_KEYS:
        s = record["summary"][m]
        for b in record["batch_sizes"]:
            key = str(b)
            k = s["policy_k"][key]
            out.append([m, b, k if k else "off", f"{s['policy_speedup'][key]:.2f}x",
                        f"{s['best_speedup'][key]:.2f}x (K={s['best_k'][key]})",
                        f"{s['k4_speedup'].get(key, float('nan')):.2f}x"])
    return out


def margin_changes(record: dict, margin: float) -> list[dict]:
    """The (method, batch size) cells where a policy that takes the smallest K within `margin` of the
    fastest on the calibration rows picks another K than the record's policy (the fastest there): each
    with both picks and what they ran at in the timed rows (K = 0: 1.0x), beside the best fixed K in
    hindsight (11.3's table)."""
    summary, sizes = record["summary"], record["batch_sizes"]
    methods = list(summary)
    cal_rows = batching.rows_from_dicts(record["calibration_rows"])
    by_margin = batching.measured_policy(cal_rows, methods, tie=margin)
    timed = {(r["method"], r["batch"], r["k"]): r["speedup"] for r in record["rows"]}
    out = []
    for m in methods:
        for b in sizes:
            k_margin, k_policy = by_margin[m][b], summary[m]["policy_k"][str(b)]
            if k_margin != k_policy:
                out.append({"method": m, "batch": b,
                            "margin_k": k_margin, "margin_x": timed[m, b, k_margin] if k_margin else 1.0,
                            "policy_k": k_policy, "policy_x": summary[m]["policy_speedup"][str(b)],
                            "best_k": summary[m]["best_k"][str(b)], "best_x": summary[m]["best_speedup"][str(b)]})
    return out


def margin_text(changes: list[dict], record: dict) -> str:
    """margin_changes as lines: the margin's pick, the policy's pick, the best fixed K in hindsight."""
    lines = [f"{c['method']}, batch {c['batch']}: margin K={c['margin_k']} {c['margin_x']:.2f}x;"
             f" policy K={c['policy_k']} {c['policy_x']:.2f}x; hindsight best K={c['best_k']} {c['best_x']:.2f}x"
             for c in changes]
    cells = len(record["summary"]) * len(record["batch_sizes"])
    return "\n".join(lines + [f"the margin changed {len(changes)} of {cells} choices (timed rows' speedups)"])


def round_parts(record: dict, method: str = EAGLE_CHAIN, batch: int = 64, k: int = 4) -> dict[str, float]:
    """One row's drafting and verification time a round (ms), for exercise 3."""
    r = next(r for r in record["rows"] if r["method"] == method and r["batch"] == batch and r["k"] == k)
    return {"ex3_draft_ms": r["draft_ms"], "ex3_verify_ms": r["verify_ms"],
            "ex3_round_ms": r["draft_ms"] + r["verify_ms"]}


LATENCY_HEADER = ["batch", "method", "ITL p95 (ms)", "ITL mean (ms)", "K", "tok/s"]


def latency_rows(record: dict, batches: tuple[int, ...] = (1, 8, 64)) -> list[list]:
    """Rows of the latency table (LATENCY_HEADER): batch, method, the 95th percentile and the mean of the
    inter-token gap (ms), its best K (0 for target-only), tokens/s."""
    out = []
    for b in batches:
        for m in ["target-only"] + list(record["summary"]):
            k = 0 if m == "target-only" else record["summary"][m]["best_k"][str(b)]
            r = next(r for r in record["rows"] if r["method"] == m and r["batch"] == b and r["k"] == k)
            out.append([b, m, round(r["itl_p95_ms"], 1), round(r["itl_mean_ms"], 1), k,
                        round(r["tokens_per_s"])])
    return out


def latency_checks(table: list[list]) -> dict[str, float | bool]:
    """From latency_rows: whether every speculative row has a lower mean gap and a higher p95 than
    target-only at its batch size, and the EAGLE chain against target-only at the largest batch."""
    base = {row[0]: row for row in table if row[1] == "target-only"}
    spec = [row for row in table if row[1] != "target-only"]
    big = max(base)
    eagle = next(row for row in table if row[0] == big and row[1] == EAGLE_CHAIN)
    return {"mean_lower_all": all(row[3] < base[row[0]][3] for row in spec),
            "p95_higher_all": all(row[2] > base[row[0]][2] for row in spec),
            "itl_target_64": base[big][3], "p95_target_64": base[big][2],
            "itl_eagle_64": eagle[3], "p95_eagle_64": eagle[2], "p95_ratio_64": eagle[2] / base[big][2]}


def fallback_ratio(load_record: dict) -> dict[str, float]:
    """Chapter 12's vLLM load test at its highest rate: EAGLE-3 switched off by its schedule (K = 0)
    against a server configured without speculation, tokens/s and their ratio."""
    top = max(load_record["rates"])
    pick = {c: next(r for r in rows if r["rate"] == top)["tokens_per_s"] for c, rows in load_record["rows"].items()}
    return {"fb_tps": pick["eagle3-fallback"], "off_tps": pick["off"],
            "fb_ratio": pick["eagle3-fallback"] / pick["off"]}
