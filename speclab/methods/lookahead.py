"""Lookahead decoding (Fu et al. 2024): the target drafts for itself by Jacobi iteration.

A window of N - 1 levels of W guesses, refined in parallel, leaves a trajectory whose columns, read
downwards and followed by the newest output, are plausible N-grams; they go into a pool keyed by their
first token, and each round the pool's entries for the pending token are verified like any draft, in the
same target pass that advances the window (hao-ai-lab/LookaheadDecoding; llama.cpp examples/lookahead).
In that pass, window level l's slot i sits at position p + 1 + i + l and sees the pending token, level
0's slots 0..i and slot i of levels 1..l; the candidates form a token tree under the pending token
(speclab.trees); the two branches never see each other. The decode loop knows none of this: the window
rides along as a SideBranch of the Draft and its logits come back through take_side_logits.
"""
from __future__ import annotations

import argparse
import random
from collections import OrderedDict
from collections.abc import Sequence

import torch

from speclab.drafting import Draft, Drafter, SideBranch
from speclab.sampling import SamplingParams
from speclab.trees import tree_attention_mask
from speclab.methods.engines import Options, by_batch, no
from speclab.methods.flags import Flag, Setting, Sweep, named

NAME = "lookahead"  # the method's name in the registry


class NgramPool:
    """N-grams keyed by their first token: for each key, at most `per_key` continuations of n - 1 tokens,
    least recently added dropped first (LRU, as in the reference implementation)."""

    def __init__(self, n: int, per_key: int):
        if not isinstance(n, int) or n < 2:
            raise ValueError(f"an n-gram pool needs n >= 2 (a key and at least one token to propose); got {n!r}")
        if not isinstance(per_key, int) or per_key < 1:
            raise ValueError(f"the pool must hold at least 1 n-gram per key (G >= 1); got {per_key!r}")
        self.n, self.per_key = n, per_key
        self.grams: dict[int, OrderedDict[tuple[int, ...], None]] = {}

    def add(self, gram: Sequence[int]) -> None:
        """Add one n-gram (n token ids); adding one already there makes it the most recent."""
        gram = tuple(int(t) for t in gram)
        if len(gram) != self.n:
            raise ValueError(f"this pool holds {self.n}-grams; got {len(gram)} tokens")
        entries = self.grams.setdefault(gram[0], OrderedDict())
        entries.pop(gram[1:], None)
        entries[gram[1:]] = None
        if len(entries) > self.per_key:
            entries.popitem(last=False)

    def add_text(self, ids: Sequence[int]) -> None:
        """Add every n-gram of a token sequence (a prompt, or text just generated), in order."""
        ids = [int(t) for t in ids]
        for start in range(len(ids) - self.n + 1):
            self.add(ids[start:start + self.n])

    def candidates(self, key: int) -> list[tuple[int, ...]]:
        """The continuations stored for `key`, most recent first."""
        return list(reversed(self.grams.get(int(key), ())))

    def __len__(self) -> int:
        return sum(len(entries) for entries in self.grams.values())


def candidate_tree(candidates: Sequence[Sequence[int]]) -> tuple[list[int], list[int]]:
    """Merge token sequences that all follow the pending token into one tree (a trie): (tokens,
    parents). Shared prefixes are verified once, and no two siblings carry the same token, which the
    point-mass rule needs (a sibling identical to a rejected one would be rejected again)."""
    tokens: list[int] = []
    parents: list[int] = []
    child: dict[tuple[int, int], int] = {}  # (parent node, token) -> node
    for candidate in candidates:
        node = -1
        for token in candidate:
            key = (node, int(token))
            if key not in child:
                child[key] = len(tokens)
                tokens.append(int(token))
                parents.append(node)
            node = child[key]
    return tokens, parents


def window_positions(width: int, levels: int) -> list[int]:
    """Position offsets from the pending token of the window's tokens, level by level: L[l][i] at 1 + i + l."""
    return [1 + i + level for level in range(levels) for i in range(width)]


