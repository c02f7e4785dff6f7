"""A causal LM and its KV cache: feed tokens, get logits, roll back. The only place that touches the cache.

Rolling back crops the cache to the accepted length, so a rejected token never reaches a later step. After
a tree pass the accepted path is not a suffix of what was appended, so keep_path first moves its rows up
behind the pending token (trees.kept_positions), then crops. DynamicCache.crop takes a negative count of
tokens to drop in transformers 5 (the absolute length raises there). The fast path (chapter 10) is a second
runner with the same methods, StaticRunner (speclab.fast_model, optionally compiled): enable_fast_path
builds a model's FastPath and keeps it on the model (fast_path_of reads it), and runner_for hands every
caller the runner its model is set up for.
"""
from __future__ import annotations

import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import wraps
from typing import TYPE_CHECKING

import torch
import torch._dynamo
from transformers import DynamicCache

from speclab.fast_model import FastLlama
from speclab.graphs import GraphedCall
from speclab.trees import chain_parents, pass_visibility, tree_attention_mask, tree_position_ids

if TYPE_CHECKING:  # the interface sits above the runner: named for the type only
    from speclab.drafting import SideBranch


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def context_length(model: torch.nn.Module) -> int | None:
    """The longest sequence the model was built for (max_position_embeddings), if its config says."""
    return getattr(getattr(model, "config", None), "max_position_embeddings", None)


