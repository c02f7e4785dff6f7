"""What every trainer of a drafter for a frozen target starts from (Medusa heads, EAGLE heads and MTP
modules, exit adapters, a shared-embedding draft): the device, the deadline, the target loaded in float32
with gradients off, and the target's cached features over the rows of the trainer's preset."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PreTrainedModel

from speclab.devices import pick_device
from speclab.models import load_model
from speclab.train.data import cached_features
from speclab.train.loop import deadline_after
from speclab.train.pair import rows_preset


@dataclass
class FrozenStart:
    device: torch.device
    deadline: float | None     # time.time() after which the run checkpoints and stops (None: no limit)
    target: PreTrainedModel    # float32, requires_grad False
    features: dict             # cached_features: rows, hidden states, the target's greedy next tokens


def frozen_start(target_dir: str | Path, out: Path, preset: str, m, device: str | None, seed: int,
                 stop_after_minutes: float | None) -> FrozenStart:
    """The shared start of a trainer run into `out` with preset `m` (named `preset`): features are
    computed once per `out` and read back by every later run there (cached_features)."""
    out.mkdir(parents=True, exist_ok=True)
    dev = pick_device(device)
    deadline = deadline_after(stop_after_minutes)
    target = load_model(target_dir, dev, torch.float32).requires_grad_(False)
    features = cached_features(target, target_dir, out, rows_preset(preset, m), m, dev, seed, deadline)
    return FrozenStart(dev, deadline, target, features)
