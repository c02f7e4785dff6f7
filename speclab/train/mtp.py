"""DeepSeek-V3-style MTP modules (speclab.methods.mtp) for a frozen target, trained after the fact.

An MTP module is a feature head reading the last layer alone, so it trains with EAGLE-3's trainer
(speclab.train.eagle.train_feature_head) one step deep: the cross-entropy against the target's own
distribution of the token two ahead. Its record's accuracy by draft position measures what chaining
it costs.

    python -m speclab train mtp --target DIR --out runs/eagle
"""
from __future__ import annotations

from pathlib import Path

from speclab.methods import REGISTRY
from speclab.methods.mtp import NAME, MtpModule
from speclab.train.data import choose_preset
from speclab.train.eagle import EAGLE_PRESETS, train_feature_head

METHOD = REGISTRY[NAME]  # the method's name, its folder beside the bundled target, its train command


def train_mtp(target_dir: str | Path, out: Path, preset: str = "stdlib", device: str | None = None, seed: int = 0,
              stop_after_minutes: float | None = None, stop_after_steps: int | None = None, **overrides) -> dict:
    """An MTP module for a frozen Llama-family target, on the target's last features over the rows EAGLE
    heads train on (EAGLE_PRESETS: mtp_steps steps unless `steps` is given). Resumable. Writes out/mtp/
    (module, config and record.json, whose "version" is "mtp")."""
    m = choose_preset(EAGLE_PRESETS, preset, overrides)
    if overrides.get("steps") is None:
        m.steps = m.mtp_steps
    m.ttt_steps = 1  # DeepSeek-V3 trains its module one step deep
    return train_feature_head(target_dir, out, m, preset, METHOD.bundled, METHOD.name,
                              lambda target, rows: MtpModule.for_target(target),
                              device=device, seed=seed, stop_after_minutes=stop_after_minutes,
                              stop_after_steps=stop_after_steps)
