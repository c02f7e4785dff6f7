"""Measurements behind chapters 1, 4 and 5: forward time against positions, decode cost, the cost
ratio c, and memory bandwidth achieved against what the device can stream."""
from __future__ import annotations

import os
import statistics
import sys
from contextlib import contextmanager
from typing import Callable, Iterator

import torch

from speclab.devices import timer
from speclab.runner import fast_path_of, model_device, runner_for
from speclab.trees import tree_from_accuracies, tree_from_choices


def parameter_bytes(model: torch.nn.Module) -> int:
    """Bytes of weights a decode step must read (tied embeddings counted once)."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total


# ---------------------------------------------------------------- the roofline, on paper
def kv_bytes_per_token(config, bytes_per_element: int) -> int:
    """Bytes the KV cache grows by per token over all layers: keys and values of the KV heads only
    (grouped-query attention caches fewer heads than it queries), at config.head_dim when the config
    sets one (Qwen3 does, and it differs from hidden_size / heads)."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return 2 * config.num_hidden_layers * kv_heads * head_dim * bytes_per_element


def matmul_intensity(m: int, k: int, n: int, bytes_per_element: int) -> float:
    """FLOPs per byte moved of an (m x k) @ (k x n) product that reads both inputs and writes the output
    once. m = 1 is a decode step through one weight matrix: about one FLOP per 16-bit byte."""
    return 2 * m * k * n / (bytes_per_element * (m * k + k * n + m * n))


def attainable_tflops(intensity: float, peak_tflops: float, bandwidth_gbs: float) -> float:
    """The roofline: what a kernel of this arithmetic intensity can reach, the lower of the compute peak
    and intensity x memory bandwidth (GB/s x FLOP/byte = GFLOP/s, / 1000 = TFLOP/s)."""
    return min(peak_tflops, intensity * bandwidth_gbs / 1000)


H200_GBS = 4800  # GB/s: the NVIDIA H200's HBM3e bandwidth on its datasheet (the book's nvidia_h200), chapters 1 and 10


def decode_floor_ms(weight_bytes: float, kv_bytes: float, bandwidth_gbs: float) -> float:
    """The bandwidth floor of one decode step: every weight and every cached key and value read once."""
    return (weight_bytes + kv_bytes) / (bandwidth_gbs * 1e9) * 1000


def random_ids(model: torch.nn.Module, *lengths: int, seed: int = 0) -> list[torch.Tensor]:
    """Token ids drawn from `model`'s vocabulary on its device, one tensor per length, from one seeded
    generator (a prefix to cache, then the tokens to time)."""
    vocab = model.get_output_embeddings().weight.shape[0]
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=g).to(model_device(model)) for n in lengths]


# ---------------------------------------------------------------- measured
def pass_ms(model: torch.nn.Module, passes: list[tuple[int, list[int] | None]], context: int = 128,
            repeats: int = 10, seed: int = 0) -> list[float]:
    """Median time (ms) of each of several cached forward passes after `context` cached tokens: a pass
    is (positions, parents), parents None for a chain of new tokens, or the positions - 1 parents of a
    tree pass (with its 4-D mask and positions by depth, as the decode loop runs it).

    The passes are timed interleaved: every repeat runs each pass once, in an order rotated from one
    repeat to the next. A stretch when the machine is slower (another process, a clock change) then
    slows every pass alike, instead of landing on one pass's whole sample and bending the ratios
    between passes, which are what the chapters read."""
    device = model_device(model)
    path = fast_path_of(model)
    if path is not None:  # the static cache holds the prefix and the widest pass, as padded
        context = min(context, path.network.max_len - max(path.verify_width(n) for n, _ in passes))
    prefix, new = random_ids(model, context, max(n for n, _ in passes), seed=seed)
    runner = runner_for(model)
    runner.forward(prefix, last_only=True)
    samples: list[list[float]] = [[] for _ in passes]
    for i in range(repeats + 2):
        for shift in range(len(passes)):
            j = (i + shift) % len(passes)  # rotated, so no pass always runs first or after the same one
            n, parents = passes[j]
            with timer(device) as t:
                runner.verify_pass(new[:n], parents)  # as the loop runs it (the fast path pads it)
            runner.rollback(context)
            if i >= 2:  # the first calls warm up kernels and allocators
                samples[j].append(t["seconds"] * 1000)
    return [statistics.median(s) for s in samples]


