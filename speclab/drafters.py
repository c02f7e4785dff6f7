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

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

import torch

from speclab.runner import ModelRunner
from speclab.sampling import SamplingParams, check_finite, pad_vocab, sample
from speclab.trees import chain_parents, check_parents, depths, is_chain, prune_to_depth, tree_from_choices


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


class MedusaDrafter(Drafter):
    """Medusa (Cai et al. 2024): heads on the target's last hidden state propose the tokens after the
    pending one. Head i's top-k tokens fill depth i of a fixed tree (`tree`: "chain" for head top-1s,
    or medusa_choices, paths of top-k ranks). Siblings are deterministic top-k picks, so their q is a
    point mass and the rule stays lossless when sampling. The hidden state comes from the verification
    pass (take_features): the heads never run the target themselves."""

    name = "medusa"
    feature_layers = (-1,)

    def __init__(self, heads: torch.nn.Module, tree: str | list = "chain"):
        self.heads = heads
        self.device = next(heads.parameters()).device
        self.set_tree(tree)
        self.hidden: torch.Tensor | None = None

    def set_tree(self, tree: str | list) -> None:
        if tree == "chain":
            self.choices = [(0,) * d for d in range(1, self.heads.num_heads + 1)]
        elif isinstance(tree, str):
            raise ValueError(f"tree must be 'chain' or a list of medusa_choices (tuples of top-k ranks); got {tree!r}")
        else:
            self.choices = [tuple(c) for c in tree]
        self.parents, self.ranks = tree_from_choices(self.choices)
        self.node_depths = depths(self.parents)
        if max(self.node_depths) > self.heads.num_heads:
            raise ValueError(f"the tree is {max(self.node_depths)} deep but there are only {self.heads.num_heads} "
                             "heads (one per depth); drop the deeper choices")
        self.is_chain = is_chain(self.parents)
        self.top = max(self.ranks) + 1
        self._depth_index = torch.tensor([d - 1 for d in self.node_depths], device=self.device)
        self._rank_index = torch.tensor(self.ranks, device=self.device)

    def start(self, prompt: torch.Tensor) -> None:
        self.hidden = None

    def take_features(self, features: torch.Tensor) -> None:
        self.hidden = features[-1]

    @torch.inference_mode()
    def propose(self, ids: torch.Tensor, k: int, sampling: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        if self.hidden is None:  # a one-token prompt: no hidden state yet, so no draft this round
            return Draft(ids.new_empty(0))
        logits = self.heads(self.hidden)  # (M, V)
        check_finite(logits, "Medusa heads")
        top = logits.topk(self.top, dim=-1).indices  # (M, top)
        tokens = top[self._depth_index, self._rank_index]
        return Draft(tokens, None, None if self.is_chain else self.parents)


# ---------------------------------------------------------------- one entry point for every method
METHODS = ("draft_model", "ngram", "medusa")  # vLLM's names for the same methods


def load_drafter(method: str, target: torch.nn.Module | None = None, **options) -> Drafter:
    """A drafter by method name (vLLM's names), for `target` (None: the bundled target).

    draft_model  a draft model: draft= a model or a directory (default: the bundled draft)
    ngram        prompt lookup: max_ngram=3, min_ngram=1
    medusa       Medusa heads: heads= a directory (default: the heads shipped for the bundled
                 target), tree= "chain" or medusa_choices (default: the tree chosen for them)
    """
    if method == "ngram":
        return PromptLookupDrafter(**options)
    if method == "draft_model":
        from speclab.models import BUNDLED_DIR, load_model
        from speclab.runner import model_device
        draft = options.pop("draft", None)
        if options:
            raise ValueError(f"draft_model takes draft= only; got {sorted(options)}")
        if draft is None or isinstance(draft, (str, Path)):
            device = model_device(target) if target is not None else None
            draft = load_model(draft or BUNDLED_DIR / "draft", device, torch.float32)
        return ModelDrafter(draft)
    if method == "medusa":
        return load_medusa(target, **options)
    raise ValueError(f"unknown drafting method {method!r}; choose from {METHODS}")


def load_medusa(target: torch.nn.Module | None = None, heads: str | Path | None = None,
                tree: str | list | None = None) -> MedusaDrafter:
    """Medusa heads for `target` from `heads` (a directory written by train medusa), or the heads that
    ship with the bundled target; refused with a clear error when they were trained for another model."""
    from speclab.devices import draft_dtype
    from speclab.heads import MedusaHeads
    from speclab.models import BUNDLED_DIR
    from speclab.runner import model_device
    directory = Path(heads) if heads is not None else BUNDLED_DIR / "medusa"
    device = model_device(target) if target is not None else torch.device("cpu")
    # Like a draft model, the heads only propose: their rounding can change what is accepted, never
    # what is emitted. On a CPU their four vocabulary projections are a quarter of the bundled
    # target's bytes, so half precision halves what every round reads (as devices.draft_dtype says).
    dtype = draft_dtype(device, target.dtype if target is not None else torch.float32)
    loaded = MedusaHeads.load(directory, device, dtype)
    if target is not None:
        loaded.check_fits(target)
    if tree is None:
        record = directory / "tree.json"
        tree = [tuple(c) for c in json.loads(record.read_text())["choices"]] if record.exists() else "chain"
    return MedusaDrafter(loaded, tree)
