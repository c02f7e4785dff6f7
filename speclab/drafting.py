"""The drafting interface: whatever proposes the tokens the target verifies implements `Drafter`.

`propose` returns a Draft for the sequence so far; `update` tells the drafter what the target accepted,
so it can roll its state back and adapt (in the spirit of transformers' CandidateGenerator). The decode
loop knows nothing else about a drafter; each method is a module of speclab.methods. A Draft is a tree
of tokens (`parents`, speclab.trees; None: a chain) with the distributions they were drawn from where
the drafter has them; without them q is a point mass and the rule accepts x with probability p(x).
Drafters that read the target's hidden states name the layers in `feature_layers` and get them through
`take_features`, from the pass that processed them. A SideBranch (lookahead's Jacobi window) rides
along in the verify pass for its logits only (`take_side_logits`), unseen by the candidates.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from speclab.adaptive import check_confidence_threshold
from speclab.sampling import SamplingParams, pad_vocab
from speclab.trees import chain_parents, check_parents, is_chain, prune_to_depth


@dataclass
class SideBranch:
    """M tokens a drafter adds to the verification pass for their logits only. Each sees the cached
    prefix and the pending token; among the side tokens, row j sees token i where sees[j, i] (itself
    included); it sits at position pending + depths[j]. It never sees a draft node, nor a node it."""

    tokens: torch.Tensor
    depths: list[int]
    sees: torch.Tensor

    def __post_init__(self) -> None:
        m = int(self.tokens.shape[0]) if self.tokens.dim() == 1 else -1
        if m < 0:
            raise ValueError(f"SideBranch.tokens must be 1-D (M,), got shape {tuple(self.tokens.shape)}")
        self.depths = [int(d) for d in self.depths]
        if len(self.depths) != m or any(d < 1 for d in self.depths):
            raise ValueError(f"SideBranch.depths needs one position offset >= 1 per token ({m}), got {self.depths}")
        if tuple(self.sees.shape) != (m, m) or not bool(self.sees.diagonal().all()):
            raise ValueError(f"SideBranch.sees must be an ({m}, {m}) bool matrix whose diagonal is True (each token "
                             f"sees itself); got shape {tuple(self.sees.shape)}")

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    def to(self, device: torch.device) -> SideBranch:
        return SideBranch(self.tokens.to(device), self.depths, self.sees.to(device))


@dataclass
class Draft:
    """N proposed token ids, the (N, V) served draft distributions they came from (None: point masses),
    and the tree they form: parents[i] is node i's parent, -1 for a child of the pending token
    (None: a chain, node i under node i - 1); `side`: tokens that ride along for their logits only."""

    tokens: torch.Tensor
    probs: torch.Tensor | None = None
    parents: list[int] | None = None
    side: SideBranch | None = None

    def __post_init__(self) -> None:
        if self.tokens.dim() != 1:
            raise ValueError(f"Draft.tokens must be 1-D (N,), got shape {tuple(self.tokens.shape)}")
        if self.probs is not None and (self.probs.dim() != 2 or self.probs.shape[0] != len(self)):
            raise ValueError(f"Draft.probs must be (N, V) with N = {len(self)} rows, got {tuple(self.probs.shape)}")
        if self.parents is not None:
            self.parents = check_parents(self.parents, len(self))

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def is_chain(self) -> bool:
        return self.parents is None or is_chain(self.parents)

    @property
    def tree(self) -> list[int]:
        """The parents list, for a chain too."""
        return chain_parents(len(self)) if self.parents is None else self.parents

    def cut(self, max_depth: int) -> Draft:
        """The draft without the nodes deeper than max_depth (a chain keeps its first max_depth tokens)."""
        if self.is_chain:
            n = min(max_depth, len(self))
            return Draft(self.tokens[:n], None if self.probs is None else self.probs[:n], None, self.side)
        keep, parents = prune_to_depth(self.parents, max_depth)
        if len(keep) == len(self):
            return self
        index = torch.tensor(keep, dtype=torch.long, device=self.tokens.device)
        return Draft(self.tokens[index], None if self.probs is None else self.probs[index], parents, self.side)

    def to(self, device: torch.device) -> Draft:
        """The draft on `device` (itself when it is there): a drafter written for the CPU, a learner's
        say, drafts for a target on a GPU unchanged."""
        if self.tokens.device == device:
            return self
        return Draft(self.tokens.to(device), None if self.probs is None else self.probs.to(device), self.parents,
                     None if self.side is None else self.side.to(device))

    @property
    def vocab_width(self) -> int:
        return 0 if self.probs is None else self.probs.shape[-1]

    def proposal_probs(self, vocab_size: int) -> torch.Tensor | None:
        """(N, vocab_size) q for the rejection rule: the drafter's own, zero-padded to vocab_size where
        the draft's embedding matrix is narrower; None (point masses) for a drafter without them."""
        return None if self.probs is None else pad_vocab(self.probs, vocab_size)