def tune_verify_widths(model: torch.nn.Module, max_width: int, context: int = 128,
                       repeats: int = 9) -> dict[int, float]:
    """Measure a chain pass of every width 1..max_width on `model`'s fast path (interleaved, pass_ms) and
    pad each verify pass to the cheapest width at least as wide from now on. Returns ms by width."""
    path = fast_path_of(model)
    if path is None:
        raise ValueError("tune_verify_widths pads the fast path's verify passes: call "
                         "speclab.runner.enable_fast_path(model) first")
    path.pad_to = {}  # measure each width as it is, not padded
    widths = list(range(1, max_width + 1))
    ms = dict(zip(widths, pass_ms(model, [(w, None) for w in widths], context, repeats)))
    path.set_width_costs(ms)
    return ms


def forward_ms(model: torch.nn.Module, positions: int, context: int = 128, repeats: int = 10, seed: int = 0,
               parents: list[int] | None = None) -> float:
    """Median time (ms) of one cached forward pass over `positions` new tokens after `context`
    cached ones: the cost of verifying positions - 1 drafts. With `parents` (positions - 1 of them)
    the pass is a tree pass, with its 4-D mask and positions by depth, as the decode loop runs it."""
    return pass_ms(model, [(positions, parents)], context, repeats, seed)[0]


def forward_ms_by_positions(model: torch.nn.Module, positions: list[int], context: int = 128,
                            repeats: int = 10, seed: int = 0) -> dict[int, float]:
    """forward_ms for several numbers of positions, timed interleaved (see pass_ms), so that the ratio
    of two entries is measured under the same conditions."""
    return dict(zip(positions, pass_ms(model, [(n, None) for n in positions], context, repeats, seed)))


def decode_ms_per_token(model: torch.nn.Module, context: int = 128, repeats: int = 20) -> float:
    """Median time (ms) of one single-token decode step: the unit of the speedup model's cost."""
    return forward_ms(model, 1, context, repeats)


def cost_ratio(target: torch.nn.Module, draft: torch.nn.Module, context: int = 128, repeats: int = 20) -> float:
    """c = draft step time / target step time, both measured here, now."""
    return decode_ms_per_token(draft, context, repeats) / decode_ms_per_token(target, context, repeats)


def draft_step_ms(target: torch.nn.Module, draft: torch.nn.Module, context: int = 128, width: int = 5,
                  repeats: int = 20, seed: int = 0) -> dict[str, float]:
    """A draft step's time (ms, median) two ways, on the paths the models are set up for: "alone", one draft
    step after another (the draft's weights stay in the caches, as when c is measured alone), and "after a
    target pass", each draft step right after a target verify pass of `width` positions, as in the loop,
    where the target's weights have just streamed through the caches and pushed the draft's out."""
    for model in (target, draft):
        path = fast_path_of(model)
        if path is not None:  # the static cache holds the prefix and the widest pass, as padded
            context = min(context, path.network.max_len - max(width, path.verify_width(width)))
    prefix, new = random_ids(target, context, width, seed=seed)
    runners = runner_for(target), runner_for(draft)
    for runner in runners:
        runner.forward(prefix, last_only=True)
    t_run, d_run = runners

    def draft_step(after_target: bool) -> float:
        if after_target:
            t_run.verify_pass(new)
            t_run.rollback(context)
        with timer(model_device(draft)) as t:
            d_run.forward(new[:1], last_only=True)
        d_run.rollback(context)
        return t["seconds"] * 1000

    samples: dict[str, list[float]] = {"alone": [], "after a target pass": []}
    for i in range(repeats + 2):  # interleaved, the first two discarded (warm-up)
        for key in samples:
            ms = draft_step(key != "alone")
            if i >= 2:
                samples[key].append(ms)
    return {key: statistics.median(ms) for key, ms in samples.items()}


