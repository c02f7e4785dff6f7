"""Prompt lookup first, a trained drafter when nothing matches: how production engines combine a draftless
matcher with a drafter (llama.cpp docs/speculative.md @ a71f4a0e: the draftless decoding "has higher
precedence"; TensorRT-LLM docs/source/features/speculative-decoding.md @ 04c8822c: use_sa_spec mixes its
suffix automaton into EAGLE-3, MTP and PARD above sa_spec_threshold=4 matched tokens).

A small drafter cannot copy, and lookup only copies: each round, if the sequence's last n tokens
(max_ngram down to min_ngram, the precedence threshold: 2 by default) occurred earlier, lookup proposes
what followed them, else the drafter drafts. The drafter is told of every round (features and update),
lookup's included, so its next pass catches up. Lossless: which drafter drafts depends only on the
tokens so far, and each round's q is that drafter's.
"""
from __future__ import annotations

import torch

from speclab.drafting import Draft, Drafter
from speclab.methods.lookahead import NAME as LOOKAHEAD
from speclab.methods.lookahead import LookaheadDrafter
from speclab.methods.ngram import NAME as NGRAM
from speclab.methods.ngram import PromptLookupDrafter
from speclab.methods.suffix import NAME as SUFFIX
from speclab.methods.suffix import SuffixDrafter
from speclab.sampling import SamplingParams

NAME = "lookup_first"  # speclab's name: neither vLLM nor SGLang has this combination
# the methods that draft from the text itself, which lookup would only stand in front of
DRAFTLESS = (NGRAM, SUFFIX, LOOKAHEAD)
MIN_NGRAM = 2  # the precedence threshold's default: a 1-token match too often copies the wrong continuation
LOOKUP, DRAFTER = "lookup", "drafter"  # who drafted a round


class LookupFirstDrafter(Drafter):
    """Prompt lookup (max_ngram, min_ngram: speclab.methods.ngram) where the sequence's tail matches an
    earlier n-gram, `drafter` otherwise. `sources[row]` says who drafted each round of the sequences
    started last (LOOKUP or DRAFTER, in round order; rounds that drafted nothing are not listed), and
    `lookup_rounds`, `drafter_rounds` count them."""

    def __init__(self, drafter: Drafter, max_ngram: int = 3, min_ngram: int = MIN_NGRAM):
        draftless = (PromptLookupDrafter, SuffixDrafter, LookaheadDrafter, LookupFirstDrafter)
        if not isinstance(drafter, Drafter) or isinstance(drafter, draftless):
            raise ValueError("lookup_first puts prompt lookup in front of a trained drafter (draft_model, eagle3, "
                             f"eagle, mtp, medusa, layer_skip, pard); got {type(drafter).__name__}")
        self.lookup = PromptLookupDrafter(max_ngram=max_ngram, min_ngram=min_ngram)
        self.drafter = drafter
        self.name = f"{NAME} {drafter.name}"
        self.feature_layers = drafter.feature_layers
        self.sources: dict[int, list[str]] = {}

    @property
    def lookup_rounds(self) -> int:
        return sum(s.count(LOOKUP) for s in self.sources.values())

    @property
    def drafter_rounds(self) -> int:
        return sum(s.count(DRAFTER) for s in self.sources.values())

    # ------------------------------------------------------------ what the loop reads, from the drafter
    @property
    def device(self) -> torch.device | None:
        return self.drafter.device

    @property
    def own_depth(self) -> int | None:
        return self.drafter.own_depth

    @property
    def batched(self) -> bool:  # type: ignore[override]
        return self.drafter.batched

    @property
    def forward_calls(self) -> int:  # type: ignore[override]
        """Passes of the drafter's network (lookup has none)."""
        return self.drafter.forward_calls

    def set_confidence_threshold(self, threshold: float | None) -> None:
        self.drafter.set_confidence_threshold(threshold)  # it stops the drafter's rounds; lookup has no confidence

    # ------------------------------------------------------------ one sequence
    def start(self, prompt: torch.Tensor) -> None:
        self.sources = {0: []}
        self.drafter.start(prompt)

    def propose(self, ids: torch.Tensor, k: int, sampling: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        return self.propose_rows([0], [ids], [k], sampling, generator)[0]

    def update(self, ids: torch.Tensor, num_accepted: int) -> None:
        self.drafter.update(ids, num_accepted)

    def take_features(self, features: torch.Tensor) -> None:
        self.drafter.take_features(features)

    def take_side_logits(self, logits: torch.Tensor) -> None:
        self.drafter.take_side_logits(logits)

    # ------------------------------------------------------------ a batch (each row decides for itself)
    def start_rows(self, rows: list[int], prompts: list[torch.Tensor]) -> None:
        self.sources = {row: [] for row in rows}
        self.drafter.start_rows(rows, prompts)

    def propose_rows(self, rows: list[int], ids: list[torch.Tensor], ks: list[int], sampling: SamplingParams,
                     generator: torch.Generator | None = None) -> list[Draft]:
        drafts: list[Draft | None] = [self.lookup.propose(seq, k, sampling) for seq, k in zip(ids, ks)]
        unmatched = [i for i, d in enumerate(drafts) if len(d) == 0]
        for i, row in enumerate(rows):
            self.sources.setdefault(row, []).append(DRAFTER if i in unmatched else LOOKUP)
        if unmatched:
            own = self.drafter.propose_rows([rows[i] for i in unmatched], [ids[i] for i in unmatched],
                                            [ks[i] for i in unmatched], sampling, generator)
            for i, d in zip(unmatched, own):
                drafts[i] = d
        return drafts

    def update_rows(self, rows: list[int], ids: list[torch.Tensor], num_accepted: list[int]) -> None:
        self.drafter.update_rows(rows, ids, num_accepted)

    def take_features_rows(self, rows: list[int], features: list[torch.Tensor]) -> None:
        self.drafter.take_features_rows(rows, features)

    def take_side_logits_rows(self, rows: list[int], logits: list[torch.Tensor]) -> None:
        self.drafter.take_side_logits_rows(rows, logits)
