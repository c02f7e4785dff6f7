"""Drafters: whatever proposes the tokens the target verifies.

One small interface (in the spirit of transformers' CandidateGenerator): `propose` returns a Draft
for the sequence so far; `update` tells the drafter what the target accepted, so it can roll its own
state back and adapt. The decode loop knows nothing else about a drafter, so a draft model, an
n-gram lookup in the context, and (in later chapters) Medusa heads, an EAGLE head, lookahead or MTP
heads plug into the same loop.

A Draft is a tree of tokens (`parents`, see speclab.trees; None means a chain) with, where the
drafter has them, the served distributions they were drawn from. A drafter without probabilities
(prompt lookup, top-k tree children) proposes deterministically: its q is a point mass on the
proposed token, and the rejection rule then accepts x with probability p(x).

Drafters that read the target's hidden states (Medusa heads, EAGLE) name the layers in
`feature_layers`; the decode loop then hands them, through `take_features`, the target's features
of every token it has processed and kept, from the pass that processed them: no extra target pass.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from speclab.runner import ModelRunner
from speclab.sampling import SamplingParams, check_finite, pad_vocab, sample
from speclab.trees import chain_parents, check_parents, is_chain, prune_to_depth


@dataclass
class Draft:
    """N proposed token ids, the (N, V) served draft distributions they came from (None: point masses),
    and the tree they form: parents[i] is node i's parent, -1 for a child of the pending token
    (None: a chain, node i under node i - 1)."""

    tokens: torch.Tensor
    probs: torch.Tensor | None = None
    parents: list[int] | None = None

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
            return Draft(self.tokens[:n], None if self.probs is None else self.probs[:n])
        keep, parents = prune_to_depth(self.parents, max_depth)
        if len(keep) == len(self):
            return self
        index = torch.tensor(keep, dtype=torch.long, device=self.tokens.device)
        return Draft(self.tokens[index], None if self.probs is None else self.probs[index], parents)

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

    def start(self, prompt: torch.Tensor) -> None:  # noqa: B027 (optional hook)
        """A new sequence begins with `prompt` (1-D ids)."""

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


class ModelDrafter(Drafter):
    """A separate, smaller causal LM that shares the target's tokenizer: the classic draft model.

    It keeps its own KV cache. Proposing feeds what it has not seen yet (the last round's
    correction, and the last draft if everything was accepted), then k - 1 of its own samples.
    """

    name = "draft model"

    def __init__(self, model: torch.nn.Module):
        self.runner = ModelRunner(model, who="draft model")
        self.forward_calls = 0

    @property
    def model(self) -> torch.nn.Module:
        return self.runner.model

    def start(self, prompt: torch.Tensor) -> None:
        self.runner.reset()
        self.forward_calls = 0

    def propose(self, ids: torch.Tensor, k: int, sampling: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        tokens, probs = [], []
        new = ids[self.runner.length:]
        for _ in range(k):
            logits = self.runner.forward(new, last_only=True)[-1]
            self.forward_calls += 1
            check_finite(logits, "draft model")
            q = sampling.probs(logits)
            token = sample(q, generator)
            tokens.append(token)
            probs.append(q)
            new = token.view(1)
        return Draft(torch.stack(tokens), torch.stack(probs))

    def update(self, ids: torch.Tensor, num_accepted: int) -> None:
        # Everything but the last token of ids was either seen before this round or an accepted draft.
        self.runner.rollback(min(self.runner.length, len(ids) - 1))


class PromptLookupDrafter(Drafter):
    """Prompt lookup decoding (Saxena 2023): find the latest earlier occurrence of the sequence's last
    n tokens (n from max_ngram down to min_ngram) and propose what followed it. No model, no
    probabilities; it wins where the output copies its context (code edits, summaries, retrieval)."""

    name = "prompt lookup"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram; got min_ngram={min_ngram}, max_ngram={max_ngram}")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram

    def propose(self, ids: torch.Tensor, k: int, sampling: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        seq = ids.tolist()
        for n in range(min(self.max_ngram, len(seq) - 1), self.min_ngram - 1, -1):
            tail = seq[-n:]
            # latest start i < len - n with seq[i:i+n] == tail, so at least one token follows it
            for i in range(len(seq) - n - 1, -1, -1):
                if seq[i:i + n] == tail:
                    follow = seq[i + n:i + n + k]
                    return Draft(torch.tensor(follow, dtype=torch.long, device=ids.device))
        return Draft(ids.new_empty(0))