def costs_alone(target: torch.nn.Module, draft: torch.nn.Module, context: int, width: int, repeats: int = 5,
                seed: int = 0) -> dict[str, float]:
    """What the decode loop's passes cost with each model timed by itself (ms, medians), at `context` cached
    tokens: a target step, a verify pass of `width` positions, a draft step one after another (its
    weights warm) and a draft step right after a target verify pass (as every round's first draft step
    runs: the target's weights have just pushed the draft's out of the caches). The bench times these
    beside the loop, prompt by prompt, so that the loop's costs and these meet the machine in the same
    state (this host's speed drifts by 10-30% within minutes) and at the same contexts."""
    step, verify = pass_ms(target, [(1, None), (width, None)], context, repeats, seed)
    drafting = draft_step_ms(target, draft, context, width, repeats, seed)
    return {"target step": step, "verify pass": verify, "draft step": drafting["alone"],
            "draft step after a target pass": drafting["after a target pass"]}


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


def gemv_bandwidth_gbs(device: torch.device | str, megabytes: int = 64, repeats: int = 10) -> float:
    """The bandwidth a matrix-vector product reaches here (GB/s): one vector times a float32 matrix of
    `megabytes`, larger than most processors' caches, so every weight comes from memory, as in a decode
    step. Its reciprocal times a model's weight bytes is the step's bandwidth floor (decode_floor_ms). A
    processor whose last-level cache holds the matrix (one Xeon here reports 480 MB) measures that cache
    instead, which is also the floor for a model small enough to stay there (gemv_bandwidth_by_size shows
    which, chapter 10.1)."""
    device = torch.device(device)
    cols = 1024
    # uniform values: the product's time does not depend on them, and rand fills a gigabyte twice as fast
    weights = torch.rand(megabytes * 2**20 // 4 // cols, cols, device=device)
    x = torch.rand(1, cols, device=device)
    samples = []
    for _ in range(repeats + 1):
        with timer(device) as t:
            x @ weights.t()
        samples.append(t["seconds"])
    return weights.numel() * 4 / statistics.median(samples[1:]) / 1e9


GEMV_SIZES_MB = (16, 64, 256, 1024)  # from inside most last-level caches to past every one


def last_level_cache_mb(cpu: str = "/sys/devices/system/cpu/cpu0/cache") -> float | None:
    """The size of this CPU's last-level cache in MB, as Linux reports it (the highest-level cache of
    cpu0; a virtual machine reports what its host exposes), or None where the system does not say."""
    sizes = {}
    for index in sorted(os.listdir(cpu)) if os.path.isdir(cpu) else []:
        try:
            level = int(open(os.path.join(cpu, index, "level")).read())
            size = open(os.path.join(cpu, index, "size")).read().strip()
        except (OSError, ValueError):
            continue
        scale = {"K": 2**-10, "M": 1.0, "G": 2**10}.get(size[-1:].upper())
        if scale is not None and size[:-1].isdigit():
            sizes[level] = int(size[:-1]) * scale
    return sizes[max(sizes)] if sizes else None


def gemv_bandwidth_by_size(device: torch.device | str, sizes_mb: tuple[int, ...] = GEMV_SIZES_MB,
                           repeats: int = 5) -> dict[int, float]:
    """gemv_bandwidth_gbs for matrices of each size (MB -> GB/s). Where the bandwidth drops, the matrix
    stopped fitting in a cache: a model whose weights are smaller than that is read from the cache at every
    decode step (the weights stay there from one step to the next), and its floor is the cache's
    bandwidth; a larger model's floor is the memory's. On a GPU its L2 cache plays that part."""
    return {mb: gemv_bandwidth_gbs(device, mb, repeats) for mb in sizes_mb}


def matmul_gflops(device: torch.device | str, n: int = 2048, repeats: int = 5,
                  dtype: torch.dtype = torch.float32) -> float:
    """The GFLOP/s a product of two n-square matrices of `dtype` reaches here (best of `repeats`): the
    compute roof that gemv_bandwidth_gbs's bandwidth roof meets at the ridge."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        with timer(device) as t:
            a @ b
        best = min(best, t["seconds"])
    return 2 * n ** 3 / best / 1e9


MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::mv", "mkl::_mkl_linear",
              "mkldnn::_linear_pointwise")  # the last two: prepacked linears, when inductor freezes weights


@contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """The process's file descriptor 2 sent to /dev/null for the block: the profiler's C++ side writes a
    start and a stop line there on every run, which would land in a chapter's output."""
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved), os.close(devnull)