class Drafter(ABC):
    """Proposes draft tokens; told after each round how many the target accepted."""

    name = "drafter"
    feature_layers: tuple[int, ...] = ()  # the target hidden states this drafter reads (-1: the last)
    confidence_threshold: float | None = None  # chain drafters with probabilities: see set_confidence_threshold
    forward_calls: int = 0  # passes of the drafter's own network this sequence (the stats' draft_calls)

    @property
    def device(self) -> torch.device | None:
        """Where the drafter's own network runs, which must be the target's; None for a drafter whose
        network is the target's own or that has none."""
        return None

    @property
    def own_depth(self) -> int | None:
        """The k speculative_generate drafts with when none is passed: the depth of a tree the drafter
        shapes itself (EAGLE-2's), which a smaller k would only cut; None where k must be given."""
        return None

    def set_confidence_threshold(self, threshold: float | None) -> None:
        """Stop each round's drafting after a token whose draft top probability is below `threshold`
        (speclab.adaptive; None: draft the full k). Only chain drafters that compute a distribution per
        token can; the others refuse a threshold."""
        if threshold is not None:
            raise ValueError(f"the {self.name} drafter has no per-token confidence to stop on (it drafts without "
                             "a distribution, or a tree); use confidence_threshold with a chain drafter: "
                             "draft_model, layer_skip, mtp, or eagle/eagle3 with tree='chain'")

    def start(self, prompt: torch.Tensor) -> None:  # noqa: B027 (optional hook)
        """A new sequence begins with `prompt` (1-D ids)."""

    def forget_requests(self) -> None:  # noqa: B027 (optional hook)
        """For a drafter that learns from earlier requests (suffix decoding's global tree): forget them.
        The bench calls it before each pass over its prompts, so no repeat drafts from its own output."""

    @abstractmethod
    def propose(self, ids: torch.Tensor, k: int, sampling: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        """Up to k tokens to follow `ids` (1-D: the prompt and every token generated so far)."""

    def update(self, ids: torch.Tensor, num_accepted: int) -> None:  # noqa: B027 (optional hook)
        """After a round: `ids` is the sequence now (it ends with the target's correction or bonus
        token, which the drafter has not seen), `num_accepted` how many drafts were kept."""

    def take_features(self, features: torch.Tensor) -> None:  # noqa: B027 (optional hook)
        """For drafters with `feature_layers`: the target's features (rows, len(feature_layers) * H) of
        the tokens it just processed and kept, in sequence order: after the prefill, those of the
        prompt but its last token; after a round, those of the pending token and the accepted drafts
        (so the last row belongs to the token just before the newest one in `ids`). Called before
        `update`."""

    def take_side_logits(self, logits: torch.Tensor) -> None:  # noqa: B027 (optional hook)
        """For drafters whose Draft carries a SideBranch: the target's logits (M, V) for its tokens, from
        the verification pass. Called before `update`."""

    # ------------------------------------------------------------ a batch of sequences (chapter 11)
    # The decode loop calls these, with the cache rows of the sequences concerned (0 for one prompt). By
    # default each calls the method above for every sequence, which is right for a drafter that keeps no
    # state between rounds (prompt lookup) or for one sequence; a drafter with state per sequence (a draft
    # model's cache) overrides them and sets `batched`.
    batched: bool = False  # drafts for several sequences at once

    def check_batch(self, size: int) -> None:
        """Refuse a batch this drafter cannot draft for, saying which drafters can."""
        if size > 1 and not self.batched:
            raise ValueError(f"the {self.name} drafter drafts for one sequence at a time; a batch of {size} prompts "
                             "needs a drafter that drafts batches: draft_model, ngram (prompt lookup), eagle or eagle3 "
                             "with tree='chain', mtp, layer_skip; or decode "
                             "the prompts one at a time")

    def start_rows(self, rows: list[int], prompts: list[torch.Tensor]) -> None:
        for prompt in prompts:
            self.start(prompt)

    def propose_rows(self, rows: list[int], ids: list[torch.Tensor], ks: list[int], sampling: SamplingParams,
                     generator: torch.Generator | None = None) -> list[Draft]:
        """One Draft per sequence: up to ks[i] tokens to follow ids[i]."""
        return [self.propose(seq, k, sampling, generator) for seq, k in zip(ids, ks)]

    def update_rows(self, rows: list[int], ids: list[torch.Tensor], num_accepted: list[int]) -> None:
        for seq, accepted in zip(ids, num_accepted):
            self.update(seq, accepted)

    def take_features_rows(self, rows: list[int], features: list[torch.Tensor]) -> None:
        for f in features:
            self.take_features(f)

    def take_side_logits_rows(self, rows: list[int], logits: list[torch.Tensor]) -> None:
        for row_logits in logits:
            self.take_side_logits(row_logits)


class ChainDrafter(Drafter):
    """A drafter that drafts a chain one token at a time from a distribution it computes, so it can stop
    early when unsure (speclab.adaptive.stops_here)."""

    def set_confidence_threshold(self, threshold: float | None) -> None:
        self.confidence_threshold = check_confidence_threshold(threshold)


