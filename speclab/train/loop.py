"""The one resumable training loop that every trainer runs: the pair's stages, Medusa heads, EAGLE heads,
MTP modules and exit adapters.

A run keeps all its state in one checkpoint file: the trained module's weights (under the trainer's
key: "model", "heads", "head", ...), the optimizer's state, the step reached and the run's log. Run
again, it loads that file and goes on from that step. Nothing more needs saving for a resumed run to
end with the same weights as an uninterrupted one, because every trainer draws a step's batch from a
generator seeded by (seed, step) and the learning rate is a function of the step alone: neither
depends on where a run stopped.
"""
from __future__ import annotations

import math
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils._triton import has_triton
from tqdm.auto import tqdm

# What a trainer's step function returns: the loss to backpropagate, and what to append to the log's
# "train" curve after the step number (None: the run keeps no per-step curve).
StepResult = tuple[torch.Tensor, list | None]
# What an evaluation returns: the entry appended to the log's "evals", and a line for the progress bar.
EvalResult = tuple[dict, str]


def lr_at(step: int, p, total: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak. `p` is any preset with lr and warmup."""
    if step < p.warmup:
        return p.lr * (step + 1) / p.warmup
    progress = (step - p.warmup) / max(1, total - p.warmup)
    return p.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def deadline_after(minutes: float | None) -> float | None:
    """The wall-clock time (time.time()) a run given `minutes` stops at; None: no limit."""
    return time.time() + 60 * minutes if minutes else None


def minutes_left(deadline: float | None) -> float | None:
    """What is left of `deadline` (deadline_after) in minutes, for a run that starts under it: a command that
    runs several trainers in turn gives each what the earlier ones left. At least a moment, so that a run
    started past the deadline stops at once rather than reading 0 as no limit; None: no limit."""
    return None if deadline is None else max((deadline - time.time()) / 60, 1e-3)


def has_bf16_units(device: torch.device) -> bool:
    """Whether `device` multiplies bfloat16 natively: a CPU with AVX512-BF16 or AMX, a GPU from Ampere on."""
    if device.type == "cpu":
        return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    return device.type == "cuda" and torch.cuda.is_bf16_supported(including_emulation=False)


def step_precision(bf16: bool | None, device: torch.device) -> torch.autocast:
    """The context a training step's forward runs in: bfloat16 autocast (the weights and AdamW's state stay
    float32; losses and softmaxes autocast to float32), or float32 throughout. bf16 None: bfloat16 where the
    device has bf16 units (about 2x a step on a CPU with them), else float32; True where it has none is refused
    (emulated, it would be slower). The context's fast_dtype and enabled say which (the trainers' records)."""
    native = has_bf16_units(device)
    if bf16 and not native:
        raise ValueError(f"bf16 training on this {device.type} would be emulated (no bf16 units: AVX512-BF16 or AMX "
                         "on a CPU) and slower than float32: train with the preset's bf16=False, or None to decide "
                         "by device")
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=native if bf16 is None else bf16)


def loss_function(loss: Callable, compiled: bool, device: torch.device) -> Callable:
    """`loss` itself, or with `compiled` torch.compile's fusion of it: a few passes over the logits where
    eager PyTorch makes one per operation, the same arithmetic rounded in another order. For a loss over a
    vocabulary, such as EAGLE-3's soft cross-entropy over SmolLM2's 8k draft tokens, whose softmaxes are
    most of a head step (a step 1.6x faster than eager on a 2-core Xeon). It needs a C++ compiler on a CPU and Triton on
    CUDA; where they are missing, and elsewhere than a CPU or CUDA, `loss` itself (said aloud)."""
    if not compiled:
        return loss
    if device.type == "cpu":
        missing = None if any(shutil.which(c) for c in (os.environ.get("CXX", "g++"), "g++", "clang++")) \
            else "no C++ compiler (g++, clang++ or $CXX)"
    elif device.type == "cuda":
        missing = None if has_triton() else "no Triton"
    else:
        missing = f"no compiled losses on {device.type}"
    if missing:
        print(f"note: {missing} for torch.compile: {loss.__name__} runs eagerly")
        return loss
    return torch.compile(loss, dynamic=False)


def precision_name(precision: torch.autocast) -> str:
    """What a record says of step_precision's context."""
    return "bfloat16 autocast" if precision._enabled else "float32"


def stopped(name: str, reached: str) -> SystemExit:
    """The exit of a run stopped early (deadline, Ctrl-C): where it got to and how to go on."""
    return SystemExit(f"{name}: stopped at {reached}; run the same command again to resume.")


