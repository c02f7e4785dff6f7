"""Chapter 12 (from speclab to a serving engine): the vLLM records read back as tables, a figure and the
numbers the prose glues, and the arithmetic of a p95 measured on few requests. Plumbing only; the lesson's
code (speclab.serving's settings, exports and gate) stays in the notebook."""
from __future__ import annotations

from collections.abc import Sequence
import math
import textwrap

import matplotlib.pyplot as plt

from speclab.methods import REGISTRY, eagle
from speclab.serving import vllm_engine

# the one method this chapter follows through the engines by name (its prose and figure name EAGLE-3); the
# records key rows by the registry's names, and the lookup row is found in the registry (lookup_row)
E3 = eagle.NAME3
LIVE_TOLERANCE = vllm_engine.ACCEPTANCE_TOLERANCE  # the live run's check of vLLM's acceptance against speclab's

SPEEDS = {  # part III's records with speclab's eager target-only decode, and where its tokens/s sits in each
    "10_vllm_cpu": ("chapter 10's vLLM record", lambda r: r["rows"]["speclab target-only (eager)"]["tokens_per_s"]),
    "12_vllm_beside_speclab": ("this chapter's record", lambda r: r["rows"]["target-only"]["speclab"]["tokens_per_s"]),
    "13_block": ("chapter 13's block record", lambda r: r["rows"][0]["tokens_per_s"]),
    "13_suffix_pard": ("chapter 13's workloads", lambda r: max(w["rows"][0]["tokens_per_s"] for w in r["workloads"])),
}


def wrap(text: str, width: int = 88, indent: str = "  ") -> str:
    """`text` wrapped to `width` characters (the code column's), continuation lines indented by `indent` plus two
    spaces."""
    return textwrap.fill(text, width, subsequent_indent=indent + "  ", break_on_hyphens=False,
                         break_long_words=False)


def lookup_row(names) -> str:
    """The one row of `names` whose method drafts without trained weights (n-gram lookup in this chapter's
    records), as the registry says: the rows that are neither a method nor a configuration of one are skipped."""
    found = [n for n in names if n in REGISTRY and REGISTRY[n].weights is None]
    if len(found) != 1:
        raise ValueError(f"expected one row drafting without weights among {list(names)}, found {found}")
    return found[0]


def side_by_side(record: dict) -> tuple[list[list], dict[str, float]]:
    """12.3's table (method, each engine's tokens/s and mean acceptance length, the gap, outputs equal) and the
    numbers the prose glues: the widest gap among the exported heads, n-gram's gap, both target-only speeds
    and EAGLE-3's and n-gram's speedups over each engine's own target-only."""
    rows, gaps = [], {}
    for name, both in record["rows"].items():
        s, v = both["speclab"], both["vllm"]
        tau_s, tau_v = s["mean_acceptance_length"], v["mean_acceptance_length"]
        gap = "" if tau_s is None else f"{100 * (tau_v - tau_s) / tau_s:+.1f}%"
        if tau_s is not None:
            gaps[name] = abs(tau_v - tau_s) / tau_s
        rows.append([name, round(s["tokens_per_s"], 1), round(v["tokens_per_s"], 1),
                     "" if tau_s is None else f"{tau_s:.3f}", "" if tau_v is None else f"{tau_v:.3f}", gap,
                     str(s["same_as_target_only"] and v["same_as_target_only"])])
    base = record["rows"]["target-only"]
    ratio = {e: {n: r[e]["tokens_per_s"] / base[e]["tokens_per_s"] for n, r in record["rows"].items()}
             for e in ("speclab", "vllm")}
    lookup = lookup_row(record["rows"])
    heads = [n for n in gaps if n != lookup]
    numbers = {"worst_gap": 100 * max(gaps[n] for n in heads), "ngram_gap": 100 * gaps[lookup],
               "vllm_to": base["vllm"]["tokens_per_s"], "speclab_to": base["speclab"]["tokens_per_s"],
               "vllm_e3": ratio["vllm"][E3], "speclab_e3": ratio["speclab"][E3],
               "vllm_ngram": ratio["vllm"][lookup], "speclab_ngram": ratio["speclab"][lookup],
               "all_equal": all(r[e]["same_as_target_only"] for r in record["rows"].values() for e in r)}
    for n in gaps:
        rows[[r[0] for r in rows].index(n)].append(f"{ratio['speclab'][n]:.2f}x / {ratio['vllm'][n]:.2f}x")
    for r in rows:
        r += [""] * (8 - len(r))
    return rows, numbers


