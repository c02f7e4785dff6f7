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

A drafter may also ride along in the verification pass with tokens that are not candidates (a
`SideBranch`: lookahead decoding's Jacobi window). They get their own attention pattern, never see
or are seen by the candidates, their logits come back through `take_side_logits`, and their cache
rows are dropped with the rejected nodes'. So lookahead needs no branch of its own in the loop.
"""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

import torch

from speclab.adaptive import check_confidence_threshold, stops_here
from speclab.runner import ModelRunner
from speclab.sampling import SamplingParams, check_finite, pad_vocab, sample
from speclab.trees import chain_parents, check_parents, depths, is_chain, prune_to_depth, tree_from_choices


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


class ChainDrafter(Drafter):
    """A drafter that drafts a chain one token at a time from a distribution it computes, so it can stop
    early when unsure (speclab.adaptive.stops_here)."""

    def set_confidence_threshold(self, threshold: float | None) -> None:
        self.confidence_threshold = check_confidence_threshold(threshold)


class ModelDrafter(ChainDrafter):
    """A separate, smaller causal LM that shares the target's tokenizer: the classic draft model.

    It keeps its own KV cache. Proposing feeds what it has not seen yet (the last round's
    correction, and the last draft if everything was accepted), then k - 1 of its own samples
    (fewer with a confidence threshold).
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
            if stops_here(logits, self.confidence_threshold):
                break
            new = token.view(1)
        return Draft(torch.stack(tokens), torch.stack(probs))

    def update(self, ids: torch.Tensor, num_accepted: int) -> None:
        # Everything but the last token of ids was either seen before this round or an accepted draft.
        self.runner.rollback(min(self.runner.length, len(ids) - 1))


MATCH_CHOICES = ("latest", "first", "frequent", "longest")


def lookup_continuation(seq: list[int], num_tokens: int, max_ngram: int = 3, min_ngram: int = 1,
                        choose: str = "latest") -> list[int]:
    """Prompt lookup's proposal for the sequence `seq`: find earlier occurrences of its last n tokens
    (n from max_ngram down to min_ngram; the longest n with a match wins) and return up to num_tokens
    of what followed one of them ([] when nothing matches). Which occurrence, when there are several:

    latest    the most recent one (the reference implementation's scan from the end; recent text is
              the most likely to be restated)
    first     the earliest one (transformers' prompt lookup scans left to right)
    frequent  the most common continuation: walk the occurrences' continuations token by token,
              taking the token most of them agree on (ties to the latest)
    longest   the one whose preceding text agrees with the sequence's for longest (a longer context
              match, beyond max_ngram), ties to the latest
    """
    if choose not in MATCH_CHOICES:
        raise ValueError(f"choose must be one of {MATCH_CHOICES}, got {choose!r}")
    for n in range(min(max_ngram, len(seq) - 1), min_ngram - 1, -1):
        tail = seq[-n:]
        # starts i with seq[i:i+n] == tail and at least one token after the match, latest first
        starts = [i for i in range(len(seq) - n - 1, -1, -1) if seq[i:i + n] == tail]
        if not starts:
            continue
        if choose == "latest":
            i = starts[0]
        elif choose == "first":
            i = starts[-1]
        elif choose == "longest":
            i = max(starts, key=lambda j: (_agreement(seq, j + n, len(seq)), j))
        else:
            return _most_frequent(seq, [j + n for j in starts], num_tokens)
        return seq[i + n:i + n + num_tokens]
    return []


def _agreement(seq: list[int], end_a: int, end_b: int, cap: int = 256) -> int:
    """How many tokens before end_a equal those before end_b (a common suffix length, at most cap)."""
    m = 0
    while m < cap and m < end_a and seq[end_a - 1 - m] == seq[end_b - 1 - m]:
        m += 1
    return m


def _most_frequent(seq: list[int], follows: list[int], num_tokens: int) -> list[int]:
    """From continuation starts `follows` (latest first), the token-by-token majority continuation."""
    out: list[int] = []
    while follows and len(out) < num_tokens:
        counts: dict[int, int] = {}
        for j in follows:
            if j < len(seq):
                counts[seq[j]] = counts.get(seq[j], 0) + 1
        if not counts:
            break
        token = max(counts, key=counts.get)  # dicts keep insertion order, so ties go to the latest
        out.append(token)
        follows = [j + 1 for j in follows if j < len(seq) and seq[j] == token]
    return out


class PromptLookupDrafter(Drafter):
    """Prompt lookup decoding (Saxena 2023): find an earlier occurrence of the sequence's last n tokens
    (n from max_ngram down to min_ngram) and propose the num_tokens that followed it (None: as many as
    the round allows, k). No model, no probabilities; it wins where the output copies its context
    (code edits, answers quoting a passage, summaries). `choose` picks among several occurrences
    (see lookup_continuation); "frequent" is the default because it gave the most tokens per round on
    every workload of chapter 6 (the latest match is often so recent that little follows it). The
    same knobs elsewhere:

    speclab      transformers generate()        vLLM speculative_config (method "ngram")
    max_ngram    max_matching_ngram_size (2)    prompt_lookup_max
    min_ngram    - (1)                          prompt_lookup_min
    num_tokens   prompt_lookup_num_tokens       num_speculative_tokens
    choose       "first"                        -
    """

    name = "prompt lookup"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, num_tokens: int | None = None,
                 choose: str = "frequent"):
        if not isinstance(min_ngram, int) or not isinstance(max_ngram, int) or not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need integers 1 <= min_ngram <= max_ngram; got min_ngram={min_ngram!r}, "
                             f"max_ngram={max_ngram!r}")
        if num_tokens is not None and (not isinstance(num_tokens, int) or num_tokens < 1):
            raise ValueError(f"num_tokens (tokens per proposal) must be an integer >= 1 or None (use k); "
                             f"got {num_tokens!r}")
        if choose not in MATCH_CHOICES:
            raise ValueError(f"choose must be one of {MATCH_CHOICES}, got {choose!r}")
        self.max_ngram, self.min_ngram, self.num_tokens, self.choose = max_ngram, min_ngram, num_tokens, choose

    def propose(self, ids: torch.Tensor, k: int, sampling: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        n = k if self.num_tokens is None else min(k, self.num_tokens)  # never more than the round allows
        follow = lookup_continuation(ids.tolist(), n, self.max_ngram, self.min_ngram, self.choose)
        return Draft(torch.tensor(follow, dtype=torch.long, device=ids.device))


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
METHODS = ("draft_model", "ngram", "medusa", "lookahead", "eagle", "eagle3", "mtp", "layer_skip")  # vLLM's names where vLLM has the method
NGRAM_ALIASES = {"prompt_lookup_max": "max_ngram", "prompt_lookup_min": "min_ngram",  # vLLM
                 "num_speculative_tokens": "num_tokens", "max_matching_ngram_size": "max_ngram",  # transformers
                 "prompt_lookup_num_tokens": "num_tokens"}


def load_drafter(method: str, target: torch.nn.Module | None = None, **options) -> Drafter:
    """A drafter by method name (vLLM's names), for `target` (None: the bundled target).

    draft_model  a draft model: draft= a model or a directory (default: the bundled draft)
    ngram        prompt lookup: max_ngram=3, min_ngram=1, num_tokens=None (k), choose="frequent";
                 vLLM's and transformers' option names are accepted too
    medusa       Medusa heads: heads= a directory (default: the heads shipped for the bundled
                 target), tree= "chain" or medusa_choices (default: the tree chosen for them)
    lookahead    lookahead decoding: window=W, ngram=N, pool=G, from_context=True, seed=0
    eagle        an EAGLE-1 head: head= a directory written by train eagle (default: the head shipped
                 for the bundled target), tree="dynamic" (EAGLE-2's tree, default) or "chain",
                 top_k, depth, total_tokens, min_confidence (the tree stops growing below it)
    eagle3       an EAGLE-3 head (train eagle3), with the same options
    mtp          a DeepSeek-V3-style MTP module (train mtp): module= a directory (default: the one
                 shipped for the bundled target), num_tokens=1 (drafts per round; more chains it;
                 vLLM's num_speculative_tokens)
    layer_skip   the target's first exit_layer= E layers draft (1..L-1); adapter=False (no new
                 weights), True (the exit adapters shipped for the bundled target) or a directory
                 written by train exit
    """
    if method == "ngram":
        for alias, name in NGRAM_ALIASES.items():
            if alias in options:
                if name in options:
                    raise ValueError(f"pass {name}= or {alias}=, not both")
                options[name] = options.pop(alias)
        return PromptLookupDrafter(**options)
    if method == "lookahead":
        from speclab.lookahead import LookaheadDrafter
        return LookaheadDrafter(**options)
    if method in ("eagle", "eagle3", "mtp", "layer_skip"):  # drafters built on the target itself
        if target is None:
            from speclab.models import load_pair
            target = load_pair(device="cpu").target
        if method == "mtp":
            from speclab.mtp import load_mtp
            return load_mtp(target, **options)
        if method == "layer_skip":
            from speclab.layerskip import load_layer_skip
            if "exit_layer" not in options:
                raise ValueError(f"layer_skip needs exit_layer=E, the last layer that drafts (1 to "
                                 f"{target.config.num_hidden_layers - 1})")
            return load_layer_skip(target, **options)
        from speclab.eagle import load_eagle
        return load_eagle(target, version=3 if method == "eagle3" else 1, **options)
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
