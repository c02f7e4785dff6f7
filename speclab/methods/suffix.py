"""Suffix decoding (Oliaro et al. 2025; Snowflake's Arctic Inference; vLLM's `suffix`): model-free drafting
from suffix trees over the current request (prompt and output so far) and earlier requests' outputs (a
global cache of up to max_cached_requests).

Each trie holds every substring of up to max_tree_depth tokens with its count. Each round every length m
of the sequence's suffix found in a tree drafts the continuations seen most often (a token scores the
share of matched occurrences continuing with it; drafting stops below min_token_prob and after
max_spec_factor x m tokens), and the best total score wins over lengths and trees, as in Arctic's
`speculate`. It pays on traffic that repeats across requests. Drafts are point masses, so it is lossless
at any temperature; tree=False drafts the best chain (vLLM's), tree=True the paper's subtree.
"""
from __future__ import annotations

import gc
import heapq
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

from speclab.drafting import Draft, Drafter
from speclab.sampling import SamplingParams
from speclab.methods.engines import Options, by_batch, no

NAME = "suffix"  # the method's name in the registry (vLLM's)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cycle collector off while a trie grows: adding a sequence allocates a node per new substring,
    and every collection those allocations trigger walks the whole trie (tens of thousands of dicts once
    earlier requests are cached), which cost more than building it. A trie holds no reference cycles, so
    nothing is left uncollected."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class SuffixTrie:
    """Every substring of up to `depth` tokens of the sequences added, with how often it occurs.

    A node is a dict: token -> [count, child node]. Appending a token extends each of the suffixes that
    end at the sequence's end and are shorter than `depth` (`open`), so adding a sequence costs `depth`
    steps a token, and a sequence can grow token by token (the request being decoded)."""

    def __init__(self, depth: int):
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"the tree depth must be an integer >= 1, got {depth!r}")
        self.depth = depth
        self.root: dict = {}
        self.open: dict[int, list[dict]] = {}  # a growing sequence's id -> the nodes its open suffixes end at

    def extend(self, seq_id: int, tokens: Sequence[int], sign: int = 1) -> None:
        """Append `tokens` to sequence `seq_id` (sign -1: remove a sequence added before, token by token)."""
        ends = self.open.setdefault(seq_id, [])
        with gc_paused():
            for token in tokens:
                grown = []
                for node in [self.root, *ends]:
                    entry = node.get(token)
                    if entry is None:
                        entry = node[token] = [0, {}]
                    entry[0] += sign
                    if entry[0] == 0:
                        del node[token]  # removal: nothing below a zero count is left either
                    grown.append(entry[1])
                ends[:] = grown[:self.depth - 1]  # suffixes of `depth` tokens end here

    def close(self, seq_id: int) -> None:
        self.open.pop(seq_id, None)

    def follow(self, ends: list[dict], tokens: Sequence[int]) -> list[dict]:
        """The nodes of the suffixes (lengths 1, 2, ...) of a sequence read past the trie without adding it:
        `ends` those before `tokens`, the result those after. Where a suffix never occurs no longer one
        does, so the list stops at the first miss."""
        for token in tokens:
            grown = []
            for node in [self.root, *ends]:
                entry = node.get(token)
                if entry is None:
                    break
                grown.append(entry[1])
            ends = grown[:self.depth - 1]
        return ends

    def find(self, tokens: Sequence[int]) -> tuple[dict, int] | None:
        """The node of `tokens` and its count, or None where they never occur."""
        node, count = self.root, 0
        for token in tokens:
            entry = node.get(token)
            if entry is None:
                return None
            count, node = entry
        return node, count


def continuations(node: dict, prob: float, parent: int) -> list[tuple[float, int, int, dict]]:
    """A node's children as (-probability, token, parent index, child node): each child's probability
    is its share of the occurrences that continue past the node (an occurrence at the very end of a
    sequence has no continuation yet and counts for none), times the node's own."""
    total = sum(count for count, _ in node.values())
    return [(-prob * count / total, token, parent, sub) for token, (count, sub) in node.items()]