class Runner(ABC):
    """What the decode loop and the drafters ask of a model's runner, an abstract base class: ModelRunner
    (transformers' model and DynamicCache, one sequence) and StaticRunner (the fast path's static cache, a
    batch of sequences) implement it. A row is a sequence's cache row (0 for one prompt); the single-sequence
    methods (forward, verify_pass, length) act on row 0. Passes append after a row's cached tokens
    and return logits (n, V); verify passes also the features of `feature_layers` (or None)."""

    model: torch.nn.Module
    device: torch.device
    who: str
    lengths: list[int]  # tokens cached per row

    @property
    def length(self) -> int:
        """Tokens cached in row 0."""
        return self.lengths[0]

    @abstractmethod
    def reset(self) -> None:
        """Forget every cached token."""

    @abstractmethod
    def forward(self, ids: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        """Logits (n, V), or (1, V) with last_only, for the new tokens `ids` (1-D) of row 0."""

    @abstractmethod
    def forward_rows(self, rows: Sequence[int], ids: Sequence[torch.Tensor], last_only: bool = False
                     ) -> list[torch.Tensor]:
        """`forward` for several rows in one pass: logits per row."""

    @abstractmethod
    def verify_pass(self, ids: torch.Tensor, parents: Sequence[int] | None = None,
                    feature_layers: Sequence[int] = (), side: SideBranch | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One pass over [pending token, draft nodes (a chain, or a tree by `parents`), side tokens]."""

    @abstractmethod
    def verify_rows(self, rows: Sequence[int], ids: Sequence[torch.Tensor],
                    parents: Sequence[Sequence[int] | None] | None = None, feature_layers: Sequence[int] = (),
                    sides: Sequence | None = None) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """verify_pass for several rows in one pass."""

    @abstractmethod
    def move_rows(self, sources: Sequence[int], start: int, row: int = 0) -> None:
        """Copy cache positions `sources` (in order) to positions start, start + 1, ... of `row`."""

    @abstractmethod
    def rollback(self, length: int, row: int = 0) -> None:
        """Forget every position of `row` from `length` on."""

    def keep_path(self, cached: int, path: Sequence[int], row: int = 0) -> None:
        """After a pass over [pending, nodes] appended at position `cached`: keep the prefix, the pending
        token and the accepted path. A path through the first nodes in order (every chain's) is a
        prefix of what was appended, so cutting the length does; otherwise the path's positions are moved
        up to follow the pending token first: a few positions move, not the whole cache."""
        path = list(path)
        if path != list(range(len(path))):
            self.move_rows([cached + 1 + i for i in path], cached + 1, row)
        self.rollback(cached + 1 + len(path), row)


class ModelRunner(Runner):
    """The Runner of transformers' model on its DynamicCache: one sequence, in row 0."""

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
                    feature_layers: Sequence[int] = (), side: SideBranch | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor | None]:
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

    def only_row(self, rows: Sequence[int]) -> None:
        """The eager path decodes one sequence: refuse a batch with what to do instead."""
        if list(rows) != [0]:
            raise ValueError(f"the {self.who} runs on the eager path (transformers' DynamicCache), which decodes one "
                             f"sequence at a time; batched decoding ({len(rows)} sequences) runs on the fast path's "
                             "static cache: speclab.runner.enable_fast_path(model, max_batch=...) for the target "
                             "and any draft model first")

    def forward_rows(self, rows: Sequence[int], ids: Sequence[torch.Tensor], last_only: bool = False
                     ) -> list[torch.Tensor]:
        self.only_row(rows)
        return [self.forward(ids[0], last_only)]

    def verify_rows(self, rows: Sequence[int], ids: Sequence[torch.Tensor],
                    parents: Sequence[Sequence[int] | None] | None = None, feature_layers: Sequence[int] = (),
                    sides: Sequence | None = None) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        self.only_row(rows)
        return [self.verify_pass(ids[0], parents[0] if parents else None, feature_layers,
                                 sides[0] if sides else None)]

    @property
    def lengths(self) -> list[int]:
        return [self.cache.get_seq_length()]

    @torch.inference_mode()
    def move_rows(self, sources: Sequence[int], start: int, row: int = 0) -> None:
        self.only_row([row])
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

    def rollback(self, length: int, row: int = 0) -> None:
        self.only_row([row])
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
    step: Callable[..., tuple[torch.Tensor, torch.Tensor | None]]  # network.forward, compiled or graphed
    mode: str = "static"  # one of FAST_MODES
    bucket: int = 1  # attention reads the cache up to the pass's end rounded up to this (fixed shapes)
    pad_to: dict[int, int] = field(default_factory=dict)  # width -> cheapest measured width >= it
    width_ms: dict[int, float] = field(default_factory=dict)

    @property
    def compiled(self) -> bool:
        """Whether passes run at fixed shapes (padded widths and batches): compiled, or replayed as graphs."""
        return self.mode != "static"

    def graph_width(self, n: int) -> int:
        """The width a pass of n rows runs at: compiled, graph_width(n); else n."""
        return graph_width(n) if self.compiled else n

    def verify_width(self, n: int) -> int:
        """The width a verify pass of n rows runs at: padded to a cheaper measured width, or the graph's."""
        return self.pad_to.get(n) or self.graph_width(n)

    def set_width_costs(self, ms: dict[int, float]) -> None:
        """Pad each verify pass to the cheapest measured width at least as wide (speclab.measure.profiling
        .tune_verify_widths measures them): on some CPUs a 2- or 3-row matrix product costs more than a
        5-row one, and the padding rows cost less than they save."""
        self.width_ms = dict(ms)
        self.pad_to = {w: min((v for v in ms if v == w or (v > w and ms[v] < PAD_GAIN * ms[w])),
                              key=lambda v: (ms[v], v)) for w in ms}

    def __deepcopy__(self, memo: dict) -> None:
        """A copy of a model is not on its original's fast path (that network reads the original's weights)."""
        return None


FAST_PATH_ATTRIBUTE = "speclab_fast_path"  # where a model keeps its FastPath (use_fast_path sets it)


FAST_MODES = ("static", "compiled", "graphs")
# the compiled path on a CPU reads the cache in buckets of this many positions: one graph per bucket and
# width (inductor compiles each once); a GPU reads the whole cache, one CUDA graph per width (and "graphs"
# records those CUDA graphs itself, speclab.graphs, at the same fixed widths and batches)
COMPILED_CPU_BUCKET = 256
COMPILED_MAX_WIDTH = 64  # wider passes (prefills) run the same network uncompiled
# the widths compiled verify passes run at (padded up): every chain up to K = 7, and steps beyond, so a tree
# or a lookahead window of any size reuses one of a few graphs instead of compiling its own (~30 s each here)
COMPILED_WIDTHS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64)
COMPILED_GRAPHS = 256  # the graphs dynamo may keep a compiled function (compile_for_fast_path)
# compiled on a CPU, passes of at most this many rows multiply as generated loops, not MKL calls
# (FastLlama.linear): where loops timed faster than GEMM on the bundled target's and SmolLM2's shapes
COMPILED_CPU_GEMV_ROWS = 8
# inductor's options on a CPU. realize_reads_threshold 1: a value read more than once is computed once and
# stored (otherwise inductor inlines the final norm into the looped lm_head product, recomputing it for each
# vocabulary row). cpp.enable_kernel_profile: each kernel reports itself to torch.profiler, so step_breakdown
# tells kernels from Python. "freezing" here only sends the graph through inductor's inference passes (dynamo
# decides from the global torch._inductor.config.freezing whether weights become constants; that global
# is left off: it changed no pass beyond noise and doubled the compile time)
COMPILED_CPU_OPTIONS = {"freezing": True, "realize_reads_threshold": 1, "cpp.enable_kernel_profile": True}


COMPILED_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)  # batch sizes compiled passes run at (padded up)


