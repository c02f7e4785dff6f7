import math

import numpy as np
import pytest

from speclab import theory


def test_expected_tokens_closed_form_and_limits():
    assert theory.expected_tokens(0.0, 4) == 1.0
    assert theory.expected_tokens(1.0, 4) == 5.0
    assert math.isclose(theory.expected_tokens(0.8, 4), (1 - 0.8 ** 5) / 0.2)
    assert math.isclose(theory.expected_tokens(0.8, 4), sum(0.8 ** i for i in range(5)))


def test_speedup_and_breakeven_agree():
    for k, c in [(1, 0.1), (4, 0.05), (4, 0.2), (8, 0.1)]:
        a = theory.breakeven_alpha(k, c)
        assert math.isclose(theory.speedup(a, k, c), 1.0, abs_tol=1e-9)
        assert theory.speedup(min(1.0, a + 0.05), k, c) > 1 > theory.speedup(max(0.0, a - 0.05), k, c)


def test_breakeven_free_draft_and_impossible_draft():
    assert theory.breakeven_alpha(4, 0.0) == 0.0
    assert math.isnan(theory.breakeven_alpha(2, 1.0))  # a draft as costly as the target never pays


def test_best_k_is_the_argmax():
    for alpha, c in [(0.6, 0.05), (0.8, 0.1), (0.9, 0.02), (0.3, 0.3)]:
        k = theory.best_k(alpha, c, k_max=16)
        assert all(theory.speedup(alpha, k, c) >= theory.speedup(alpha, j, c) for j in range(1, 17))
    assert theory.best_k(0.95, 0.01) > theory.best_k(0.5, 0.01)


def test_monte_carlo_agrees_with_closed_form():
    for alpha, k in [(0.5, 3), (0.8, 4), (0.9, 8)]:
        sim = theory.simulate_tokens_per_round(alpha, k, rounds=200_000, seed=1)
        se = sim.std() / np.sqrt(len(sim))
        assert abs(sim.mean() - theory.expected_tokens(alpha, k)) < 5 * se


def test_alpha_from_tokens_per_round_inverts_expected_tokens():
    for alpha in (0.1, 0.5, 0.77, 0.95):
        assert math.isclose(theory.alpha_from_tokens_per_round(theory.expected_tokens(alpha, 5), 5), alpha, abs_tol=1e-9)


@pytest.mark.parametrize("call", [
    lambda: theory.expected_tokens(1.2, 4),
    lambda: theory.speedup(0.5, 4, -0.1),
    lambda: theory.expected_tokens(0.5, -1),
    lambda: theory.best_k(0.5, 0.1, k_max=0),
    lambda: theory.alpha_from_tokens_per_round(7.0, 4),
])
def test_bad_arguments_are_refused(call):
    with pytest.raises(ValueError):
        call()


def test_verify_cost_lowers_the_speedup_in_proportion():
    base = theory.speedup(0.8, 4, 0.1)
    assert math.isclose(theory.speedup(0.8, 4, 0.1, verify_cost=1.0), base)
    assert math.isclose(theory.speedup(0.8, 4, 0.1, verify_cost=1.4), theory.expected_tokens(0.8, 4) / (1.4 + 0.4))
    with pytest.raises(ValueError):
        theory.speedup(0.8, 4, 0.1, verify_cost=0)


def test_breakeven_cost_ratio_is_where_the_speedup_is_one():
    for alpha, k in [(0.7, 4), (0.3, 2), (0.95, 8)]:
        c = theory.breakeven_cost_ratio(alpha, k)
        assert theory.speedup(alpha, k, c) == pytest.approx(1.0)
    assert theory.breakeven_cost_ratio(0.0, 3) == 0.0 and theory.breakeven_cost_ratio(1.0, 6) == pytest.approx(1.0)