def draft_from(node: dict, limit: int, min_prob: float, tree: bool) -> tuple[list[int], list[int], float]:
    """Up to `limit` tokens continuing a matched node: (tokens, parents (-1: the root), score, the sum
    of their probabilities). Tokens below min_prob are not drafted. Chain: the most frequent child each
    step. Tree: the most probable nodes anywhere below, best first (Arctic Inference's tree search)."""
    if not tree:
        return draft_chain(node, limit, min_prob)
    tokens: list[int] = []
    parents: list[int] = []
    score = 0.0
    heap = continuations(node, 1.0, -1)
    heapq.heapify(heap)
    while heap and len(tokens) < limit:
        neg, token, parent, sub = heapq.heappop(heap)
        if -neg < min_prob:
            break
        tokens.append(token)
        parents.append(parent)
        score -= neg
        for child in continuations(sub, -neg, len(tokens) - 1) if sub else []:
            heapq.heappush(heap, child)
    return tokens, parents, score


def draft_chain(node: dict, limit: int, min_prob: float) -> tuple[list[int], list[int], float]:
    """draft_from's chain, without the heap: the most frequent child each step (ties to the smaller id)."""
    tokens: list[int] = []
    prob, score = 1.0, 0.0
    while node and len(tokens) < limit:
        total = sum(count for count, _ in node.values())
        token, (count, sub) = min(node.items(), key=lambda item: (-item[1][0], item[0]))
        if prob * count / total < min_prob:
            break
        prob = prob * count / total
        tokens.append(token)
        score += prob
        node = sub
    return tokens, list(range(-1, len(tokens) - 1)), score