def decode_steps(model: torch.nn.Module, context: int = 128, steps: int = 20, seed: int = 0) -> Callable[[], None]:
    """Cache `context` random tokens on the path the model is set up for and return a function that runs
    `steps` one-token decode steps from there, each rolled back after it (as a rejected draft is): what
    step_breakdown and thread_scaling time."""
    path = fast_path_of(model)
    if path is not None:  # the static cache holds the prefix and the step
        context = min(context, path.network.max_len - 1)
    prefix, tokens = random_ids(model, context, steps, seed=seed)
    runner = runner_for(model)
    runner.forward(prefix, last_only=True)

    def decode() -> None:
        for token in tokens:
            runner.forward(token.view(1), last_only=True)
            runner.rollback(context)

    return decode


def step_breakdown(model: torch.nn.Module, context: int = 128, steps: int = 20, seed: int = 0,
                   profiled_runs: int = 3) -> dict[str, float]:
    """Where a one-token decode step's time goes, in ms a step, on the path the model is set up for:
    "total" (timed without the profiler), "matrix products" and "attention" (the self time of those
    operators, from torch.profiler), "generated kernels" (a compiled graph's own code: inductor's fused
    loops, matrix products written as loops included; 0 on an uncompiled path), "other operators" (every
    other operator's self time: norms, rotary, copies) and "framework" (the rest: Python, module calls,
    dispatch, cache bookkeeping between operators). On a CPU each generated kernel reports itself
    (speclab.runner.COMPILED_CPU_OPTIONS), so the Python that calls a compiled graph (its guards, its
    wrappers, allocating the graph's buffers) counts as framework; where kernels do not report themselves
    (a GPU's), the graph's whole call counts as generated. The profiler adds a little to each operator, and
    now and then a lot to one (its own bookkeeping interleaved with the operator's allocations: an eager
    step's cache concatenations ranged 0.9-8.5 ms a step over three profiled runs whose unprofiled step
    was 7.7 ms), so each operator's time is the least of `profiled_runs` profiled runs: a close picture,
    not a measurement to three digits."""
    device = model_device(model)
    decode = decode_steps(model, context, steps, seed)
    decode()  # warm up
    with timer(device) as t:
        decode()
    self_ms: dict[str, float] = {}
    for _ in range(profiled_runs):
        with native_stderr_silenced(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            decode()
        for e in prof.key_averages():
            ms = e.self_cpu_time_total / 1000 / steps
            self_ms[e.key] = min(ms, self_ms.get(e.key, ms))
    matmul = sum(ms for key, ms in self_ms.items() if key in MATMUL_OPS)
    attention = sum(ms for key, ms in self_ms.items() if "scaled_dot_product" in key)
    kernels = sum(ms for key, ms in self_ms.items() if "cpp_fused" in key)  # inductor's C++ kernels, by name
    calls = sum(ms for key, ms in self_ms.items() if key.startswith("## Call CompiledFxGraph"))
    generated = kernels or calls
    operators = sum(ms for key, ms in self_ms.items() if "::" in key)
    total = t["seconds"] * 1000 / steps
    return {"total": total, "matrix products": matmul, "attention": attention, "generated kernels": generated,
            "other operators": operators - matmul - attention,
            "framework": max(0.0, total - operators - generated)}


def compiled_alone_ms(model: torch.nn.Module, context: int = 128, steps: int = 32, seed: int = 0) -> float:
    """ms a token of transformers' model decoding under torch.compile with its own growing DynamicCache and
    no static cache ("compile alone", chapter 10): `steps` one-token steps from `context` cached tokens,
    the cache growing as in real decoding, timed after a first run that compiles (dynamo marks the
    length dynamic at the first new shape). The model's forward is restored afterwards."""
    if fast_path_of(model) is not None:
        raise ValueError("compiled_alone_ms times transformers' own model: disable_fast_path(model) first")
    device = model_device(model)
    prefix, tokens = random_ids(model, context, steps, seed=seed)
    model.forward = torch.compile(model.forward)  # an instance attribute over the class's method
    try:
        def decode() -> None:
            runner = runner_for(model)
            runner.forward(prefix, last_only=True)
            for token in tokens:
                runner.forward(token.view(1), last_only=True)

        decode()  # compiles
        decode()
        with timer(device) as t:
            decode()
        with timer(device) as p:  # the prefill alone, to take out of the total
            runner_for(model).forward(prefix, last_only=True)
    finally:
        del model.forward
    return (t["seconds"] - p["seconds"]) * 1000 / steps


def thread_scaling(model: torch.nn.Module, threads: tuple[int, ...], context: int = 128, steps: int = 20,
                   rounds: int = 5) -> dict[int, dict[str, float]]:
    """A one-token decode step (on the path the model is set up for, as step_breakdown times it) and the
    bandwidth floor at each thread count: {threads: {"step_ms", "gemv_gbs", "floor_ms", "step_over_floor"}},
    medians of `rounds` rounds that each time every count in turn (a slower stretch of the machine then
    slows all alike). The floor is the model's weights at the bandwidth a matrix-vector product over a matrix
    of their size reaches (gemv_bandwidth_gbs): a cache's for a model that fits in one, the memory's for one
    that does not (gemv_bandwidth_by_size). The floor falls with every core that streams weights; the step
    falls only by the part of it that runs in parallel: Python between kernels and the loops a compiled
    graph runs on one thread do not (Amdahl's law), so a step can sit nearer one core's floor than two
    cores' (chapter 10.3). A compiled graph runs at any count without recompiling; torch's count is
    restored afterwards."""
    device, before = model_device(model), torch.get_num_threads()
    decode = decode_steps(model, context, steps)
    weights = parameter_bytes(model)
    megabytes = max(16, round(weights / 2**20))
    samples: dict[int, dict[str, list[float]]] = {n: {"step_ms": [], "gemv_gbs": []} for n in threads}
    try:
        for _ in range(rounds):
            for n in threads:
                torch.set_num_threads(n)
                decode()  # warm: the first steps after a change of threads or of model pay for it
                with timer(device) as t:
                    decode()
                samples[n]["step_ms"].append(t["seconds"] * 1000 / steps)
                samples[n]["gemv_gbs"].append(gemv_bandwidth_gbs(device, megabytes, repeats=5))
    finally:
        torch.set_num_threads(before)
    out = {}
    for n, got in samples.items():
        step, gemv = statistics.median(got["step_ms"]), statistics.median(got["gemv_gbs"])
        floor = decode_floor_ms(weights, 0, gemv)
        out[n] = {"step_ms": step, "gemv_gbs": gemv, "floor_ms": floor, "step_over_floor": step / floor}
    return out


def decode_bandwidth_gbs(model: torch.nn.Module, ms_per_step: float) -> float:
    """Weight bytes read per decode step divided by the step's time (KV-cache reads, small at short
    contexts, are left out, so this is a lower bound on the bandwidth used)."""
    return parameter_bytes(model) / (ms_per_step / 1000) / 1e9


def tree_pass_costs(target: torch.nn.Module, accuracies, budgets=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64),
                    context: int = 128, repeats: int = 10) -> dict[int, float]:
    """Cost of a verify pass over each budget's tree (speclab.trees.tree_from_accuracies) plus the
    pending token, in units of a one-token decode step, measured here and now."""
    costs = {}
    for _ in range(3):  # a fresh process's first passes are many times slower (allocators, kernel set-up)
        forward_ms(target, 1, context, repeats)
    for budget in budgets:
        parents, _ = tree_from_choices(tree_from_accuracies(accuracies, budget))
        # the one-token step is timed interleaved with each tree pass, so a machine that slows for a
        # while slows both sides of the ratio
        unit, tree = pass_ms(target, [(1, None), (len(parents) + 1, parents)], context, repeats)
        costs[budget] = tree / unit
    return costs
