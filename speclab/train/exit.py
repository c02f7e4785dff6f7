"""Exit adapters for layer-skip drafting (speclab.methods.layer_skip): for each exit layer of a frozen
target, an affine map trained so that the exit's distribution matches the final layer's (a tuned lens).

    python -m speclab train exit --target DIR --out runs/eagle
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import PreTrainedModel

from speclab.methods import REGISTRY
from speclab.methods.layer_skip import NAME, ExitAdapter, check_exit_layer, save_adapters
from speclab.train.data import choose_preset, hardware, target_features
from speclab.train.eagle import soft_cross_entropy
from speclab.train.frozen import frozen_start
from speclab.train.loop import save_whole, train_loop

# layer_skip's registry entry: its name, its folder beside the bundled target and its train command (both exit)
METHOD = REGISTRY[NAME]


@dataclass
class ExitPreset:
    corpus_rows: int = 1024   # the rows of out/features.pt, shared with Medusa
    generated: int = 128
    heldout_rows: int = 64
    seq_len: int = 256
    prompt_len: int = 64
    batch: int = 8
    steps: int = 400          # per adapter: an H x H affine map converges fast
    lr: float = 1e-3
    warmup: int = 20


EXIT_PRESETS = {
    "stdlib": ExitPreset(),
    "micro": ExitPreset(corpus_rows=16, generated=4, heldout_rows=4, seq_len=32, prompt_len=8, batch=4, steps=6,
                        warmup=2),
}


def exit_logits(target: PreTrainedModel, h: torch.Tensor, adapter: torch.nn.Module | None = None) -> torch.Tensor:
    """The target's final norm and lm_head applied to a hidden state from an early layer (through the
    exit adapter, if any): what the layer-skip draft reads."""
    if adapter is not None:
        h = adapter(h)
    return target.get_output_embeddings()(target.model.norm(h))


@torch.no_grad()
def exit_agreement(target: PreTrainedModel, h: torch.Tensor, final: torch.Tensor,
                   adapter: torch.nn.Module | None = None) -> float:
    """How often the exit's top token is the target's own (greedy acceptance of a one-token draft)."""
    truth = target.get_output_embeddings()(final.float()).argmax(-1)
    return round(float((exit_logits(target, h.float(), adapter).argmax(-1) == truth).float().mean()), 4)


def exit_features(target: PreTrainedModel, out: Path, features: dict, layers: list[int], dev: torch.device) -> dict:
    """The exit layers' hidden states over the same rows as `features` (cached_features), computed once
    into out/features_exit.pt: {"train", "heldout": (n, T, len(layers) * H) float16, "layers", "seconds"}."""
    path = out / "features_exit.pt"
    hidden = torch.load(path) if path.exists() else None
    if hidden is None or hidden["layers"] != layers or len(hidden["train"]) != len(features["train_rows"]):
        started = time.perf_counter()
        hidden = {"layers": layers,
                  "train": target_features(target, features["train_rows"], dev, layers=layers),
                  "heldout": target_features(target, features["heldout_rows"], dev, layers=layers)}
        hidden["seconds"] = time.perf_counter() - started
        save_whole(hidden, path)
    return hidden


def train_adapter(target: PreTrainedModel, layer: int, train_h: torch.Tensor, final_h: torch.Tensor, m: ExitPreset,
                  out: Path, dev: torch.device, seed: int, deadline: float | None = None,
                  stop_after_steps: int | None = None) -> tuple[ExitAdapter, dict]:
    """One layer's adapter, trained on its hidden states train_h (n, T, H) against the target's
    distribution read off its last features final_h: a run of the training loop of its own, resumable
    from out/exit-<layer>.ckpt (deleted by train_exit once the adapter is in exit.ckpt). Returns the
    adapter and the run's log (its "train" curve: [step, loss])."""
    adapter = ExitAdapter(train_h.shape[-1]).to(dev)
    opt = torch.optim.AdamW(adapter.parameters(), lr=m.lr, betas=(0.9, 0.95), weight_decay=0.0)
    lm_head = target.get_output_embeddings()

    def step_fn(step: int):
        g = torch.Generator().manual_seed(seed * 1_000_003 + layer * 10_007 + step)
        pick = torch.randint(0, len(final_h), (m.batch,), generator=g)
        h = train_h[pick].to(dev, torch.float32)
        with torch.no_grad():
            teacher = lm_head(final_h[pick].to(dev, torch.float32))
        loss = soft_cross_entropy(exit_logits(target, h, adapter), teacher)
        return loss, [round(loss.item(), 4)]

    log = train_loop(f"{METHOD.train} {layer}", adapter, opt, m.steps, step_fn, ckpt_file=layer_checkpoint(out, layer),
                     key="adapter", log={"seconds": 0.0}, schedule=m, device=dev, deadline=deadline,
                     stop_after_steps=stop_after_steps)
    return adapter.eval(), log


