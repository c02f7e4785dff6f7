"""A causal LM and its KV cache: feed tokens, get logits, roll back.

This is the only place that touches the cache. Rolling back after a rejection crops the cache to
the accepted length, so a rejected token's keys and values never reach a later step. After a tree
pass the accepted path is not a suffix of what was appended, so `keep_path` first moves the path's
rows up behind the pending token (the rows `trees.kept_positions` names), then crops; for a chain
the path is already in place and the crop alone does. The public
`DynamicCache.crop` takes a negative count of tokens to drop in transformers 5 (older tutorials
pass the absolute length, which now raises); a negative count means the same in 4.x.

The fast path (chapter 10) is a second runner with the same methods, `StaticRunner`: the model rewritten
flat on a static cache written by position (speclab.fast_model), rollback a length, optionally compiled.
`enable_fast_path(model)` switches a model to it, and `runner_for` hands every caller (the decode loop,
a draft model's drafter) the runner its model is set up for: the loop itself never changes.
"""
from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch._dynamo
from transformers import DynamicCache

from speclab.fast_model import FastLlama
from speclab.trees import chain_parents, pass_visibility, tree_attention_mask, tree_position_ids


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def context_length(model: torch.nn.Module) -> int | None:
    """The longest sequence the model was built for (max_position_embeddings), if its config says."""
    return getattr(getattr(model, "config", None), "max_position_embeddings", None)


