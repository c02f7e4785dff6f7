"""The rollout gate (chapter 12): promote a speculative configuration (the canary) over the one serving now
(the baseline) only where measured load says it pays, and say why not where it does not.

From the load test's rows (speclab.serving.load_test) for both, the canary is promoted when, at every
rate, its p95 time per output token is within max_p95_regression of the baseline's (the users' latency),
its output tokens/s within max_throughput_loss (the fleet's capacity), and its mean acceptance length at
least min_acceptance where it drafted (a head exported wrongly still serves correct text: acceptance is the
only symptom). Otherwise it is held, every failed condition named by rate; fallback_rate is the lowest
failing rate, where a per-batch-size K of 0 (vLLM's num_speculative_tokens_per_batch_size) should turn
speculation off.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Decision:
    promote: bool
    reasons: list[str] = field(default_factory=list)  # each failed condition, by rate (empty: promote)
    fallback_rate: float | None = None                 # the lowest rate that failed

    def __str__(self) -> str:
        if self.promote:
            return "promote: the canary is as fast or faster at every measured rate"
        return "hold: " + "; ".join(self.reasons)


def rollout_decision(baseline: Sequence[dict], canary: Sequence[dict], max_p95_regression: float = 0.05,
                     max_throughput_loss: float = 0.05, min_acceptance: float = 1.0) -> Decision:
    """Promote or hold `canary` against `baseline` (load-test rows with rate, tpot_ms_p95, tokens_per_s and
    mean_acceptance_length, the same rates in both)."""
    if not baseline or [r["rate"] for r in baseline] != [r["rate"] for r in canary]:
        raise ValueError("the baseline and the canary must be measured at the same rates, in the same order; got "
                         f"{[r['rate'] for r in baseline]} and {[r['rate'] for r in canary]}")
    reasons, failed = [], []
    for base, new in zip(baseline, canary):
        rate = base["rate"]
        before = len(reasons)
        if new["tpot_ms_p95"] > base["tpot_ms_p95"] * (1 + max_p95_regression):
            reasons.append(f"at {rate:g} req/s the p95 time per token rose from {base['tpot_ms_p95']:.1f} to "
                           f"{new['tpot_ms_p95']:.1f} ms")
        if new["tokens_per_s"] < base["tokens_per_s"] * (1 - max_throughput_loss):
            reasons.append(f"at {rate:g} req/s throughput fell from {base['tokens_per_s']:.0f} to "
                           f"{new['tokens_per_s']:.0f} tokens/s")
        tau = new.get("mean_acceptance_length")
        if tau is not None and tau < min_acceptance:
            reasons.append(f"at {rate:g} req/s the mean acceptance length was {tau:.2f}, below {min_acceptance:g}: "
                           "check the export (layer ids, d2t) before anything else")
        if len(reasons) > before:
            failed.append(rate)
    return Decision(not reasons, reasons, min(failed) if failed else None)
