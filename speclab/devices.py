"""Where models run, in which precision, and on which machine: one place for every device decision."""
from __future__ import annotations

import platform
import time
from contextlib import contextmanager

import torch
import torch.nn.functional as F

# on a CPU, a 16-bit product of at least this many rows runs in float32 (linear)
CPU_FLOAT32_ROWS = 16


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux), or what platform knows of it."""
    try:
        with open("/proc/cpuinfo") as f:
            return cpu_from_cpuinfo(f.read())
    except (OSError, KeyError):
        return platform.processor() or platform.machine()


def cpu_from_cpuinfo(text: str) -> str:
    """The model name of /proc/cpuinfo's first processor; where a virtual machine hides the model number
    ("AMD EPYC", "Intel(R) Xeon(R) Processor"), its family and model are added, so that records made on
    two generations under one name can be told apart."""
    fields = dict(line.split(":", 1) for line in text.split("\n\n")[0].splitlines() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    name = fields["model name"]  # a KeyError where the file names no model (cpu_name falls back)
    if not any(ch.isdigit() for ch in name) and "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name


def gpu_name(device: str | torch.device) -> str | None:
    """The GPU's name for a record (a CUDA device), None on a CPU: speedups move with the host."""
    device = torch.device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """The requested device, or the best one present: cuda, then mps, then cpu."""
    if device is not None and str(device) != "auto":
        dev = torch.device(device)
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device {device!r} was asked for but CUDA is not available here; use 'cpu' or 'auto'")
        if dev.type == "mps" and not torch.backends.mps.is_available():
            raise ValueError(f"device {device!r} was asked for but MPS is not available here; use 'cpu' or 'auto'")
        return dev
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def default_dtype(device: torch.device, cuda_bf16: bool | None = None) -> torch.dtype:
    """bf16 on GPUs that multiply it natively (fp16 on older ones such as the T4), fp32 on CPU.

    CPU kernels for half precision are slow and less exact, so the CPU keeps fp32. torch's
    is_bf16_supported() also says yes where bf16 is only emulated (a T4), hence including_emulation=False.
    """
    if device.type == "cuda":
        if cuda_bf16 is None:
            cuda_bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
        return torch.bfloat16 if cuda_bf16 else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.float32


def draft_dtype(device: torch.device, target_dtype: torch.dtype) -> torch.dtype:
    """The draft's precision: float16 on a CPU, the target's elsewhere (already 16-bit on GPUs).

    Only the target's distributions decide what is emitted, so the draft's rounding can change how
    often its guesses are accepted, never the output. A CPU decode step streams every weight from
    memory, so a half-precision draft reads half the bytes per step (and the cache refill after each
    target pass is half as large). The target stays in float32 on a CPU: its rounding *is* the output.
    """
    return torch.float16 if device.type == "cpu" else target_dtype


def wide_half_on_cpu(x: torch.Tensor) -> bool:
    """Whether a product over x's rows is a 16-bit one of CPU_FLOAT32_ROWS rows or more on a CPU."""
    return x.device.type == "cpu" and x.dtype in (torch.float16, torch.bfloat16) and \
        x.numel() // max(x.shape[-1], 1) >= CPU_FLOAT32_ROWS


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear, except that a 16-bit product over many rows on a CPU (a draft's prefill, a head catching
    up over the prompt) runs in float32 and is rounded back to x's precision. A CPU without 16-bit
    matrix units runs a half-precision GEMM row by row, so past a few rows (CPU_FLOAT32_ROWS) casting the
    weight once costs less than the 16-bit rows. A draft's decode steps (a row or a few) keep its 16-bit
    weights, which is what makes them cheap to stream. Only acceptance can move with this, never the
    output: it is the draft's precision, not the target's (draft_dtype)."""
    if wide_half_on_cpu(x):
        return F.linear(x.float(), weight.float(), None if bias is None else bias.float()).to(x.dtype)
    return F.linear(x, weight, bias)


def synchronize(device: torch.device | str) -> None:
    """Wait for queued GPU work, so that a timer read afterwards measures it."""
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    elif dev.type == "mps":
        torch.mps.synchronize()


@contextmanager
def timer(device: torch.device | str):
    """Wall time of a block, synchronised with the device at both ends. Yields a dict with 'seconds' (set at
    the end) and 'start' (time.perf_counter() at the start, for times taken inside the block)."""
    result = {"seconds": 0.0}
    synchronize(device)
    start = result["start"] = time.perf_counter()
    try:
        yield result
    finally:
        synchronize(device)
        result["seconds"] = time.perf_counter() - start
