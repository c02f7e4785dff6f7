"""The speedup model of speculative decoding (Leviathan et al. 2023, section 3).

Assume each draft token is accepted independently with probability alpha (the expected overlap
sum_x min(p(x), q(x))), a round drafts K tokens, one draft step costs c times one target step, and a
target pass over K + 1 positions costs about as much as over one (decode is memory- or
overhead-bound). Then:
- tokens per round     E(alpha, K) = (1 - alpha^(K+1)) / (1 - alpha)
- speedup              S(alpha, K, c) = E(alpha, K) / (1 + K c)
- breakeven alpha      the alpha at which S = 1 for a given K and c
- breakeven cost       the c at which S = 1 for a given alpha and K
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import brentq


def _check(alpha: float | None = None, k: int | None = None, c: float | None = None) -> None:
    if alpha is not None and not 0 <= alpha <= 1:
        raise ValueError(f"alpha (acceptance probability) must be in [0, 1], got {alpha}")
    if k is not None and (int(k) != k or k < 0):
        raise ValueError(f"k (draft tokens per round) must be a whole number >= 0, got {k}")
    if c is not None and not c >= 0:
        raise ValueError(f"c (draft cost / target cost) must be >= 0, got {c}")


def expected_tokens(alpha: float, k: int) -> float:
    """Expected tokens per target pass: accepted drafts plus the correction or bonus token."""
    _check(alpha, k)
    if alpha == 1:
        return float(k + 1)  # the limit of the geometric sum
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def expected_accepted(alpha: float, k: int) -> float:
    """Expected accepted drafts per round: expected_tokens - 1."""
    return expected_tokens(alpha, k) - 1


def speedup(alpha: float, k: int, c: float, verify_cost: float = 1.0) -> float:
    """Modelled wall-clock speedup over target-only decoding: tokens per round over the cost of a
    round (K draft steps at c each, plus one target pass over K + 1 positions) in target-step units.

    verify_cost is that pass's time over a one-token step's. The classic model takes 1 (a memory-bound
    pass costs the same for 1 or K + 1 positions); chapter 1 measures it, and where it is above 1
    (small models on a CPU) passing it makes the prediction honest.
    """
    _check(alpha, k, c)
    if verify_cost <= 0:
        raise ValueError(f"verify_cost (K+1-position pass / one-token step) must be > 0, got {verify_cost}")
    return expected_tokens(alpha, k) / (verify_cost + k * c)


def breakeven_alpha(k: int, c: float) -> float:
    """The acceptance at which speculation neither gains nor loses (speedup = 1). Returns nan when
    none exists in [0, 1] (k * c >= k: even perfect acceptance cannot pay for the drafts)."""
    _check(k=k, c=c)
    if k < 1:
        raise ValueError("breakeven needs k >= 1")
    f = lambda a: speedup(a, k, c) - 1  # noqa: E731 (increasing in a)
    if f(1.0) <= 0:
        return float("nan")
    if f(0.0) >= 0:
        return 0.0
    return brentq(f, 0.0, 1.0, xtol=1e-12)


def breakeven_cost_ratio(alpha: float, k: int) -> float:
    """The most a draft step may cost (as a fraction of a target step) for K drafts per round to break
    even at this alpha, in the classic model: E(alpha, K) = 1 + K c, so c* = (E - 1) / K."""
    _check(alpha, k)
    if k < 1:
        raise ValueError("breakeven needs k >= 1")
    return expected_accepted(alpha, k) / k


def best_k(alpha: float, c: float, k_max: int = 16) -> int:
    """The K in 1..k_max with the highest modelled speedup."""
    _check(alpha, c=c)
    if k_max < 1:
        raise ValueError(f"k_max must be >= 1, got {k_max}")
    return max(range(1, k_max + 1), key=lambda k: speedup(alpha, k, c))


def alpha_from_tokens_per_round(tokens_per_round: float, k: int) -> float:
    """Invert expected_tokens: the alpha that explains a measured mean of tokens per round."""
    if not 1 <= tokens_per_round <= k + 1:
        raise ValueError(f"tokens per round must lie in [1, {k + 1}] for k = {k}, got {tokens_per_round}")
    if tokens_per_round >= k + 1:
        return 1.0
    return brentq(lambda a: expected_tokens(a, k) - tokens_per_round, 0.0, 1.0 - 1e-15, xtol=1e-12)


def simulate_tokens_per_round(alpha: float, k: int, rounds: int = 100_000, seed: int = 0) -> np.ndarray:
    """Monte-Carlo tokens per round: each of K drafts passes with probability alpha until the first
    failure; a round yields the passes plus one token. Returns one count per round."""
    _check(alpha, k)
    rng = np.random.default_rng(seed)
    passes = rng.random((rounds, k)) < alpha
    accepted = np.cumprod(passes, axis=1).sum(axis=1)
    return accepted + 1
