"""Copying what a trainer wrote for a frozen target into the package, beside the bundled target, where
load_drafter finds it: one copy for every trained drafter's folder (Medusa heads, EAGLE heads, MTP
modules, exit adapters). The bundled pair itself is installed by speclab.train.pair.install_pair.

A pair folder serves one target, so an install is refused when what it copies was trained for another
target than the one the folder's weights already serve: heads trained for SmolLM2 would otherwise
replace the bundled target's, and every chapter's measurements with them.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from speclab.methods.shipped import fits, pair_fingerprint, recorded_fingerprint
from speclab.models import BUNDLED_DIR


def check_same_target(trained: Path, dest: Path) -> None:
    """A ValueError unless `trained` (a folder of trained weights) was trained for the target the pair
    folder `dest` serves; a folder that records no target, or a pair folder without one yet, passes."""
    incoming, serving = recorded_fingerprint(trained), pair_fingerprint(dest)
    if incoming is not None and serving is not None and not fits(incoming, serving):
        raise ValueError(f"{trained} was trained for another target (hidden {incoming.get('hidden')}, vocabulary "
                         f"{incoming.get('vocab')}) than the one the weights in {dest} serve (hidden "
                         f"{serving.get('hidden')}, vocabulary {serving.get('vocab')}): nothing was copied. "
                         f"Load it from where it is ({trained}), or copy it into that target's pair folder.")


def install(out: Path, folder: str, dest: Path | None = None) -> Path:
    """Copy a trained drafter's folder (out/<folder>: its weights, record and chosen tree) into the package
    beside the bundled target (or into dest/<folder>). `folder`: the method's Method.bundled."""
    dest = dest or BUNDLED_DIR
    check_same_target(out / folder, dest)
    target = dest / folder
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(out / folder, target)
    return target
