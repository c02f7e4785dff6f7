"""Which shipped weights fit a target: load_drafter's lookup by fingerprint.

Every pair has a folder, speclab/pairs/<pair>/, holding what speclab trained for its target in one layout
(draft/, medusa/, eagle/, eagle3/, mtp/, exit/). Each trained drafter already records its target's
fingerprint in its config (speclab.artifacts: widths, depth, a checksum of the lm_head); a
draft model records it in target_fingerprint.json beside its weights (artifacts.record_target). So the weights for a target are
found by asking every pair folder which target its weights were trained for, not by knowing which pair
the target came from: a chapter switches pairs by the pair's name alone, and a folder added for a new
pair is found without a line changed here.
"""
from __future__ import annotations

import json
from pathlib import Path

from torch import nn

from speclab.artifacts import checksums_close, fingerprint
from speclab.models import BUNDLED_DIR, PAIRS_DIR


def recorded_fingerprint(folder: Path) -> dict | None:
    """The target fingerprint a folder of trained weights records (in any of its JSON files that holds a
    'target_fingerprint'), or None: no such folder, or one that records none."""
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("target_fingerprint"), dict):
            return data["target_fingerprint"]
    return None


def fits(recorded: dict, mark: dict) -> bool:
    """Whether two fingerprints describe the same target: every key both hold agrees (older heads record
    fewer keys), and the lm_head checksums are close, within rounding (artifacts.check_fits' rule, which
    the method's loader applies again)."""
    for key in recorded.keys() & mark.keys():
        a, b = recorded[key], mark[key]
        if a is None or b is None:
            continue
        if key == "lm_head_checksum" and not checksums_close(a, b):
            return False
        if key != "lm_head_checksum" and a != b:
            return False
    return True


def find_shipped(folder_name: str, target: nn.Module | None, pairs_dir: Path | None = None) -> Path | None:
    """<pair>/<folder_name> of `pairs_dir` (default: speclab/pairs) trained for `target`, found by the
    fingerprint it records, or None where no pair ships one (the first pair in name order, should two). target None means the bundled target: its
    folder, if present."""
    if target is None:
        folder = BUNDLED_DIR / folder_name
        return folder if folder.exists() else None
    pairs_dir = pairs_dir or PAIRS_DIR
    if not pairs_dir.is_dir():
        return None
    mark = fingerprint(target)  # once: it sums the lm_head, 28M numbers for SmolLM2
    for pair in sorted(p for p in pairs_dir.iterdir() if p.is_dir()):
        recorded = recorded_fingerprint(pair / folder_name)
        if recorded is not None and fits(recorded, mark):
            return pair / folder_name
    return None


def describe(target: nn.Module) -> str:
    """A target in a few words, for error messages: its class, depth, width and vocabulary."""
    mark = fingerprint(target)
    return f"{type(target).__name__} ({mark['layers']} layers, hidden {mark['hidden']}, vocabulary {mark['vocab']})"


def not_shipped(method: str, weights_option: str, train: str, folder_name: str, target: nn.Module) -> FileNotFoundError:
    """The error for a method whose trained weights no pair ships for `target`: the command that trains
    them (with the target's own directory when it was loaded from one) and how to pass what it writes."""
    where = getattr(target, "name_or_path", "") or "TARGET_DIR"
    return FileNotFoundError(
        f"no {method} weights ship for this target, {describe(target)}: train them with `python -m speclab "
        f"train {train} --target {where} --out runs/{train}`, then pass {weights_option}='runs/{train}/"
        f"{folder_name}' to load_drafter (or that folder to the command line's flag for it). Methods that need "
        "no trained weights work on any target: ngram, lookahead, layer_skip with adapter=False.")


def pair_fingerprint(pair_folder: Path) -> dict | None:
    """The target a pair folder's weights were trained for, as the first of its folders that records one
    says (they all serve one target), or None for a folder with none yet."""
    if not pair_folder.is_dir():
        return None
    for folder in sorted(p for p in pair_folder.iterdir() if p.is_dir()):
        recorded = recorded_fingerprint(folder)
        if recorded is not None:
            return recorded
    return None
