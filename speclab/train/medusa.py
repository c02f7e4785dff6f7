"""Medusa heads for a frozen target (speclab.methods.medusa), trained by self-distillation on the
target's hidden states, and the tree they draft with, chosen by a measured verify pass.

    python -m speclab train medusa --target DIR --out runs/medusa
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import PreTrainedModel

from speclab.devices import pick_device
from speclab.measure.profiling import tree_pass_costs
from speclab.methods import REGISTRY
from speclab.methods.medusa import NAME, MedusaHeads
from speclab.models import load_model
from speclab.train.data import check_resumed_rows, choose_preset, hardware, target_features
from speclab.train.frozen import frozen_start
from speclab.train.loop import train_loop
from speclab.trees import best_tree, tree_from_accuracies

METHOD = REGISTRY[NAME]  # the method's name, its folder beside the bundled target, its train command


@dataclass
class MedusaPreset:
    num_heads: int = 4
    num_layers: int = 1       # residual blocks per head
    corpus_rows: int = 1024   # corpus windows of seq_len + 1 tokens whose hidden states are kept
    generated: int = 128      # the target's own continuations (on-policy data), besides the corpus rows
    heldout_rows: int = 64
    seq_len: int = 256
    prompt_len: int = 64
    batch: int = 8
    steps: int = 800
    lr: float = 1e-3
    warmup: int = 50
    decay: float = 0.8        # loss weight of head i: decay ** i (the Medusa paper's lambda_k)
    eval_every: int = 100
    ranks: int = 10           # top-k depth of the accuracy table trees are built from


MEDUSA_PRESETS = {
    "stdlib": MedusaPreset(),
    "micro": MedusaPreset(num_heads=2, corpus_rows=16, generated=4, heldout_rows=4, seq_len=32, prompt_len=8,
                          batch=4, steps=6, warmup=2, eval_every=3, ranks=3),
}


def medusa_loss(heads: torch.nn.Module, lm_head: torch.nn.Module, h: torch.Tensor, decay: float
                ) -> tuple[torch.Tensor, list[float]]:
    """Self-distillation: head i at position t learns the target's own distribution for token t+2+i,
    softmax(lm_head(h[t+1+i])), read off the stored features (the Medusa paper's self-distillation extension, with the
    backbone frozen as in Medusa-1). Returns the weighted loss and each head's loss."""
    total, per_head = 0.0, []
    length = h.shape[1]
    with torch.no_grad():
        teacher_all = torch.softmax(lm_head(h[:, 1:]).float(), -1)  # the target's own next-token rows, once
    for i, head in enumerate(heads.heads):
        teacher = teacher_all[:, i:]
        student = torch.log_softmax(head(h[:, :length - 1 - i]).float(), -1)
        loss = -(teacher * student).sum(-1).mean()
        total = total + decay ** i * loss
        per_head.append(loss.item())
    return total, per_head


@torch.no_grad()
def head_accuracies(heads: torch.nn.Module, lm_head: torch.nn.Module, h: torch.Tensor, ranks: int) -> list[list[float]]:
    """acc[i][r]: how often head i's rank-r token is the target's own greedy choice at that place, on
    held-out features: the numbers a Medusa tree is built from (speclab.trees.tree_from_accuracies)."""
    table = []
    length = h.shape[1]
    for i, head in enumerate(heads.heads):
        truth = lm_head(h[:, 1 + i:]).argmax(-1)
        top = head(h[:, :length - 1 - i]).topk(ranks, dim=-1).indices
        table.append([round(float((top[..., r] == truth).float().mean()), 4) for r in range(ranks)])
    return table


def medusa_step(heads: torch.nn.Module, lm_head: torch.nn.Module, opt: torch.optim.Optimizer, h: torch.Tensor,
                lr: float, decay: float) -> float:
    """One optimiser step of the heads on a batch of stored features h (B, T, H); returns the loss."""
    for group in opt.param_groups:
        group["lr"] = lr
    loss, _ = medusa_loss(heads, lm_head, h, decay)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


