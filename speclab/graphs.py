"""CUDA graphs recorded directly on the fast path's fixed buffers: gpt-fast's "reduce-overhead" idea without
inductor's compile time (chapter 10.7).

A small model's eager GPU step is mostly launch overhead: hundreds of kernels, each launched from Python. A
CUDA graph records a pass's kernels once and replays them with one launch (the kernels' own time remains:
chapter 10.7). Replaying is exact only if every tensor the pass reads or writes sits at the address it had
when it was recorded, which the fast path already arranges: the static cache is allocated once, and a
pass's inputs (ids, slots, positions, the visibility mask) are copied into buffers this module owns before
each replay. Everything else that varies from call to call (the pass's width, padded batch, how far it
reads, which features it returns) is part of the key: one graph per key, recorded the first time it is
met, all in one memory pool.

`GraphedCall(fn)` is that wrapper. On a CPU, SPECLAB_GRAPHS_DRY_RUN=1 (or `dry_run=True`) dry-runs its
bookkeeping: a "replay" calls fn again on the same static buffers and copies its outputs into the static
outputs, so every copy, key and output the decode loop relies on runs without a GPU (.ci/gpu-check).
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

WARMUP_CALLS = 2  # eager calls on a side stream before recording (cuBLAS and SDPA pick their kernels there)


def dry_run_requested() -> bool:
    """Whether SPECLAB_GRAPHS_DRY_RUN asks for the CPU stand-in of CUDA graphs."""
    return os.environ.get("SPECLAB_GRAPHS_DRY_RUN", "") not in ("", "0")


def _key(args: tuple) -> tuple:
    """What a graph is recorded for: each tensor's shape, dtype and device, every other argument's value."""
    return tuple(("tensor", tuple(a.shape), a.dtype, a.device) if isinstance(a, torch.Tensor) else ("value", a)
                 for a in args)


def _copy_out(static: Any, fresh: Any) -> None:
    """Copy a call's outputs (tensors, None, or tuples of them) into the recorded outputs, in place."""
    if isinstance(static, torch.Tensor):
        static.copy_(fresh)
    elif isinstance(static, tuple):
        for s, f in zip(static, fresh):
            _copy_out(s, f)


def _copied(out: Any) -> Any:
    """A copy of a call's outputs (tensors, None, or tuples of them)."""
    if isinstance(out, torch.Tensor):
        return out.clone()
    return tuple(_copied(o) for o in out) if isinstance(out, tuple) else out


class GraphedCall:
    """fn(*args) replayed from a CUDA graph per key (see the module docstring). Tensor arguments are copied
    into the graph's static inputs, and the outputs are copies of the graph's static outputs (a drafter keeps
    a step's logits while the next step replays the same graph). fn must be a pure function of its tensor
    arguments and of buffers that never move (the static cache); it may write those buffers in place."""

    def __init__(self, fn: Callable[..., Any], dry_run: bool | None = None):
        self.fn = fn
        self.dry_run = dry_run_requested() if dry_run is None else dry_run
        self.graphs: dict[tuple, tuple[list, Callable[[], None], Any]] = {}
        self.pool = None  # one memory pool for every graph of this call (they never run at once)

    def __call__(self, *args: Any) -> Any:
        key = _key(args)
        entry = self.graphs.get(key)
        if entry is None:
            entry = self.graphs[key] = self.record(args)
        static_in, replay, static_out = entry
        for s, a in zip(static_in, args):
            if isinstance(s, torch.Tensor):
                s.copy_(a)
        replay()
        return _copied(static_out)

    def record(self, args: tuple) -> tuple[list, Callable[[], None], Any]:
        """The static inputs (copies of args' tensors), a replay function and the static outputs."""
        static_in = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        if self.dry_run:
            static_out = self.fn(*static_in)
            return static_in, lambda: _copy_out(static_out, self.fn(*static_in)), static_out
        if not all(a.device.type == "cuda" for a in static_in if isinstance(a, torch.Tensor)):
            raise ValueError("CUDA graphs record passes on a CUDA device: run the model on 'cuda', use the fast "
                             "path's 'static' or 'compiled' mode, or set SPECLAB_GRAPHS_DRY_RUN=1 to dry-run "
                             "the graphs' bookkeeping on a CPU")
        # the pass writes the cache in place: the warm-up calls write what the replay writes again (same
        # tokens, same slots), so recording changes nothing a later pass reads
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_CALLS):
                self.fn(*static_in)
        torch.cuda.current_stream().wait_stream(side)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            static_out = self.fn(*static_in)
        return static_in, graph.replay, static_out
