"""Measurements behind chapters 1, 4 and 5: forward time against positions, decode cost, the cost
ratio c, and memory bandwidth achieved against what the device can stream."""
from __future__ import annotations

import statistics

import torch

from speclab.devices import timer
from speclab.runner import ModelRunner, model_device


def parameter_bytes(model: torch.nn.Module) -> int:
    """Bytes of weights a decode step must read (tied embeddings counted once)."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total


def forward_ms(model: torch.nn.Module, positions: int, context: int = 128, repeats: int = 10, seed: int = 0) -> float:
    """Median time (ms) of one cached forward pass over `positions` new tokens after `context`
    cached ones: the cost of verifying positions - 1 drafts."""
    device = model_device(model)
    vocab = model.get_output_embeddings().weight.shape[0]
    g = torch.Generator().manual_seed(seed)
    prefix = torch.randint(0, vocab, (context,), generator=g).to(device)
    new = torch.randint(0, vocab, (positions,), generator=g).to(device)
    runner = ModelRunner(model)
    runner.forward(prefix, last_only=True)
    times = []
    for i in range(repeats + 2):
        with timer(device) as t:
            runner.forward(new)
        runner.rollback(context)
        if i >= 2:  # the first calls warm up kernels and allocators
            times.append(t["seconds"] * 1000)
    return statistics.median(times)


def decode_ms_per_token(model: torch.nn.Module, context: int = 128, repeats: int = 20) -> float:
    """Median time (ms) of one single-token decode step: the unit of the speedup model's cost."""
    return forward_ms(model, 1, context, repeats)


def cost_ratio(target: torch.nn.Module, draft: torch.nn.Module, context: int = 128, repeats: int = 20) -> float:
    """c = draft step time / target step time, both measured here, now."""
    return decode_ms_per_token(draft, context, repeats) / decode_ms_per_token(target, context, repeats)


def copy_bandwidth_gbs(device: torch.device | str, megabytes: int = 256, repeats: int = 5) -> float:
    """Achievable memory bandwidth (GB/s) measured by copying a large buffer: a copy reads and writes
    each byte once. A practical peak to compare a decode step's bandwidth against."""
    device = torch.device(device)
    n = megabytes * 2**20 // 4
    src = torch.ones(n, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(repeats):
        with timer(device) as t:
            dst.copy_(src)
        best = min(best, t["seconds"])
    return 2 * n * 4 / best / 1e9


def decode_bandwidth_gbs(model: torch.nn.Module, ms_per_step: float) -> float:
    """Weight bytes read per decode step divided by the step's time (KV-cache reads, small at short
    contexts, are left out, so this is a lower bound on the bandwidth used)."""
    return parameter_bytes(model) / (ms_per_step / 1000) / 1e9