def quick_medusa(target: PreTrainedModel, rows: torch.Tensor, steps: int, num_heads: int = 4, batch: int = 4,
                 lr: float = 1e-3, decay: float = 0.8, seed: int = 0) -> tuple[torch.nn.Module, list[float]]:
    """A short, in-memory run of the same training on token `rows` (n, T): fresh heads and the loss at
    every step. For watching training happen (chapter 7); `train medusa` makes the real heads."""
    device = next(target.parameters()).device
    lm_head = target.get_output_embeddings()
    features = target_features(target, rows, device)
    torch.manual_seed(seed)
    heads = MedusaHeads.for_target(target, num_heads)
    opt = torch.optim.AdamW(heads.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    g = torch.Generator().manual_seed(seed)
    losses = []
    with torch.enable_grad():
        for _ in range(steps):
            h = features[torch.randint(0, len(features), (batch,), generator=g)].to(device, torch.float32)
            losses.append(medusa_step(heads, lm_head, opt, h, lr, decay))
    return heads.eval(), losses


def train_medusa(target_dir: str | Path, out: Path, preset: str = "stdlib", device: str | None = None, seed: int = 0,
                 stop_after_minutes: float | None = None, stop_after_steps: int | None = None, **overrides) -> dict:
    """Medusa heads for a frozen target (the bundled one, a local directory or a hub model), trained on
    its hidden states over standard-library windows and over its own continuations. Resumable
    (stop_after_minutes or stop_after_steps end this run early, checkpointed). Writes out/medusa/
    (heads and config) and its record.json (loss curve, accuracies)."""
    m = choose_preset(MEDUSA_PRESETS, preset, overrides)
    start = frozen_start(target_dir, out, preset, m, device, seed, stop_after_minutes)
    dev, deadline, target, features = start.device, start.deadline, start.target, start.features
    lm_head = target.get_output_embeddings()
    train_h, held_h = features["train"], features["heldout"].to(dev, torch.float32)

    torch.manual_seed(seed)
    heads = MedusaHeads.for_target(target, m.num_heads, m.num_layers)
    opt = torch.optim.AdamW(heads.parameters(), lr=m.lr, betas=(0.9, 0.95), weight_decay=0.0)
    ckpt_file = out / f"{METHOD.bundled}.ckpt"

    def step_fn(step: int):
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        h = train_h[torch.randint(0, len(train_h), (m.batch,), generator=g)].to(dev, torch.float32)
        loss, _ = medusa_loss(heads, lm_head, h, m.decay)
        return loss, [round(loss.item(), 4)]

    def evaluate(step: int, _):
        heads.eval()
        with torch.no_grad():
            loss, per_head = medusa_loss(heads, lm_head, held_h, m.decay)
        top1 = [row[0] for row in head_accuracies(heads, lm_head, held_h, 1)]
        heads.train()
        held_loss = round(float(loss), 4)
        return ({"step": step, "heldout_loss": held_loss, "heldout_head_loss": [round(x, 4) for x in per_head],
                 "heldout_top1": top1}, f"held-out loss {held_loss:.3f}, top-1 {top1}")

    # step 0's evaluation (evaluate_first): every head is a copy of lm_head, predicting the next token instead
    fresh = {"evals": [], "seconds": 0.0, "feature_seconds": features["seconds"], "rows": features["rows"]}
    log = train_loop(METHOD.train, heads, opt, m.steps, step_fn, ckpt_file=ckpt_file, key="heads", log=fresh,
                     schedule=m, device=dev, evaluate=evaluate, eval_every=m.eval_every, evaluate_first=True,
                     deadline=deadline, stop_after_steps=stop_after_steps,
                     check_resume=lambda saved: check_resumed_rows(saved, features, ckpt_file))
    heads.eval()
    report = {"preset": asdict(m), "target_from": str(target_dir), "device": str(dev), "hardware": hardware(dev),
              "torch": torch.__version__, "seed": seed, "training_rows": features["rows"],
              "parameters": sum(p.numel() for p in heads.parameters()), "log": log,
              "accuracy": head_accuracies(heads, lm_head, held_h, m.ranks)}
    heads.save(out / METHOD.bundled)
    (out / METHOD.bundled / "record.json").write_text(json.dumps(report, indent=1))
    return report


def choose_medusa_tree(target_dir: str | Path, heads_dir: Path, device: str | None = None) -> dict:
    """Pick the heads' default tree on this device: for each node budget, the tree with the most
    expected accepted tokens (from the heads' held-out accuracies), priced by a measured verify pass;
    the fastest modelled one wins. Writes heads_dir/tree.json, which load_drafter("medusa") reads."""
    record = json.loads((heads_dir / "record.json").read_text())
    accuracies = record["accuracy"]
    dev = pick_device(device)
    target = load_model(target_dir, dev, torch.float32)
    costs = tree_pass_costs(target, accuracies)
    budget, table = best_tree(accuracies, costs)
    choice = {"budget": budget, "choices": [list(c) for c in tree_from_accuracies(accuracies, budget)],
              "table": table, "device": str(dev), "hardware": hardware(dev), "threads": torch.get_num_threads()}
    (heads_dir / "tree.json").write_text(json.dumps(choice, indent=1))
    return choice