def save_whole(obj, path: Path) -> None:
    """torch.save to a sibling file, then rename it over `path`: a run killed mid-write leaves the last
    whole file, never a torn one that cannot be loaded (a torn chat stream once cost a batch of answers)."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    torch.save(obj, partial)
    os.replace(partial, path)


def load_checkpoint(ckpt_file: Path, key: str, module: torch.nn.Module, opt: torch.optim.Optimizer,
                    device: torch.device, check: Callable[[dict], None] | None = None) -> tuple[int, dict] | None:
    """Load a run's checkpoint into `module` and `opt`; returns (step, log), or None when there is none yet.
    `check` sees the saved log first, to refuse a checkpoint trained on other data."""
    if not ckpt_file.exists():
        return None
    state = torch.load(ckpt_file, map_location=device)
    if check is not None:
        check(state["log"])
    module.load_state_dict(state[key])
    opt.load_state_dict(state["opt"])
    return state["step"], state["log"]


def time_to_stop(deadline: float | None, stop_after_steps: int | None, taken: int) -> bool:
    """Whether a run stops before its next step: past its deadline, or having taken the steps it was given."""
    past_deadline = deadline is not None and time.time() > deadline
    return past_deadline or (stop_after_steps is not None and taken >= stop_after_steps)


def optimizer_step(module: torch.nn.Module, opt: torch.optim.Optimizer, loss: torch.Tensor,
                   clip: float | None) -> None:
    """Backpropagate `loss`, clip the gradient norm (when `clip` is given) and step the optimizer."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if clip is not None:
        torch.nn.utils.clip_grad_norm_(module.parameters(), clip)
    opt.step()


def train_loop(name: str, module: torch.nn.Module, opt: torch.optim.Optimizer, steps: int,
               step_fn: Callable[[int], StepResult], *, ckpt_file: Path, key: str, log: dict, schedule,
               device: torch.device, evaluate: Callable[[int, torch.Tensor | None], EvalResult] | None = None,
               eval_every: int = 0, evaluate_first: bool = False, clip: float | None = None,
               deadline: float | None = None, stop_after_steps: int | None = None, save_every_s: float = 120,
               check_resume: Callable[[dict], None] | None = None) -> dict:
    """Train `module` to step `steps`, resuming from `ckpt_file`, and return the run's log.

    step_fn(step) computes a batch's loss (the loop sets the learning rate, lr_at(step, schedule,
    steps), before it, and runs backward, the optional gradient-norm clip and the optimizer step after
    it). evaluate(step, last loss) runs every `eval_every` steps and after the last one (and at step 0
    with `evaluate_first`, for the curve's starting point). `log` is the fresh run's log; a resumed run
    continues the saved one. The checkpoint is written every `save_every_s` seconds and when the run
    ends; a run that ends before `steps` (the deadline, `stop_after_steps` steps taken by this run, or
    Ctrl-C) raises SystemExit saying how to resume."""
    step = 0
    resumed = load_checkpoint(ckpt_file, key, module, opt, device, check_resume)
    if resumed is not None:
        step, log = resumed

    def save() -> None:
        save_whole({key: module.state_dict(), "opt": opt.state_dict(), "step": step, "log": log}, ckpt_file)

    if evaluate is not None and evaluate_first and not log["evals"]:
        log["evals"].append(evaluate(step, None)[0])
    module.train()
    bar = tqdm(total=steps, initial=step, desc=name, mininterval=5)
    started = last_save = time.perf_counter()
    first, interrupted = step, False
    try:
        while step < steps:
            if time_to_stop(deadline, stop_after_steps, step - first):
                interrupted = True
                break
            for group in opt.param_groups:
                group["lr"] = lr_at(step, schedule, steps)
            loss, entry = step_fn(step)
            optimizer_step(module, opt, loss, clip)
            step += 1
            bar.update(1)
            if entry is not None:
                log.setdefault("train", []).append([step, *entry])
            if evaluate is not None and ((eval_every and step % eval_every == 0) or step == steps):
                evaluation, line = evaluate(step, loss)
                log["evals"].append(evaluation)
                bar.write(f"{name} step {step}: {line}")
            if time.perf_counter() - last_save > save_every_s:  # a crash loses minutes, not the run
                log["seconds"] += time.perf_counter() - started
                started = last_save = time.perf_counter()
                save()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        bar.close()
    log["seconds"] += time.perf_counter() - started
    save()
    if interrupted or step < steps:
        raise stopped(name, f"step {step}/{steps}")
    return log
