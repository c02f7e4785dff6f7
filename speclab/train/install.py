"""Copying what a trainer wrote for a frozen target into the package, beside the bundled target, where
load_drafter finds it: one copy for every trained drafter's folder (Medusa heads, EAGLE heads, MTP
modules, exit adapters). The bundled pair itself is installed by speclab.train.pair.install_pair.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from speclab.models import BUNDLED_DIR


def install(out: Path, folder: str, dest: Path | None = None) -> Path:
    """Copy a trained drafter's folder (out/<folder>: its weights, record and chosen tree) into the package
    beside the bundled target (or into dest/<folder>). `folder`: the method's Method.bundled."""
    target = (dest or BUNDLED_DIR) / folder
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(out / folder, target)
    return target