SIDE_BY_SIDE_HEADER = ["method", "speclab tok/s", "vLLM tok/s", "speclab tau", "vLLM tau", "gap",
                       "outputs = target-only", "speedup speclab / vLLM"]


def target_only_speeds(records: dict[str, dict]) -> dict[str, float]:
    """speclab's eager target-only tokens/s in each of part III's records (a description of the record: speed)."""
    return {SPEEDS[name][0]: SPEEDS[name][1](r) for name, r in records.items() if name in SPEEDS}


def load_table(load: dict) -> list[list]:
    """12.4's rows: configuration, arrival rate, output tokens/s, TPOT p50 and p95, drafts, mean acceptance."""
    return [[name, f"{r['rate']:g}", round(r["tokens_per_s"], 1), round(r["tpot_ms_p50"], 1),
             round(r["tpot_ms_p95"], 1), int(r["drafts"]),
             "" if r["mean_acceptance_length"] is None else f"{r['mean_acceptance_length']:.2f}"]
            for name, rows in load["rows"].items() for r in rows]


LOAD_HEADER = ["config", "req/s", "tok/s", "TPOT p50 (ms)", "TPOT p95 (ms)", "drafts", "tau"]


def load_figure(load: dict):
    """Output tokens/s and p95 time per output token against the arrival rate, one line a configuration."""

    fig, axes = plt.subplots(1, 2, figsize=(7.5, 3.2))
    for name, rows in load["rows"].items():
        rates = [r["rate"] for r in rows]
        axes[0].plot(rates, [r["tokens_per_s"] for r in rows], marker="o", label=name)
        axes[1].plot(rates, [r["tpot_ms_p95"] for r in rows], marker="o", label=name)
    for ax, what in zip(axes, ("output tokens/s", "p95 time per token (ms)")):
        ax.set_xscale("log")
        ax.set_xlabel("arrival rate (requests/s)", fontsize=10)
        ax.set_ylabel(what, fontsize=10)
        ax.tick_params(labelsize=9)
    axes[0].legend(fontsize=9)
    fig.tight_layout()
    return fig


def load_numbers(load: dict) -> dict[str, float]:
    """What 12.4's prose argues from, at the lowest and highest arrival rates and at 16 requests a second."""
    by = {name: {r["rate"]: r for r in rows} for name, rows in load["rows"].items()}
    low, high = min(load["rates"]), max(load["rates"])
    lookup = lookup_row(by)
    return {"low_rate": low, "high_rate": high,
            "off_tpot_low": by["off"][low]["tpot_ms_p50"], "e3_tpot_low": by[E3][low]["tpot_ms_p50"],
            "off_tps_high": by["off"][high]["tokens_per_s"], "e3_tps_high": by[E3][high]["tokens_per_s"],
            "e3_gain_high": by[E3][high]["tokens_per_s"] / by["off"][high]["tokens_per_s"],
            "ng_p95_16": by[lookup][16.0]["tpot_ms_p95"], "off_p95_16": by["off"][16.0]["tpot_ms_p95"],
            "fb_drafts_low": by["eagle3-fallback"][low]["drafts"],
            "fb_drafts_high": by["eagle3-fallback"][high]["drafts"],
            "fb_tps_high": by["eagle3-fallback"][high]["tokens_per_s"],
            "e3_tau": by[E3][low]["mean_acceptance_length"], "fallback_above": load["fallback_above"]}


def pass_ratio(batch_record: dict, batch: int, wide: int, narrow: int = 1) -> float:
    """Chapter 11's measured target pass at `batch` sequences: `wide` positions a row over `narrow`."""
    costs = batch_record["target_pass_ms"][str(batch)]
    return costs[str(wide)] / costs[str(narrow)]


def all_below_quantile(n: int, q: float = 0.95) -> float:
    """The chance that all of `n` independent requests fall below the true `q` quantile: no sample of n can
    bound that quantile from above with more confidence than 1 minus this."""
    return q ** n


def requests_for_upper_bound(confidence: float, q: float = 0.95) -> int:
    """The fewest requests whose largest value bounds the true `q` quantile from above with `confidence`."""
    return math.ceil(math.log(1 - confidence) / math.log(q))


def reasons_text(reasons: Sequence[str], width: int = 96) -> str:
    """A gate's reasons as an indented list, wrapped to `width` characters."""
    return "\n".join(textwrap.fill(r, width, initial_indent="  - ", subsequent_indent="    ") for r in reasons)


