"""How many tokens to draft: a fixed K, transformers' heuristic schedule, and a confidence stop (both in
transformers' assisted generation: num_assistant_tokens_schedule="heuristic",
assistant_confidence_threshold).

The best fixed K depends on acceptance (speclab.theory.best_k), which changes between workloads and within
one output. The heuristic schedule drafts 2 more after a round fully accepted and 1 fewer after a
rejection (capped at k, starting at k, never below 1). The confidence stop ends a chain as soon as the
drafter's top probability for its last token falls below a threshold (a drafter option:
Drafter.set_confidence_threshold). Both decide from the draft's side only, so both stay lossless.
"""
from __future__ import annotations

import torch

K_SCHEDULES = ("fixed", "heuristic")


class FixedK:
    """Draft k tokens every round."""

    def __init__(self, k: int):
        self.k = k

    def update(self, drafted: int, accepted: int) -> None:
        """After a round that drafted `drafted` tokens and kept `accepted` of them."""


class HeuristicK(FixedK):
    """transformers' heuristic schedule with k as the upper bound: +2 after a round whose drafts were
    all accepted, -1 otherwise, between 1 and k; starts at k."""

    def __init__(self, k: int):
        super().__init__(k)
        self.limit = k

    def update(self, drafted: int, accepted: int) -> None:
        if drafted == 0:  # nothing was drafted (no proposal this round): no evidence either way
            return
        self.k = min(self.limit, self.k + 2) if accepted == drafted else max(1, self.k - 1)


def make_schedule(name: str, k: int) -> FixedK:
    if name not in K_SCHEDULES:
        raise ValueError(f"k_schedule must be one of {K_SCHEDULES}, got {name!r}")
    return HeuristicK(k) if name == "heuristic" else FixedK(k)


def check_confidence_threshold(threshold: float | None) -> float | None:
    """The threshold as a float in (0, 1), None for no stop, or a ValueError saying what to pass."""
    if threshold is None:
        return None
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold < 1:
        raise ValueError(f"confidence_threshold must be a number strictly between 0 and 1 (transformers' default "
                         f"is 0.4), or None for no confidence stop; got {threshold!r}")
    return float(threshold)


def confidence(logits: torch.Tensor) -> float:
    """The draft's top probability, softmax of its raw logits (temperature 1, no top-k/top-p): under
    greedy decoding the served distribution is a point mass, so it could not say how sure the draft is."""
    return float(torch.softmax(logits.float(), -1).max())


def stops_here(logits: torch.Tensor, threshold: float | None) -> bool:
    """Whether a chain drafter with this confidence threshold stops after the token drawn from `logits`."""
    return threshold is not None and confidence(logits) < threshold