def graph_batch(batch: int, max_batch: int) -> int:
    """The batch size a compiled pass of `batch` sequences runs at: the next of COMPILED_BATCHES (one graph
    each, not one per batch size as sequences finish), at most max_batch + 1 (every row and the scratch)."""
    if batch == 1:
        return 1
    return min([b for b in COMPILED_BATCHES if b >= batch] + [max_batch + 1])


def graph_width(n: int) -> int:
    """The width a compiled pass of n rows runs at: the next of COMPILED_WIDTHS (one graph each, so trees
    and lookahead windows of every size share a few graphs); n past them (a prefill, uncompiled)."""
    return n if n > COMPILED_MAX_WIDTH else min(w for w in COMPILED_WIDTHS if w >= n)


def read_end(end: int, bucket: int, max_len: int) -> int:
    """How many cache slots a pass whose rows end at slot `end` reads: `end` rounded up to a whole bucket
    (fixed shapes for the compiler; the slots past `end` are masked), at most the cache's length."""
    return min(max_len, -(-end // bucket) * bucket)


def enable_fast_path(model: torch.nn.Module, mode: str = "static", max_len: int | None = None,
                     max_batch: int = 1) -> FastPath:
    """Run `model` on the fast path from now on (every runner_for(model)): a FastLlama of its weights on
    a static cache of max_len positions (default: the model's context length, at most 4096) for up to
    max_batch sequences at once (batched decoding: a list of prompts; the cache's size grows with it). "static"
    runs it eagerly; "compiled" through torch.compile (inductor on a CPU; on a GPU mode
    "reduce-overhead", which records CUDA graphs); "graphs" records a CUDA graph of each pass's width and
    batch directly, without inductor (speclab.graphs: seconds, not minutes; a CUDA device, or its CPU dry
    run with SPECLAB_GRAPHS_DRY_RUN=1). Models the fast path cannot take raise TypeError
    (speclab.fast_model.check_fast_architecture), never fall back to the eager path silently."""
    if mode not in FAST_MODES:
        raise ValueError(f"the fast path's mode is one of {FAST_MODES}, got {mode!r}")
    max_len = max_len or min(context_length(model) or 4096, 4096)
    network = FastLlama(model, max_len, max_batch).eval()
    step, bucket = network.forward, 1
    if mode == "compiled":  # fixed shapes: attention reads whole buckets of the cache, masked
        on_gpu = model_device(model).type == "cuda"
        step = compile_for_fast_path(network.forward, mode="reduce-overhead" if on_gpu else None,
                                     options=None if on_gpu else dict(COMPILED_CPU_OPTIONS))
        bucket = max_len if on_gpu else COMPILED_CPU_BUCKET
        network.gemv_rows = 0 if on_gpu else COMPILED_CPU_GEMV_ROWS
    elif mode == "graphs":  # fixed shapes as compiled on a GPU: every pass reads the whole cache, masked
        step, bucket = GraphedCall(network.forward), max_len
        if model_device(model).type != "cuda" and not step.dry_run:
            raise ValueError("the fast path's 'graphs' mode records CUDA graphs and needs the model on a CUDA "
                             "device: use 'static' or 'compiled' here, or set SPECLAB_GRAPHS_DRY_RUN=1 to dry-run "
                             "its bookkeeping on a CPU")
    path = FastPath(network, step, mode, bucket)
    use_fast_path(model, path)
    return path


def compile_for_fast_path(fn: Callable, **options) -> Callable:
    """torch.compile(fn, dynamic=False, **options), each call run under the fast path's dynamo settings:
    one graph per width, bucket and output kind, for the target and the draft alike (one code object),
    so up to COMPILED_GRAPHS of them where torch keeps 8, and past that an error, never a silent fall
    back to eager. The settings hold during these calls only: the process's dynamo config is left alone."""
    compiled = torch.compile(fn, dynamic=False, **options)

    @wraps(fn)
    def call(*args, **kwargs):
        limit = max(torch._dynamo.config.recompile_limit, COMPILED_GRAPHS)
        with torch._dynamo.config.patch(recompile_limit=limit, fail_on_recompile_limit_hit=True):
            return compiled(*args, **kwargs)
    return call


def disable_fast_path(model: torch.nn.Module) -> None:
    """Back to the eager path (transformers' model and DynamicCache)."""
    use_fast_path(model, None)


def fast_path_of(model: torch.nn.Module) -> FastPath | None:
    """The fast path `model` runs on, None on the eager path."""
    return getattr(model, FAST_PATH_ATTRIBUTE, None)


def use_fast_path(model: torch.nn.Module, path: FastPath | None) -> None:
    """Run `model` on `path`, a fast path built for it earlier by enable_fast_path (None: the eager path),
    without rebuilding or recompiling anything: how a drafter whose network is its own (layer skipping's
    view of the target) follows the target's path from one sequence to the next."""
    if path is None:
        model.__dict__.pop(FAST_PATH_ATTRIBUTE, None)
    else:
        setattr(model, FAST_PATH_ATTRIBUTE, path)


@contextmanager
def fast_paths(paths: Mapping[torch.nn.Module, FastPath]) -> Iterator[None]:
    """Inside the block the models of `paths` run on those fast paths (built once by enable_fast_path and
    kept): how the bench runs every method on both paths in one process without rebuilding anything."""
    before = {model: fast_path_of(model) for model in paths}
    for model, path in paths.items():
        use_fast_path(model, path)
    try:
        yield
    finally:
        for model, path in before.items():
            use_fast_path(model, path)


def runner_for(model: torch.nn.Module, who: str = "model") -> Runner:
    """The runner `model` is set up for: StaticRunner on the fast path, ModelRunner otherwise."""
    path = fast_path_of(model)
    return ModelRunner(model, who) if path is None else StaticRunner(model, path, who)


@dataclass
class Pass:
    """One sequence's share of a batched pass: its cache row, its tokens (1-D), their positions and which
    of the pass's own tokens each one sees (n, n) bool; every token sees the row's whole cached prefix.
    positions and sees_own None: a causal chain (built in bulk, without a matrix per sequence)."""

    row: int
    ids: torch.Tensor
    positions: torch.Tensor | None = None
    sees_own: torch.Tensor | None = None

    @property
    def width(self) -> int:
        return int(self.ids.shape[0])


class StaticRunner(Runner):
    """The Runner on the fast path: tokens are written to the static cache by position, a
    pass's mask says which slots each row sees, and rolling back sets a length. A verify pass narrower
    than a width measured to cost less (FastPath.set_width_costs) is padded up to it: no real row sees the
    padding rows, their outputs are dropped, and their slots lie past the length.

    Batched (chapter 11): the cache holds `max_batch` sequences, one row each with its own length
    (`lengths`), and `run_rows` feeds several sequences' tokens in one pass, each padded to the widest. The
    single-sequence methods (forward, verify_pass, keep_path, rollback, length) act on `row`, 0 unless given."""

    def __init__(self, model: torch.nn.Module, path: FastPath, who: str = "model"):
        self.model, self.path, self.who = model, path, who
        self.device = model_device(model)
        self.lengths = [0] * path.network.max_batch

    def reset(self) -> None:
        self.lengths = [0] * self.path.network.max_batch

    def check_rows(self, rows: Sequence[int]) -> None:
        limit = self.path.network.max_batch
        if len(set(rows)) != len(rows) or any(not 0 <= r < limit for r in rows):
            raise ValueError(f"the {self.who}'s static cache holds {limit} sequences (rows 0..{limit - 1}); got rows "
                             f"{list(rows)}: enable the fast path with max_batch at least the batch size "
                             "(enable_fast_path(model, max_batch=...))")

    def run_rows(self, passes: Sequence[Pass], feature_layers: Sequence[int] = (), last_only: bool = False,
                 width: int | None = None) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """One pass of the network over several sequences: each Pass's tokens go to slots length ..
        length + n - 1 of its row. Returns, per Pass, (logits (n, V), or (1, V) with last_only, and its
        features (n, F) or None). Every sequence is padded to `width` (default: the widest); on the compiled
        path the batch is padded with sequences in the scratch row up to one of COMPILED_BATCHES."""
        network = self.path.network
        rows = [p.row for p in passes]
        self.check_rows(rows)
        widths = [p.width for p in passes]
        w = max(widths) if width is None else width
        starts = [self.lengths[r] for r in rows]
        if max(starts) + w > network.max_len:  # no room at the cache's end to pad: the pass runs unpadded
            w = max(widths)
        end = max(starts) + w
        if end > network.max_len:
            raise ValueError(f"the {self.who}'s static cache holds {network.max_len} positions and this pass needs "
                             f"{end}: enable the fast path with a larger max_len (enable_fast_path(model, "
                             "max_len=...)), or ask for fewer tokens")
        read = read_end(end, self.path.bucket, network.max_len)
        batch = len(passes)
        narrow = w <= COMPILED_MAX_WIDTH  # a prompt's prefill is wider than any verify pass
        graphs = self.path.compiled and narrow
        padded = graph_batch(batch, network.max_batch) if graphs else batch
        start = torch.tensor(starts + [0] * (padded - batch), device=self.device)
        ids = torch.zeros(padded, w, dtype=torch.long, device=self.device)
        # a chain's positions and slots both run on from the row's length, and each token sees the slots
        # up to its own: causal. Padding tokens follow the same rule; no real token sees them.
        steps = torch.arange(w, device=self.device)
        slots = start[:, None] + steps
        positions = slots.clone()
        sees = torch.arange(read, device=self.device)[None, None, :] <= slots[:, :, None]
        for b, p in enumerate(passes):
            ids[b, :p.width] = p.ids
            if p.positions is not None:  # a tree or a side branch: its own positions and visibility
                positions[b, :p.width] = p.positions
                if w > p.width:
                    positions[b, p.width:] = p.positions[-1] + torch.arange(1, w - p.width + 1, device=self.device)
                own = torch.eye(w, dtype=torch.bool, device=self.device)
                own[:p.width, :p.width] = p.sees_own
                sees[b, :, starts[b]:starts[b] + w] = own
        scratch = padded > batch
        if scratch:  # the padding sequences write to the scratch row and see only their own tokens
            sees[batch:] = torch.zeros(w, read, dtype=torch.bool, device=self.device)
            sees[batch:, :, :w] = torch.eye(w, dtype=torch.bool, device=self.device)
        order = None if rows == list(range(batch)) and not scratch else \
            torch.tensor(rows + [network.scratch_row] * (padded - batch), device=self.device)
        last = torch.tensor([n - 1 for n in widths] + [w - 1] * (padded - batch), device=self.device) \
            if last_only and (batch > 1 or order is not None) else None
        # torch.compile's CUDA graphs overwrite their outputs at the next replay (speclab.graphs' are copied)
        recorded = graphs and self.device.type == "cuda" and self.path.mode == "compiled"
        if recorded:  # a new step of those graphs
            torch.compiler.cudagraph_mark_step_begin()
        # a prompt's prefill (wider than any verify pass) runs uncompiled: one graph per prompt length would
        # cost a compilation per prompt
        step = self.path.step if narrow else network.forward
        single = batch == 1 and order is None
        with torch.no_grad():
            if single:  # one sequence in row 0: the 1-D call, the single-sequence graphs
                logits, features = step(ids[0], slots[0], positions[0], sees[0], read, tuple(feature_layers),
                                        last_only)
                logits, features = logits[None], (features[None] if features is not None else None)
            else:
                logits, features = step(ids, slots, positions, sees, read, tuple(feature_layers), last_only,
                                        order, last)
        if recorded:  # so the caller's tensors outlive the next replay
            logits, features = logits.clone(), (features.clone() if features is not None else None)
        out = []
        for b, (row, n) in enumerate(zip(rows, widths)):
            self.lengths[row] += n
            keep = slice(None) if last_only else slice(0, n)
            out.append((logits[b, keep], features[b, :n] if features is not None else None))
        return out

    def forward_rows(self, rows: Sequence[int], ids: Sequence[torch.Tensor], last_only: bool = False
                     ) -> list[torch.Tensor]:
        """`forward` for several sequences in one pass: logits per sequence."""
        return [logits for logits, _ in self.run_rows([Pass(r, t) for r, t in zip(rows, ids)], last_only=last_only)]

    def forward(self, ids: torch.Tensor, last_only: bool = False, row: int = 0) -> torch.Tensor:
        return self.run_rows([Pass(row, ids)], last_only=last_only)[0][0]

    def verify_rows(self, rows: Sequence[int], ids: Sequence[torch.Tensor],
                    parents: Sequence[Sequence[int] | None] | None = None, feature_layers: Sequence[int] = (),
                    sides: Sequence | None = None) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """verify_pass for several sequences in one pass (each its own tree or chain and side branch),
        padded to the width the widest one runs at."""
        passes = []
        for i, (row, tokens) in enumerate(zip(rows, ids)):
            tree, side = (parents[i] if parents else None), (sides[i] if sides else None)
            p = Pass(row, tokens)
            if tree is not None or side is not None:
                n, cached = len(tokens), self.lengths[row]
                tree = list(tree) if tree is not None else chain_parents(n - 1 - len(side))
                p.sees_own = pass_visibility(tree, side.sees if side is not None else None).to(self.device)
                p.positions = tree_position_ids(tree, cached, self.device,
                                                side.depths if side is not None else ())[0]
            passes.append(p)
        widest = max(p.width for p in passes)
        return self.run_rows(passes, feature_layers, width=self.path.verify_width(widest))

    def verify_pass(self, ids: torch.Tensor, parents: Sequence[int] | None = None,
                    feature_layers: Sequence[int] = (), side: SideBranch | None = None, row: int = 0
                    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """ModelRunner.verify_pass on the static cache (same rows, masks and positions)."""
        return self.verify_rows([row], [ids], [parents], feature_layers, [side])[0]

    def move_rows(self, sources: Sequence[int], start: int, row: int = 0) -> None:
        self.path.network.move_rows(sources, start, row)

    def rollback(self, length: int, row: int = 0) -> None:
        """Forget every cached position from `length` on: a length, nothing is copied."""
        self.lengths[row] = min(self.lengths[row], length)
