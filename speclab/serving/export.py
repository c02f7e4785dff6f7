"""`python -m speclab export METHOD --format vllm|sglang --out DIR`: a method's trained weights for a pair's
target, written in the layout the engine loads (speclab.methods.checkpoints), with `serving.json`: the
target's directory, the method, and the engine settings that serve them (speclab.serving.settings).

    draft_model   the draft as a plain transformers directory (config, weights, tokenizer)
    eagle, eagle3 the head in the engine's EAGLE layout
    medusa        the heads in vLLM's Medusa layout (SGLang has none)
    ngram         no weights: serving.json's settings are everything the engine needs
    mtp           refused: engines read MTP layers from inside a DeepSeek-, GLM- or Qwen-style target
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import PreTrainedModel

from speclab.artifacts import fingerprint
from speclab.methods import checkpoints, load_drafter, method
from speclab.models import load_pair
from speclab.serving.settings import Options, engine_settings

SERVING_FILE = "serving.json"


def target_directory(target: PreTrainedModel) -> str:
    """The directory the target was loaded from (where an engine loads it too)."""
    path = getattr(target.config, "_name_or_path", "") or getattr(target, "name_or_path", "")
    if not path or not (Path(path) / "config.json").is_file():
        raise ValueError("this target was not loaded from a directory; save it with save_pretrained first, "
                         "so an engine can load the same weights")
    return str(Path(path).resolve())


def export(method_name: str, engine: str, out: str | Path, pair: str | None = None,
           weights: str | Path | None = None, k: int = 3) -> dict:
    """Write `method_name`'s weights for `pair`'s target (None: the bundled pair; weights: a directory of
    the method's trained weights instead of the shipped ones) in `engine`'s layout to `out`, with
    serving.json (returned): the target's directory and the engine settings at K = k."""
    checkpoints.check_engine(engine)
    m = method(method_name)
    if m.export_check is not None:
        m.export_check(engine)  # EAGLE-1's for vLLM: a vLLM that keeps the bias folded into its embeddings
    out = Path(out)
    loaded = load_pair(pair, device="cpu", dtype=torch.float32, draft_dtype=torch.float32)
    target = loaded.target
    if m.uses_draft_model():
        draft = loaded.draft if weights is None else load_pair(pair, device="cpu", dtype=torch.float32,
                                                               draft=weights).draft
        _write_draft(draft, loaded.tokenizer, out)
    elif m.weights is not None:
        drafter = load_drafter(m.name, target, **({m.weights: weights} if weights is not None else {}))
        checkpoints.write_head(getattr(drafter, "head", None) or drafter.heads, target, out, engine)
    else:
        out.mkdir(parents=True, exist_ok=True)  # a model-free method: settings only
    path = str(out.resolve()) if m.weights is not None else None
    record = {"engine": engine, "method": m.name, "target": target_directory(target),
              "target_fingerprint": fingerprint(target), "weights": path,
              "settings": engine_settings(m.name, engine, Options(k=k, path=path)).settings}
    (out / SERVING_FILE).write_text(json.dumps(record, indent=2) + "\n")
    return record


def _write_draft(draft: torch.nn.Module | None, tokenizer, out: Path) -> None:
    """A draft model as the engines load one: a plain causal LM directory with its tokenizer."""
    if draft is None:
        raise ValueError("this pair has no draft model yet: train one (python -m speclab train draft --target "
                         "DIR --out DIR) and pass it with --weights")
    if not isinstance(draft, PreTrainedModel) or type(draft).__module__.startswith("speclab"):
        raise ValueError(f"a {type(draft).__name__} reads its target's embeddings and scores a draft vocabulary: "
                         "no engine loads that as a draft model. Export a plain draft (the bundled pair's, or "
                         "one from python -m speclab train draft)")
    draft.float().save_pretrained(out)
    tokenizer.save_pretrained(out)