def layer_checkpoint(out: Path, layer: int) -> Path:
    """Where one layer's adapter run checkpoints until it is done."""
    return out / f"{METHOD.bundled}-{layer}.ckpt"


def train_exit(target_dir: str | Path, out: Path, exit_layers: Sequence[int] | None = None, preset: str = "stdlib",
               device: str | None = None, seed: int = 0, stop_after_minutes: float | None = None,
               stop_after_steps: int | None = None, **overrides) -> dict:
    """An exit adapter (speclab.methods.layer_skip.ExitAdapter) for each exit layer of a frozen Llama-family
    target: trained so that the exit's distribution matches the final layer's (soft cross-entropy
    against the target's own distribution, on its hidden states over the cached rows). Resumable:
    finished layers are kept in out/exit.ckpt, the layer in training in its own checkpoint
    (stop_after_minutes or stop_after_steps, counted per layer, end this run early). Writes out/exit/
    (the adapters, one file) with record.json: for each layer, held-out top-1 agreement with the
    target without and with its adapter, and the loss curve."""
    m = choose_preset(EXIT_PRESETS, preset, overrides)
    start = frozen_start(target_dir, out, preset, m, device, seed, stop_after_minutes)
    dev, deadline, target, features = start.device, start.deadline, start.target, start.features
    num_layers = target.config.num_hidden_layers
    layers = sorted({check_exit_layer(target, int(e)) for e in (exit_layers or range(2, num_layers - 1, 2))})
    hidden = exit_features(target, out, features, layers, dev)
    width = target.config.hidden_size
    ckpt_file = out / f"{METHOD.bundled}.ckpt"
    state = torch.load(ckpt_file) if ckpt_file.exists() else {"adapters": {}, "record": {}}
    held_final = features["heldout"].to(dev, torch.float32)
    adapters = {}
    for i, layer in enumerate(layers):
        if layer in state["adapters"]:
            adapter = ExitAdapter(width).to(dev)
            adapter.load_state_dict(state["adapters"][layer])
            adapters[layer] = adapter.eval()
            continue
        own = slice(i * width, (i + 1) * width)  # this layer's columns of the concatenated hidden states
        adapter, log = train_adapter(target, layer, hidden["train"][..., own], features["train"], m, out, dev, seed,
                                     deadline, stop_after_steps)
        held = hidden["heldout"][..., own].to(dev, torch.float32)
        adapters[layer] = adapter
        state["adapters"][layer] = adapter.state_dict()
        state["record"][layer] = {"top1_plain": exit_agreement(target, held, held_final),
                                  "top1_adapter": exit_agreement(target, held, held_final, adapter),
                                  "loss": [loss for _, loss in log["train"]], "seconds": round(log["seconds"], 1)}
        save_whole(state, ckpt_file)
        layer_checkpoint(out, layer).unlink()
    report = {"preset": asdict(m), "target_from": str(target_dir), "device": str(dev), "hardware": hardware(dev),
              "torch": torch.__version__, "seed": seed, "layers_of_target": num_layers,
              "feature_seconds": round(hidden.get("seconds", 0.0), 1),
              "layers": {str(layer): state["record"][layer] for layer in layers}}
    save_adapters(adapters, target, out / METHOD.bundled, report)
    return report