def side_caption(record: dict) -> str:
    """12.3's table caption: the record's engine version, host, threads, batch and K."""
    return (f"vLLM {record['vllm']} beside speclab, {record['cpu']}, {record['threads']} threads, batch 1, "
            f"K = {record['k']} "
            f"(tau: mean acceptance length)")


def load_caption(load: dict) -> str:
    """12.4's table caption: the record's engine version, host and sizes, and why a drafter's counts repeat."""
    return (f"vLLM {load['vllm']} server, {load['cpu']}: {load['requests']} requests a rate, "
            f"{load['max_new_tokens']} tokens each, at most {load['max_num_seqs']} at once, K = {load['k']}; "
            "greedy, the same prompts at every rate, so a configuration that always drafts makes the same drafts "
            "at each (only the fallback's change)")


def check_load_claims(load: dict, batch_record: dict) -> None:
    """Assert what 12.4's prose and figure caption say of the records: EAGLE-3's tokens a pass outweigh the
    cost of chapter 11's 5-wide pass at 16 sequences; EAGLE-3 has the lowest p95 at every rate, and at the two
    highest rates the most tokens/s while the fallback makes fewer than plain decoding; the fallback drafts as
    often as EAGLE-3 at the lowest rate and next to never at the highest; n-gram raises the p95 at 16 req/s."""
    by = {name: {r["rate"]: r for r in rows} for name, rows in load["rows"].items()}
    low, high = min(load["rates"]), max(load["rates"])
    tau = by[E3][low]["mean_acceptance_length"]
    assert tau > pass_ratio(batch_record, 16, 5), "prose: EAGLE-3's tokens a pass pay for the wider pass"
    for rate in load["rates"]:
        best = min(by, key=lambda n: by[n][rate]["tpot_ms_p95"])
        assert best == E3, f"caption: EAGLE-3 has the lowest p95 at {rate} req/s, not {best}"
    for rate in sorted(load["rates"])[-2:]:
        assert max(by, key=lambda n: by[n][rate]["tokens_per_s"]) == E3, "caption: EAGLE-3 most tok/s"
        fallback, off = by["eagle3-fallback"][rate]["tokens_per_s"], by["off"][rate]["tokens_per_s"]
        assert fallback < off, "caption: the fallback below plain decoding at the two highest rates"
    fallback_drafts = {rate: by["eagle3-fallback"][rate]["drafts"] for rate in (low, high)}
    assert fallback_drafts[low] == by[E3][low]["drafts"], "prose: the fallback drafts as often as EAGLE-3 at first"
    assert fallback_drafts[high] < 0.05 * by[E3][high]["drafts"], "prose: next to no drafting at the highest rate"
    assert by[lookup_row(by)][16.0]["tpot_ms_p95"] > by["off"][16.0]["tpot_ms_p95"], "prose: n-gram raises the p95"
    for name in (E3, lookup_row(by)):  # greedy on the same prompts: the batch does not change what is drafted
        assert len({(r["drafts"], r["mean_acceptance_length"]) for r in by[name].values()}) == 1, \
            f"caption: {name}'s drafts the same at every rate"


def eagle3_beside(run: dict, live: bool) -> str:
    """12.3's short run of EAGLE-3 in speclab and in vLLM, as lines that say where its numbers come from: a live
    run (`run_in_serving_env`'s record), checked here (both outputs equal speclab's target-only, vLLM's mean
    acceptance length within LIVE_TOLERANCE of speclab's), or the chapter's record, said as such."""
    rows = run["rows"][E3]
    if live:
        vllm_engine.check_agreement(run, E3, LIVE_TOLERANCE)
    where = ("live here, in the serving environment:" if live else
             "from this section's record, not run here (to run it live: install the serving\n"
             "  environment, README's 'Serving engines', and set SPECLAB_REQUIRE_SERVING=1):")
    lines = [where, f"  vLLM {run['vllm']}, {run['prompts']} prompt{'s' * (run['prompts'] != 1)} of "
                    f"{run['max_new_tokens']} new tokens, K = {run['k']}"]
    shown = {"vllm": "vLLM"}  # the engines' names as the prose writes them
    lines += [f"EAGLE-3 in {shown.get(engine, engine):8} mean acceptance length {r['mean_acceptance_length']:.3f}, "
              f"output = speclab's target-only: {r['same_as_target_only']}" for engine, r in rows.items()]
    return "\n".join(lines)
