"""Layer-skip self-drafting (Elhoushi et al. 2024, LayerSkip; transformers' assistant_early_exit): the
target's first E layers, its final norm and lm_head draft for all of it, with no weights of their own.

A draft step costs about E/L of a target step and agrees with the target as far as layer E's hidden state
already holds the next token. LayerSkip trains the whole model for it; speclab keeps the target frozen and
offers an exit adapter instead, h -> h + W h + b, zero at the start, trained so the exit's distribution
matches the final layer's (a tuned lens, Belrose et al. 2023; `python -m speclab train exit`). The draft
keeps its own KV cache for its E layers, rolled back like a draft model's; LayerSkip shares it with the
verifier and starts verification at layer E + 1, which needs an engine whose verify pass can start
mid-model (speclab calls a model whole).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from torch import nn

from speclab.artifacts import check_fits, fingerprint, load_weights, save_weights, zero_linear
from speclab.methods.draft_model import ModelDrafter
from speclab.models import shallow_config
from speclab.runner import FastPath, enable_fast_path, fast_path_of, use_fast_path
from speclab.methods.engines import Options, by_batch, no
from speclab.methods.flags import Flag, Setting, Sweep

NAME = "layer_skip"  # the method's name in the registry
ADAPTERS_CONFIG, ADAPTERS_FILE = "exit_config.json", "exit_adapters.safetensors"


def check_exit_layer(target: nn.Module, exit_layer: int) -> int:
    """exit_layer as an int in 1..L-1, or a ValueError saying which values the target allows."""
    layers = int(target.config.num_hidden_layers)
    if isinstance(exit_layer, bool) or not isinstance(exit_layer, int) or not 1 <= exit_layer <= layers - 1:
        raise ValueError(f"exit_layer must be an integer from 1 to {layers - 1} (this target has {layers} decoder "
                         f"layers; exiting after all {layers} is the target itself); got {exit_layer!r}")
    return exit_layer


class ExitAdapter(nn.Module):
    """h -> h + W h + b on the hidden state leaving layer E, W and b zero at the start (the identity):
    an affine translator from layer E's representation to the final layer's (a tuned lens)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.linear = zero_linear(hidden)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.linear(h)


def early_exit_model(target: nn.Module, exit_layer: int, adapter: ExitAdapter | None = None) -> nn.Module:
    """A causal LM that is the target's first `exit_layer` layers, then (adapter and) its final norm and
    lm_head. It shares the target's weights (no copy): built on the meta device, its modules then
    replaced by the target's own. Needs a Llama-family target (model.embed_tokens, layers, norm,
    rotary_emb, and lm_head)."""
    check_exit_layer(target, exit_layer)
    base = getattr(target, "model", None)
    if not all(hasattr(base, name) for name in ("embed_tokens", "layers", "norm", "rotary_emb")) \
            or not hasattr(target, "lm_head"):
        raise TypeError(f"layer skipping cuts a Llama-family model (model.embed_tokens, layers, norm, rotary_emb, "
                        f"lm_head) short; {type(target).__name__} is not laid out so: use another drafter")
    with torch.device("meta"):
        view = type(target)(shallow_config(target.config, exit_layer))
    view.model.embed_tokens, view.model.rotary_emb = base.embed_tokens, base.rotary_emb
    view.model.layers = nn.ModuleList(base.layers[:exit_layer])
    view.model.norm = base.norm if adapter is None else nn.Sequential(adapter, base.norm)
    view.lm_head = target.lm_head
    left = [name for name, t in [*view.named_parameters(), *view.named_buffers()] if t.is_meta]
    if left:
        raise TypeError(f"{type(target).__name__} has parts layer skipping does not know how to share ({left[:3]}); "
                        "use another drafter")
    return view.eval()


class LayerSkipDrafter(ModelDrafter):
    """The target's first E layers (and an exit adapter, if given) drafting a chain with their own cache."""

    def __init__(self, target: nn.Module, exit_layer: int, adapter: ExitAdapter | None = None):
        super().__init__(early_exit_model(target, exit_layer, adapter))
        self.target, self.exit_layer = target, exit_layer
        self.name = f"{NAME} E={exit_layer}" + ("+adapter" if adapter is not None else "")
        self.view_paths: dict[tuple, FastPath] = {}  # the view's fast path for each mode and shape, built once

    def follow_target(self) -> None:
        """The view runs on the path its target runs on: on the target's fast path, on a fast path of the
        same mode, length and batch built for the view (once, then kept: a compiled one is not compiled
        twice)."""
        path = fast_path_of(self.target)
        if path is None:
            use_fast_path(self.model, None)
        else:
            shape = (path.mode, path.network.max_len, path.network.max_batch)
            if shape not in self.view_paths:
                self.view_paths[shape] = enable_fast_path(self.model, path.mode, path.network.max_len,
                                                          path.network.max_batch)
            use_fast_path(self.model, self.view_paths[shape])


