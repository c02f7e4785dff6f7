"""The rollout gate: promote only where every rate says so, hold with the reasons, and refuse unlike data."""
from __future__ import annotations

import pytest

from speclab.serving.rollout import rollout_decision


def rows(*values):
    return [{"rate": rate, "tokens_per_s": tps, "tpot_ms_p95": p95, "mean_acceptance_length": tau}
            for rate, tps, p95, tau in values]


BASE = rows((0.5, 60, 20.0, None), (2, 200, 25.0, None), (8, 400, 40.0, None))


def test_a_canary_faster_everywhere_is_promoted():
    canary = rows((0.5, 60, 12.0, 3.0), (2, 205, 15.0, 3.0), (8, 395, 39.0, 2.9))  # within 5% at 8
    decision = rollout_decision(BASE, canary)
    assert decision.promote and decision.fallback_rate is None and str(decision).startswith("promote")


def test_a_canary_that_loses_under_load_is_held_with_the_rate_where_it_starts():
    canary = rows((0.5, 60, 12.0, 3.0), (2, 150, 30.0, 3.0), (8, 250, 70.0, 3.0))
    decision = rollout_decision(BASE, canary)
    assert not decision.promote and decision.fallback_rate == 2
    assert "at 2 req/s the p95 time per token rose from 25.0 to 30.0 ms" in decision.reasons
    assert "at 8 req/s throughput fell from 400 to 250 tokens/s" in decision.reasons
    assert str(decision).startswith("hold: ")


def test_a_wrongly_exported_head_is_held_even_where_it_is_not_slower():
    canary = rows((0.5, 60, 19.0, 1.05), (2, 200, 25.0, 1.04), (8, 400, 40.0, 1.02))
    decision = rollout_decision(BASE, canary, min_acceptance=1.5)
    assert not decision.promote and decision.fallback_rate == 0.5
    assert all("check the export" in r for r in decision.reasons)


def test_the_gate_refuses_unlike_measurements():
    with pytest.raises(ValueError, match="same rates"):
        rollout_decision(BASE, BASE[:2])