def window_sees(width: int, levels: int) -> torch.Tensor:
    """(M, M) bool, M = levels * width, tokens level by level: whether L[l][i] (row l * width + i) sees
    L[m][j] (column m * width + j). Level 0 is causal within itself (j <= i); a higher level sees level 0
    up to its own slot and, above level 0, only its own column up to itself (the diagonal pattern)."""
    m = levels * width
    sees = torch.zeros(m, m, dtype=torch.bool)
    for level in range(levels):
        for i in range(width):
            row = level * width + i
            sees[row, :i + 1] = True                      # L[0][0..i]
            for upper in range(1, level + 1):
                sees[row, upper * width + i] = True       # L[1..l][i]
    return sees


def window_ngrams(levels: Sequence[Sequence[int]], outputs: Sequence[int]) -> list[tuple[int, ...]]:
    """The n-grams a full window yields: column i read down the levels, then the top level's output at
    slot i (n = len(levels) + 1 tokens each)."""
    return [tuple(int(level[i]) for level in levels) + (int(outputs[i]),) for i in range(len(outputs))]


class LookaheadDrafter(Drafter):
    """Lookahead decoding: a Jacobi window of N - 1 levels of W guesses advanced in the verification pass
    itself, and an n-gram pool of at most G continuations per key, verified as a token tree. window (W):
    guesses per level; ngram (N): candidates N - 1 tokens deep (k still bounds the depth); pool (G):
    candidates kept and verified per key (the pending token); from_context: also seed the pool with the
    prompt's n-grams and the output's (prompt lookup inside lookahead); seed: draws the first level from the
    prompt's tokens. The window advances by the target's argmax whatever the sampling: it only supplies
    candidates, point masses to the rule, so the output stays lossless.
    """

    name = "lookahead"

    def __init__(self, window: int = 4, ngram: int = 4, pool: int = 4, from_context: bool = True, seed: int = 0):
        for label, value, low in (("window (W)", window, 1), ("ngram (N)", ngram, 2), ("pool (G)", pool, 1)):
            if not isinstance(value, int) or value < low:
                raise ValueError(f"lookahead {label} must be an integer >= {low}; got {value!r}")
        self.width, self.n, self.per_key = window, ngram, pool
        self.from_context, self.seed = from_context, seed
        self.pool = NgramPool(ngram, pool)
        self.levels: list[list[int]] = []
        self._sees = {m: window_sees(window, m) for m in range(1, ngram)}
        self._seen = 0  # tokens of the sequence whose n-grams are in the pool (from_context)
        self.record = False  # keep the window and the Draft of every round (for figures)
        self.history: list[list[list[int]]] = []
        self.drafts: list[Draft] = []

    def start(self, prompt: torch.Tensor) -> None:
        ids = prompt.tolist()
        rng = random.Random(self.seed)
        self.pool = NgramPool(self.n, self.per_key)
        self.levels = [[rng.choice(ids) for _ in range(self.width)]]
        self.history, self.drafts = [], []
        self._seen = 0
        if self.from_context:
            self._learn(ids)

    def _learn(self, ids: list[int]) -> None:
        """Add the n-grams of the sequence that end in tokens not yet seen."""
        self.pool.add_text(ids[max(0, self._seen - self.n + 1):])
        self._seen = len(ids)

    def propose(self, ids: torch.Tensor, k: int, sampling: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        tokens, parents = candidate_tree(self.pool.candidates(int(ids[-1])))
        flat = [t for level in self.levels for t in level]
        side = SideBranch(torch.tensor(flat, dtype=torch.long, device=ids.device),
                          window_positions(self.width, len(self.levels)), self._sees[len(self.levels)])
        draft = Draft(torch.tensor(tokens, dtype=torch.long, device=ids.device), None, parents, side)
        if self.record:
            self.history.append([list(level) for level in self.levels])
            self.drafts.append(draft)
        return draft

    def take_side_logits(self, logits: torch.Tensor) -> None:
        guesses = logits.argmax(dim=-1).view(len(self.levels), self.width).tolist()
        top = guesses[-1]  # the newest level's outputs: the next level
        if len(self.levels) == self.n - 1:  # a full window: every column is an n-gram
            for gram in window_ngrams(self.levels, top):
                self.pool.add(gram)
            self.levels = self.levels[1:] + [top]
        else:
            self.levels.append(top)

    def update(self, ids: torch.Tensor, num_accepted: int) -> None:
        if self.from_context:
            self._learn(ids.tolist())


# ---------------------------------------------------------------- for teaching: Jacobi alone, and the pass's layout
@torch.inference_mode()
def jacobi_decode(target: torch.nn.Module, prompt: torch.Tensor, width: int, max_iterations: int | None = None,
                  seed: int = 0) -> list[list[int]]:
    """Plain Jacobi decoding of one block of `width` tokens after `prompt` (1-D ids), greedy: start from
    guesses drawn from the prompt, then replace every guess at once by the target's argmax given the
    guesses before it, until nothing changes. Returns the block after each iteration (the first entry
    is the initial guess). At least one more position is final after every iteration, so it ends
    within `width` iterations; the last entry is what greedy decoding produces."""
    if not isinstance(width, int) or width < 1:
        raise ValueError(f"width must be an integer >= 1, got {width!r}")
    rng = random.Random(seed)
    ids = prompt.tolist()
    block = [rng.choice(ids) for _ in range(width)]
    history = [list(block)]
    device = next(target.parameters()).device
    for _ in range(max_iterations or width):
        sequence = torch.tensor(ids + block, dtype=torch.long, device=device)
        logits = target(sequence.view(1, -1)).logits[0, len(ids) - 1:-1]  # position j guesses block[j]
        new = logits.argmax(dim=-1).tolist()
        history.append(new)
        if new == block:
            break
        block = new
    return history


def pass_visibility(draft: Draft) -> torch.Tensor:
    """(1 + N + M) square bool matrix of who sees whom in the verify pass of a Draft with a side branch
    (rows and columns: the pending token, the N candidate nodes, the M window tokens): the mask the
    decode loop builds, without the cached prefix that every row sees."""
    sees = draft.side.sees if draft.side is not None else None
    return tree_attention_mask(draft.tree, 0, torch.float32, "cpu", sees)[0, 0] == 0


# ---------------------------------------------------------------- engine settings
def engine_settings(engine: str, o: Options) -> dict:
    """Lookahead's settings as `engine` takes them (speclab.serving.settings.engine_settings)."""
    w, n, g = o.lookahead
    if engine == "speclab":
        # LookaheadDrafter's own option names (window, ngram, pool)
        return {"method": NAME, **dict(window=w, ngram=n, pool=g), "k": o.k, **by_batch(engine, o)}
    if engine == "tensorrt-llm":  # the LLM API's LookaheadDecodingConfig: W, N, G by their own names
        return {"decoding_type": "Lookahead", "max_window_size": w, "max_ngram_size": n,
                "max_verification_set_size": g, **by_batch(engine, o)}
    raise no(engine, "no lookahead decoding (hao-ai-lab/LookaheadDecoding runs it on transformers; "
                     "TensorRT-LLM has it)")


# ================================================================ its setting on the command line
def lookahead_setting(text: str) -> tuple[int, int, int]:
    """'W,N,G' -> (W, N, G), for --lookahead."""
    try:
        window, ngram, pool = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--lookahead takes W,N,G (three integers, e.g. 4,4,4), got {text!r}")
    return window, ngram, pool


def lookahead_rows(values) -> tuple[Setting, ...]:
    """A bench row per (W, N, G): "speclab lookahead 3,3,2" when there are several."""
    return named(map(tuple, values), lambda v: "{},{},{}".format(*v),
                 lambda v, text: Setting(text, dict(window=v[0], ngram=v[1], pool=v[2])))


# the bench's (W, N, G): 4,4,4, chosen in chapter 6
SWEEP = Sweep("lookahead", Flag("--lookahead", dict(
    type=lookahead_setting, nargs="+", metavar="W,N,G",
    help="the lookahead row's window, n-gram size and pool size per key (default 4,4,4); several settings give a "
         "row each, side by side (a sweep)")), lookahead_rows, default=((4, 4, 4),))