class ModelRunner:
    def __init__(self, model: torch.nn.Module, who: str = "model"):
        if not callable(getattr(model, "forward", None)) or not hasattr(model, "config"):
            raise TypeError(f"the {who} must be a transformers causal LM (a PreTrainedModel with a config); "
                            f"got {type(model).__name__}")
        self.model, self.who = model, who
        self.device = model_device(model)
        self.cache: DynamicCache | None = None
        self.reset()

    def reset(self) -> None:
        self.cache = DynamicCache(config=self.model.config)

    @property
    def length(self) -> int:
        """Tokens held in the cache."""
        return self.cache.get_seq_length()

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        """Logits (n, V) for the n new tokens `ids` (1-D), appended after the cached ones.
        last_only computes the last position's logits alone (the vocabulary projection is a large
        share of a small model's step)."""
        out = self.model(input_ids=ids.view(1, -1), past_key_values=self.cache, use_cache=True,
                         logits_to_keep=1 if last_only else 0)
        return out.logits[0]

    @torch.inference_mode()
    def verify_pass(self, ids: torch.Tensor, parents: Sequence[int] | None = None,
                    feature_layers: Sequence[int] = (), side=None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One pass over [pending token, draft nodes, side tokens] (1-D `ids`), appended after the cached
        tokens: (logits (n, V), features or None). With `parents` the nodes form a tree (speclab.trees):
        each sees the cache, the pending token and its own ancestors, at position cache + depth. Without,
        they form a chain, whose tree mask is the causal mask the model builds itself. `side` (a
        drafting.SideBranch, its tokens last in `ids`) adds rows with their own mask and positions.
        `features` (n, len(feature_layers) * H) concatenates the hidden states hidden_states[layer] of
        the requested layers (-1: the last, after the final norm: what the lm_head reads)."""
        extra = {}
        if parents is not None or side is not None:
            check_tree_attention(self.model)
            cached = self.length
            parents = parents if parents is not None else chain_parents(len(ids) - 1 - len(side))
            sees, offsets = (side.sees, side.depths) if side is not None else (None, ())
            extra = dict(attention_mask=tree_attention_mask(parents, cached, self.model.dtype, self.device, sees),
                         position_ids=tree_position_ids(parents, cached, self.device, offsets))
        out = self.model(input_ids=ids.view(1, -1), past_key_values=self.cache, use_cache=True,
                         output_hidden_states=bool(feature_layers), **extra)
        features = None
        if feature_layers:
            features = torch.cat([out.hidden_states[layer][0] for layer in feature_layers], dim=-1)
        return out.logits[0], features

    def keep_path(self, cached: int, path: Sequence[int]) -> None:
        """After a pass over [pending, nodes] appended at row `cached`: keep the prefix, the pending
        token and the accepted path. A path through the first nodes in order (every chain's) is a
        prefix of what was appended, so cropping does; otherwise the path's rows are moved up to
        follow the pending token, and the rest cropped: a few rows move, not the whole cache."""
        path = list(path)
        if path != list(range(len(path))):
            self.move_rows([cached + 1 + i for i in path], cached + 1)
        self.rollback(cached + 1 + len(path))

    @torch.inference_mode()
    def move_rows(self, sources: Sequence[int], start: int) -> None:
        """Copy cache rows `sources` (in this order) to rows start, start + 1, ... in every layer."""
        src = torch.tensor(list(sources), dtype=torch.long, device=self.device)
        dst = slice(start, start + len(sources))
        for layer in self.cache.layers:
            if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
                continue
            if getattr(layer, "is_sliding", False) and layer.keys.shape[-2] != layer.get_seq_length():
                raise NotImplementedError(f"{type(self.model).__name__}: its sliding-window cache has dropped old "
                                          "positions, and a tree pass cannot be gathered from it; keep prompt and "
                                          "output within the sliding window, or draft chains")
            # index_select copies the source rows first, so overlapping sources and targets are safe
            layer.keys[..., dst, :] = layer.keys.index_select(-2, src)
            layer.values[..., dst, :] = layer.values.index_select(-2, src)

    def rollback(self, length: int) -> None:
        """Forget every cached position from `length` on."""
        extra = self.length - length
        if extra > 0:
            self.cache.crop(-extra)


_TREE_READY: weakref.WeakSet = weakref.WeakSet()  # models that passed the check


@torch.inference_mode()
def check_tree_attention(model: torch.nn.Module) -> None:
    """Make sure `model` honours a 4-D tree mask with position ids, once per model: a 3-token prefix
    and two siblings in one tree pass must give the second sibling the logits it gets when it alone
    follows the prefix. Attention kernels that ignore custom masks (flash attention) or models that
    cannot take them fail here with an error naming the class, instead of verifying a tree wrongly."""
    if model in _TREE_READY:
        return
    name = type(model).__name__
    device = model_device(model)
    prefix, siblings = torch.tensor([[3, 5, 7]], device=device), torch.tensor([2, 4], device=device)
    try:
        cache = DynamicCache(config=model.config)
        model(input_ids=prefix[:, :-1], past_key_values=cache, use_cache=True)
        tree = torch.cat([prefix[0, -1:], siblings]).view(1, -1)
        tree_logits = model(input_ids=tree, past_key_values=cache, use_cache=True,
                            attention_mask=tree_attention_mask([-1, -1], 2, model.dtype, device),
                            position_ids=tree_position_ids([-1, -1], 2, device)).logits[0, -1]
    except Exception as error:  # noqa: BLE001 (any failure here means: no tree attention for this model)
        raise TypeError(f"{name} cannot take a 4-D attention mask with position ids ({type(error).__name__}: "
                        f"{error}); tree drafts need it: use a chain drafter, or load the model with "
                        "attn_implementation='sdpa' or 'eager'") from error
    plain = model(input_ids=torch.cat([prefix[0], siblings[1:]]).view(1, -1)).logits[0, -1]
    scale = plain.abs().max().clamp(min=1.0)
    tolerance = 1e-3 if model.dtype == torch.float32 else 5e-2
    if not torch.allclose(tree_logits.float() / scale, plain.float() / scale, atol=tolerance):
        raise TypeError(f"{name} ignores a 4-D tree attention mask (attention implementation "
                        f"{getattr(model.config, '_attn_implementation', '?')!r}): a tree pass would be verified "
                        "wrongly; load the model with attn_implementation='sdpa' or 'eager', or use a chain drafter")
    _TREE_READY.add(model)


# ---------------------------------------------------------------- the fast path
PAD_GAIN = 0.9  # pad to a wider pass only where it measured at least 10% cheaper: not on timing noise


@dataclass
class FastPath:
    """A model's fast path: its FastLlama, the callable that runs it (compiled or not) and, once
    measured, the width each verify pass is padded to."""

    network: FastLlama
    step: Callable[..., tuple[torch.Tensor, torch.Tensor | None]]  # network.forward, or compiled
    compiled: bool
    bucket: int = 1  # attention reads the cache up to the pass's end rounded up to this (fixed shapes)
    pad_to: dict[int, int] = field(default_factory=dict)  # width -> cheapest measured width >= it
    width_ms: dict[int, float] = field(default_factory=dict)

    def graph_width(self, n: int) -> int:
        """The width a pass of n rows runs at: compiled, graph_width(n); else n."""
        return graph_width(n) if self.compiled else n

    def set_width_costs(self, ms: dict[int, float]) -> None:
        """Pad each verify pass to the cheapest measured width at least as wide (speclab.measure.profiling
        .tune_verify_widths measures them): on some CPUs a 2- or 3-row matrix product costs more than a
        5-row one, and the padding rows cost less than they save."""
        self.width_ms = dict(ms)
        self.pad_to = {w: min((v for v in ms if v == w or (v > w and ms[v] < PAD_GAIN * ms[w])),
                              key=lambda v: (ms[v], v)) for w in ms}


_FAST_PATHS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> FastPath


FAST_MODES = ("static", "compiled")
# the compiled path on a CPU reads the cache in buckets of this many positions: one graph per bucket and
# width (inductor compiles each once); a GPU reads the whole cache, one CUDA graph per width
COMPILED_CPU_BUCKET = 256
COMPILED_MAX_WIDTH = 64  # wider passes (prefills) run the same network uncompiled
# the widths compiled verify passes run at (padded up): every chain up to K = 7, and steps beyond, so a tree
# or a lookahead window of any size reuses one of a few graphs instead of compiling its own (~30 s each here)
COMPILED_WIDTHS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64)
COMPILED_GRAPHS = 256  # the compiled graphs dynamo may keep for FastLlama.forward
# compiled on a CPU, passes of at most this many rows multiply as generated loops, not MKL calls
# (FastLlama.linear): measured on the bundled target's shapes, loops were faster up to 8 rows, GEMM from 16.
# Re-measured with COMPILED_CPU_OPTIONS, loops up to 16 rows vs up to 8 (ms at 8/12/16 rows): bundled
# 7.9/10.2/12.3 vs 6.9/12.5/12.8, SmolLM2 48/67/87 vs 59/84/91; no clear gain, and wide passes pay on neither
COMPILED_CPU_GEMV_ROWS = 8
# inductor's options on a CPU. Freezing: the weights become constants, prepacked for MKL's GEMM (as vLLM's
# CPU runner compiles); it halved the MKL products' time here. realize_reads_threshold 1: a value read more
# than once is computed once and stored. By default inductor inlined a pointwise input (the last layer's
# residual add and the final norm) into the looped lm_head product, recomputing it for each of the
# vocabulary's rows and each pass row: a 5-row pass cost 2.6 single steps on SmolLM2 (53 vs 21 ms), 1.4 with
# this (29 ms); on the bundled target 6.9 -> 4.2-5.0 ms, 1 row unchanged (2 threads, AMD EPYC)
COMPILED_CPU_OPTIONS = {"freezing": True, "realize_reads_threshold": 1}


def graph_width(n: int) -> int:
    """The width a compiled pass of n rows runs at: the next of COMPILED_WIDTHS (one graph each, so trees
    and lookahead windows of every size share a few graphs); n past them (a prefill, uncompiled)."""
    return n if n > COMPILED_MAX_WIDTH else min(w for w in COMPILED_WIDTHS if w >= n)


def read_end(end: int, bucket: int, max_len: int) -> int:
    """How many cache slots a pass whose rows end at slot `end` reads: `end` rounded up to a whole bucket
    (fixed shapes for the compiler; the slots past `end` are masked), at most the cache's length."""
    return min(max_len, -(-end // bucket) * bucket)


def enable_fast_path(model: torch.nn.Module, mode: str = "static", max_len: int | None = None) -> FastPath:
    """Run `model` on the fast path from now on (every runner_for(model)): a FastLlama of its weights on
    a static cache of max_len positions (default: the model's context length, at most 4096). "static"
    runs it eagerly; "compiled" through torch.compile (inductor on a CPU; on a GPU mode
    "reduce-overhead", which records CUDA graphs). Models the fast path cannot take raise TypeError
    (speclab.fast_model.check_fast_architecture), never fall back to the eager path silently."""
    if mode not in FAST_MODES:
        raise ValueError(f"the fast path's mode is one of {FAST_MODES}, got {mode!r}")
    max_len = max_len or min(context_length(model) or 4096, 4096)
    network = FastLlama(model, max_len).eval()
    step, bucket = network.forward, 1
    if mode == "compiled":  # fixed shapes: attention reads whole buckets of the cache, masked
        on_gpu = model_device(model).type == "cuda"
        # one graph per width, bucket and output kind, for the target and the draft alike (one code object):
        # more than torch's default of 8, and past the limit an error, never a silent fall back to eager
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, COMPILED_GRAPHS)
        torch._dynamo.config.fail_on_recompile_limit_hit = True
        step = torch.compile(network.forward, mode="reduce-overhead" if on_gpu else None, dynamic=False,
                             options=None if on_gpu else dict(COMPILED_CPU_OPTIONS))
        bucket = max_len if on_gpu else COMPILED_CPU_BUCKET
        network.gemv_rows = 0 if on_gpu else COMPILED_CPU_GEMV_ROWS
    path = FastPath(network, step, mode == "compiled", bucket)
    _FAST_PATHS[model] = path
    return path


def disable_fast_path(model: torch.nn.Module) -> None:
    """Back to the eager path (transformers' model and DynamicCache)."""
    use_fast_path(model, None)


def fast_path_of(model: torch.nn.Module) -> FastPath | None:
    return _FAST_PATHS.get(model)


def use_fast_path(model: torch.nn.Module, path: FastPath | None) -> None:
    """Run `model` on `path`, a fast path built for it earlier by enable_fast_path (None: the eager path),
    without rebuilding or recompiling anything: how a drafter whose network is its own (layer skipping's
    view of the target) follows the target's path from one sequence to the next."""
    if path is None:
        _FAST_PATHS.pop(model, None)
    else:
        _FAST_PATHS[model] = path


@contextmanager
def fast_paths(paths: Mapping[torch.nn.Module, FastPath]) -> Iterator[None]:
    """Inside the block the models of `paths` run on those fast paths (built once by enable_fast_path and
    kept): how the bench runs every method on both paths in one process without rebuilding anything."""
    before = {model: _FAST_PATHS.get(model) for model in paths}
    _FAST_PATHS.update(paths)
    try:
        yield
    finally:
        for model, path in before.items():
            use_fast_path(model, path)


def runner_for(model: torch.nn.Module, who: str = "model") -> ModelRunner | StaticRunner:
    """The runner `model` is set up for: StaticRunner on the fast path, ModelRunner otherwise."""
    path = _FAST_PATHS.get(model)
    return ModelRunner(model, who) if path is None else StaticRunner(model, path, who)


class StaticRunner:
    """ModelRunner's methods on the fast path: tokens are written to the static cache by position, a
    pass's mask says which slots each row sees, and rolling back sets a length. A verify pass narrower
    than a width measured to cost less (FastPath.set_width_costs) is padded up to it: the padding rows see only
    the prefix and themselves, their outputs are dropped, and their slots lie past the length."""

    def __init__(self, model: torch.nn.Module, path: FastPath, who: str = "model"):
        self.model, self.path, self.who = model, path, who
        self.device = model_device(model)
        self.length = 0

    def reset(self) -> None:
        self.length = 0

    def run(self, ids: torch.Tensor, positions: torch.Tensor, sees_own: torch.Tensor,
            feature_layers: Sequence[int] = (), last_only: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Feed n tokens into slots length .. length + n - 1 at `positions`; `sees_own` (n, n) says which
        of the pass's own rows each row sees (every row sees the whole cached prefix)."""
        n, cached = len(ids), self.length
        end = cached + n
        if end > self.path.network.max_len:
            raise ValueError(f"the {self.who}'s static cache holds {self.path.network.max_len} positions and this "
                             f"pass needs {end}: enable the fast path with a larger max_len "
                             "(enable_fast_path(model, max_len=...)), or ask for fewer tokens")
        read = read_end(end, self.path.bucket, self.path.network.max_len)
        sees = torch.zeros(n, read, dtype=torch.bool, device=self.device)
        sees[:, :cached] = True
        sees[:, cached:end] = sees_own.to(self.device)
        slots = torch.arange(cached, end, device=self.device)
        graphs = self.path.compiled and self.device.type == "cuda"
        if graphs:  # a new step of the CUDA graphs: their output buffers are overwritten by the next replay
            torch.compiler.cudagraph_mark_step_begin()
        # a prompt's prefill (wider than any verify pass) runs uncompiled: one graph per prompt length would
        # cost a compilation per prompt
        step = self.path.step if n <= COMPILED_MAX_WIDTH else self.path.network.forward
        with torch.no_grad():
            logits, features = step(ids, slots, positions, sees, read, tuple(feature_layers), last_only)
        if graphs:  # so the caller's tensors outlive the next replay
            logits, features = logits.clone(), (features.clone() if features is not None else None)
        self.length = end
        return logits, features

    def forward(self, ids: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        n = len(ids)
        positions = torch.arange(self.length, self.length + n, device=self.device)
        causal = torch.ones(n, n, dtype=torch.bool, device=self.device).tril()
        return self.run(ids, positions, causal, last_only=last_only)[0]

    def verify_pass(self, ids: torch.Tensor, parents: Sequence[int] | None = None,
                    feature_layers: Sequence[int] = (), side=None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """ModelRunner.verify_pass on the static cache (same rows, masks and positions)."""
        n, cached = len(ids), self.length
        side_len = len(side) if side is not None else 0
        parents = list(parents) if parents is not None else chain_parents(n - 1 - side_len)
        sees_own = pass_visibility(parents, side.sees if side is not None else None)
        positions = tree_position_ids(parents, cached, self.device, side.depths if side is not None else ())[0]
        width = self.path.pad_to.get(n) or self.path.graph_width(n)
        if width > n:  # padding rows: placeholder tokens that see the prefix and themselves
            ids = torch.cat([ids, ids.new_zeros(width - n)])
            positions = torch.cat([positions, positions[-1] + torch.arange(1, width - n + 1, device=self.device)])
            padded = torch.eye(width, dtype=torch.bool)
            padded[:n, :n] = sees_own
            sees_own = padded
        logits, features = self.run(ids, positions, sees_own, feature_layers)
        self.length = cached + n
        return logits[:n], (features[:n] if features is not None else None)

    def keep_path(self, cached: int, path: Sequence[int]) -> None:
        """As ModelRunner.keep_path: a chain's path is already in place; a tree's is moved up first."""
        path = list(path)
        if path != list(range(len(path))):
            self.path.network.move_rows([cached + 1 + i for i in path], cached + 1)
        self.rollback(cached + 1 + len(path))

    def move_rows(self, sources: Sequence[int], start: int) -> None:
        self.path.network.move_rows(sources, start)

    def rollback(self, length: int) -> None:
        """Forget every cached position from `length` on: a length, nothing is copied."""
        self.length = min(self.length, length)