class SuffixDrafter(Drafter):
    """Suffix decoding with vLLM's settings and defaults (speculative_config method "suffix", each option
    named suffix_decoding_<option> there): max_tree_depth (24, the longest substring kept and matched),
    max_cached_requests (10000 earlier outputs in the global tree, oldest dropped first; 0: the request's
    own tree only), max_spec_factor (1.0: tokens at most this x the match length), min_token_prob (0.1).
    tree False drafts a chain, as vLLM does; True the paper's tree of the best nodes. A request starts at
    `start` and ends at the next `start` (or end_request), when its output joins the global tree;
    forget_requests empties the global tree.
    """

    name = NAME

    def __init__(self, max_tree_depth: int = 24, max_cached_requests: int = 10000, max_spec_factor: float = 1.0,
                 min_token_prob: float = 0.1, tree: bool = False):
        if not isinstance(max_cached_requests, int) or max_cached_requests < 0:
            raise ValueError(f"max_cached_requests must be an integer >= 0, got {max_cached_requests!r}")
        if not max_spec_factor > 0:
            raise ValueError(f"max_spec_factor must be > 0, got {max_spec_factor!r}")
        if not 0 <= min_token_prob <= 1:
            raise ValueError(f"min_token_prob must be in [0, 1], got {min_token_prob!r}")
        self.max_tree_depth, self.max_cached_requests = max_tree_depth, max_cached_requests
        self.max_spec_factor, self.min_token_prob, self.tree = max_spec_factor, min_token_prob, tree
        self.name = f"{NAME} tree" if tree else NAME
        self.global_tree = SuffixTrie(max_tree_depth)
        self.cached: deque[tuple[int, list[int]]] = deque()  # (request number, its output)
        self.requests = 0
        self.local: SuffixTrie | None = None
        self.global_ends: list[dict] = []  # the global tree's nodes of the sequence's suffixes (SuffixTrie.follow)
        self.seen = 0  # tokens of the request's sequence already in its trie
        self.output: list[int] = []

    @property
    def batched(self) -> bool:
        return False  # one request at a time: each has its own local tree

    def forget_requests(self) -> None:
        """Empty the global tree and drop the request under way without caching it: nothing generated so
        far is drafted from again (the next `start` would otherwise cache the unfinished request)."""
        self.global_tree = SuffixTrie(self.max_tree_depth)
        self.cached.clear()
        self.global_ends = []
        self.local, self.output = None, []

    def start(self, prompt: torch.Tensor) -> None:
        self.end_request()
        self.local = SuffixTrie(self.max_tree_depth)
        tokens = prompt.tolist()
        self.local.extend(0, tokens)
        # only the last depth - 1 tokens decide which suffixes the global tree holds
        self.global_ends = self.global_tree.follow([], tokens[-(self.max_tree_depth - 1):])
        self.seen = len(prompt)
        self.output = []

    def end_request(self) -> None:
        """The current request is over: its output joins the global tree (the oldest cached leaves
        beyond max_cached_requests)."""
        if self.local is None:
            return
        self.local = None
        if self.max_cached_requests == 0 or not self.output:
            return
        self.requests += 1
        self.global_tree.extend(self.requests, self.output)
        self.global_tree.close(self.requests)
        self.cached.append((self.requests, self.output))
        while len(self.cached) > self.max_cached_requests:
            old_id, old = self.cached.popleft()
            self.global_tree.extend(old_id, old, sign=-1)
            self.global_tree.close(old_id)

    def propose(self, ids: torch.Tensor, k: int, sampling: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        if self.local is None:
            self.start(ids[:1])
        self._read(ids.tolist())
        best: tuple[float, list[int], list[int]] = (0.0, [], [])
        # the nodes of the sequence's last 1..depth-1 tokens in each tree, kept up to date as tokens
        # arrive (no search): the request's own trie's open suffixes, and the global tree's
        for ends in (self.local.open[0], self.global_ends):
            found = self.best_match(ends, k)
            if found[0] > best[0]:  # ties to the request's own tree, as Arctic Inference
                best = found
        _, tokens, parents = best
        return Draft(torch.tensor(tokens, dtype=torch.long, device=ids.device),
                     parents=parents if self.tree and tokens else None)

    def best_match(self, ends: list[dict], k: int) -> tuple[float, list[int], list[int]]:
        """Over every match length m (ends[m - 1]: the node of the sequence's last m tokens), the draft with
        the highest score (ties to the longer match): (score, tokens, parents)."""
        best: tuple[float, list[int], list[int]] = (0.0, [], [])
        for m, node in enumerate(ends, start=1):
            limit = min(k, int(m * self.max_spec_factor))
            if not node or limit < 1:
                continue
            tokens, parents, score = draft_from(node, limit, self.min_token_prob, self.tree)
            if tokens and score >= best[0]:
                best = (score, tokens, parents)
        return best

    def _read(self, seq: list[int]) -> None:
        """Add the tokens generated since the last round to the request's tree and output, and follow them
        in the global tree."""
        new = seq[self.seen:]
        if new:
            self.local.extend(0, new)
            self.global_ends = self.global_tree.follow(self.global_ends, new)
            self.output.extend(new)
            self.seen = len(seq)


# ---------------------------------------------------------------- engine settings
SUFFIX_KEYS = ("max_tree_depth", "max_cached_requests", "max_spec_factor", "min_token_prob")


def engine_settings(engine: str, o: Options) -> dict:
    """Suffix decoding's settings as `engine` takes them (speclab.serving.settings.engine_settings)."""
    named = dict(zip(SUFFIX_KEYS, o.suffix))
    if engine == "speclab":
        return {"method": NAME, "k": o.k, **named, **by_batch(engine, o)}
    if engine == "vllm":  # needs Arctic Inference installed beside vLLM (pip install arctic-inference)
        return {"method": NAME, "num_speculative_tokens": o.k,
                **{f"suffix_decoding_{key}": value for key, value in named.items()}, **by_batch(engine, o)}
    raise no(engine, {
        "sglang": "SUFFIX is a --speculative-algorithm (with Arctic Inference installed), but its tree settings "
                  "are not in this course's sources: set the algorithm and check SGLang's suffix_decoding docs",
        "tensorrt-llm": "its SA decoding is a suffix automaton over the request alone, with no cache of earlier "
                        "requests' outputs to set",
        "llama.cpp": "no suffix-tree drafting; ngram-* look up the request's own text",
        "transformers": "no suffix-tree drafting; prompt_lookup_num_tokens looks up the request's own text"}[engine])
