"""What every trained drafter (Medusa heads, an EAGLE head, an MTP module, exit adapters) does with its
weights: record which target it was trained for, refuse another target with a clear error, and keep
its weights on disk in the draft's precision.

A head trained for one model and loaded for another drafts nonsense without failing: the output stays
correct (verification sees to that) and only the acceptance collapses. So each head stores a
fingerprint of its target (widths, depth, and a checksum of the lm_head) and checks it when loaded.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn


def fingerprint(target: nn.Module) -> dict:
    """What identifies the target a head was trained on: hidden size, vocabulary, depth, model type and a
    checksum (sum, norm) of its lm_head."""
    weight = target.get_output_embeddings().weight.detach().float()
    config = getattr(target, "config", None)
    layers = getattr(config, "num_hidden_layers", None)
    return {"hidden": int(weight.shape[1]), "vocab": int(weight.shape[0]),
            "lm_head_checksum": [round(float(weight.sum()), 3), round(float(weight.norm()), 3)],
            "layers": None if layers is None else int(layers), "model_type": getattr(config, "model_type", None)}


def checksums_close(a: Sequence[float], b: Sequence[float]) -> bool:
    """Checksums (sum, norm) of one lm_head in two precisions agree within 1% of its norm (bf16 rounding
    moves the sum by far less); another trained model's differ by much more."""
    (sum_a, norm_a), (sum_b, norm_b) = a, b
    scale = 1e-2 * max(norm_a, norm_b, 1e-6)
    return abs(norm_a - norm_b) <= scale and abs(sum_a - sum_b) <= scale


def check_fits(trained_for: dict | None, target: nn.Module, what: str, how: str,
               keys: Sequence[str] = ("hidden", "vocab")) -> None:
    """A ValueError naming `what` (e.g. "these Medusa heads were") and `how` to get fitting ones, unless the
    fingerprint `trained_for` matches `target` on `keys` (those it recorded) and on the lm_head checksum."""
    mine, theirs = trained_for or {}, fingerprint(target)
    for key in keys:
        if mine.get(key) is not None and mine[key] != theirs[key]:
            raise ValueError(f"{what} trained for a target with {key} {mine[key]!r}; this "
                             f"{type(target).__name__} has {theirs[key]!r}; {how}")
    if mine.get("lm_head_checksum") is not None and not checksums_close(mine["lm_head_checksum"],
                                                                       theirs["lm_head_checksum"]):
        raise ValueError(f"{what} trained for another target of the same shape (lm_head checksums differ: "
                         f"{mine['lm_head_checksum']} vs {theirs['lm_head_checksum']}); {how}")


TARGET_FILE = "target_fingerprint.json"  # beside a draft model's weights, which have no config of speclab's


def record_target(directory: str | Path, target: nn.Module) -> Path:
    """Write the target's fingerprint beside a draft model saved in `directory` (a save_pretrained folder,
    whose config is transformers'): how load_drafter finds the draft trained for a target."""
    path = Path(directory) / TARGET_FILE
    about = "the fingerprint (speclab.artifacts) of the target this draft was distilled from"
    path.write_text(json.dumps({"about": about, "target_fingerprint": fingerprint(target)}, indent=1) + "\n")
    return path


def zero_linear(width: int) -> nn.Linear:
    """A width x width linear layer with W and b zero: a residual branch h + f(linear(h)) built on it is
    the identity (for f(0) = 0) until training moves it."""
    linear = nn.Linear(width, width)
    nn.init.zeros_(linear.weight)
    nn.init.zeros_(linear.bias)
    return linear


def save_weights(directory: str | Path, config_file: str, config: dict, weights_file: str,
                 state: dict[str, torch.Tensor]) -> Path:
    """config as JSON and the weights in float16 (safetensors) into `directory`: a head only proposes, so
    its stored precision can change acceptance, never the output; half the bytes to ship."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / config_file).write_text(json.dumps(config, indent=1))
    # floating-point weights to float16; integer and bool buffers (EAGLE-3's d2t, t2d) as they are
    save_file({k: (v.to(torch.float16) if v.is_floating_point() else v).detach().contiguous()
               for k, v in state.items()}, str(directory / weights_file))
    return directory


def load_weights(directory: str | Path, config_file: str, weights_file: str, missing: str
                 ) -> tuple[dict, dict[str, torch.Tensor]]:
    """(config, weights) written by save_weights, or a FileNotFoundError saying `missing` (what is not
    there and how to train it) when the directory holds none."""
    directory = Path(directory)
    if not (directory / config_file).exists():
        raise FileNotFoundError(f"{missing} ({directory / config_file} missing)")
    return json.loads((directory / config_file).read_text()), load_file(str(directory / weights_file))