# ---------------------------------------------------------------- exit adapters on disk: one file, a key per layer
def save_adapters(adapters: dict[int, ExitAdapter], target: nn.Module, directory: str | Path,
                  record: dict | None = None) -> None:
    config = {"target_fingerprint": fingerprint(target), "exit_layers": sorted(adapters)}
    state = {f"{layer}.{k}": v for layer, adapter in adapters.items() for k, v in adapter.state_dict().items()}
    directory = save_weights(directory, ADAPTERS_CONFIG, config, ADAPTERS_FILE, state)
    if record is not None:
        (directory / "record.json").write_text(json.dumps(record, indent=1))


def load_adapter(directory: str | Path, target: nn.Module, exit_layer: int) -> ExitAdapter:
    """The exit adapter for `exit_layer` from a directory written by `train exit`, refused with a clear
    error when it was trained for another target or another layer."""
    how = "python -m speclab train exit --target DIR --out DIR"
    config, weights = load_weights(directory, ADAPTERS_CONFIG, ADAPTERS_FILE,
                                   f"no exit adapters in {directory}; train them with {how}")
    check_fits(config["target_fingerprint"], target, "these exit adapters were", f"train them for this one: {how}",
               keys=("hidden", "vocab", "layers"))
    if exit_layer not in config["exit_layers"]:
        raise ValueError(f"{directory} has exit adapters for layers {config['exit_layers']}, not {exit_layer}; train "
                         f"one: {how} --exit-layers {exit_layer}")
    adapter = ExitAdapter(int(config["target_fingerprint"]["hidden"]))
    adapter.load_state_dict({k.split(".", 1)[1]: v for k, v in weights.items() if k.split(".", 1)[0] == str(exit_layer)})
    return adapter.to(device=target.device, dtype=target.dtype).eval()


def load_layer_skip(target: nn.Module, exit_layer: int, adapter: bool | str | Path | ExitAdapter | None = None,
                    bundled: str | Path | None = None) -> LayerSkipDrafter:
    """The layer-skip drafter exiting after `exit_layer`. adapter: False or None (none: no new weights),
    a directory written by train exit, an adapter, or True: the adapters in `bundled` (the folder
    shipped for this target, found by load_drafter; None where none ships)."""
    check_exit_layer(target, exit_layer)
    if adapter is True:
        if bundled is None:
            raise ValueError("adapter=True loads the exit adapters shipped for this target, and none ship for it: "
                             f"train them (python -m speclab train exit --target {getattr(target, 'name_or_path', '') or 'DIR'} "
                             "--out runs/exit) and pass adapter='runs/exit/exit', or use adapter=False")
        adapter = bundled
    if adapter is False or adapter is None:
        adapter = None
    elif not isinstance(adapter, ExitAdapter):
        adapter = load_adapter(adapter, target, exit_layer)
    return LayerSkipDrafter(target, exit_layer, adapter)


# ---------------------------------------------------------------- engine settings
def engine_settings(engine: str, o: Options) -> dict:
    """Layer skipping's settings as `engine` takes them (speclab.serving.settings.engine_settings)."""
    if o.exit_layer is None:
        raise ValueError("layer skip needs exit_layer, the last layer that drafts")
    if engine == "speclab":
        return {"method": NAME, "exit_layer": o.exit_layer, "k": o.k, **by_batch(engine, o)}
    if engine != "transformers":
        raise no(engine, "no self-drafting from the target's first layers (transformers' assistant_early_exit "
                         "has it)")
    by_batch(engine, o)
    return {"assistant_early_exit": o.exit_layer, "num_assistant_tokens": o.k,
            "num_assistant_tokens_schedule": "constant"}


# ================================================================ its setting on the command line
def layer_skip_setting(text: str) -> tuple[int, bool]:
    """'E' or 'E+adapter' -> (E, adapter), for --layer-skip."""
    layer, _, extra = text.partition("+")
    if not layer.isdigit() or extra not in ("", "adapter"):
        raise argparse.ArgumentTypeError(f"--layer-skip takes E or E+adapter (an exit layer, e.g. 12 or 12+adapter), "
                                         f"got {text!r}")
    return int(layer), extra == "adapter"


def layer_skip_rows(values) -> tuple[Setting, ...]:
    """A bench row per (E, adapter): "E=12" or "E=12+adapter", always named."""
    return tuple(Setting(f"E={e}" + ("+adapter" if adapter else ""), dict(exit_layer=int(e), adapter=bool(adapter)))
                 for e, adapter in values)


# the bench's exit layer: 22 with the adapter, the fastest in chapter 9's sweep
SWEEP = Sweep("layer_skip", Flag("--layer-skip", dict(
    type=layer_skip_setting, nargs="+", metavar="E[+adapter]",
    help="the layer-skip rows: exit layer, with or without the shipped exit adapter (default 22+adapter, the "
         "fastest in chapter 9's sweep); several give a row each, side by side (a sweep)")),
    layer_skip_rows, default=((22, True),))
