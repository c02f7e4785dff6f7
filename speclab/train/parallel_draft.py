"""A parallel draft (PARD, An et al. 2025; speclab.methods.parallel_draft) adapted from an ordinary draft
model for a frozen target (`python -m speclab train pard --target DIR --out runs/pard`): one mask token
added to its vocabulary, then trained to predict, at the j-th mask after a prefix, the token j + 1 on.

One row of T tokens is one pass: the real tokens, causal, learning the next token as before, and for a
subset of anchors a (PARD's conditional drop, the same anchors at every depth), K - 1 masks at a + 1 ..
a + K - 1, each seeing the real tokens up to a and its anchor's earlier masks, as at decode time. The
mask at a + j learns the target's own distribution there, softmax(lm_head(h[a + j])): the case that is
checked, since draft j + 1 is verified only after the first j were accepted. Rows and hidden states are
cached_features' (shared with the other heads of the preset).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import PreTrainedModel

from speclab.artifacts import record_target
from speclab.methods import REGISTRY
from speclab.methods.parallel_draft import MASK_KEY, NAME
from speclab.models import BUNDLED_DIR, load_model
from speclab.train.data import check_resumed_rows, choose_preset, hardware
from speclab.train.eagle import soft_cross_entropy
from speclab.train.frozen import frozen_start
from speclab.train.loop import train_loop

METHOD = REGISTRY[NAME]  # the method's name, and its folder beside the bundled target


@dataclass
class ParallelDraftPreset:
    draft: str | None = None   # the draft model adapted (None: the bundled draft)
    k: int = 4                 # tokens drafted per pass: K - 1 masks after the last real token
    anchor_share: float = 0.25  # share of a row's positions given a block of masks (PARD's COD keeps a share)
    # the rows (cached_features' fields; the EAGLE presets of the same name read the same file)
    corpus_rows: int = 1024
    generated: int = 512
    heldout_rows: int = 64
    seq_len: int = 256
    prompt_len: int = 64
    batch: int = 8
    steps: int = 2000
    lr: float = 3e-4            # the layers start trained: a head's rate would undo them
    warmup: int = 50
    clip: float = 1.0
    eval_every: int = 250


PRESETS = {
    "stdlib": ParallelDraftPreset(),
    "micro": ParallelDraftPreset(k=3, corpus_rows=16, generated=4, heldout_rows=4, prompt_len=8, seq_len=32,
                                 batch=2, steps=4, warmup=1, eval_every=2),
}


def add_mask_token(draft: PreTrainedModel) -> int:
    """Grow the draft's vocabulary by one row, the mask token, started at the mean embedding; its id is
    written to the config under vLLM's key. Returns the id."""
    mask = draft.config.vocab_size
    embeddings = draft.get_input_embeddings().weight.detach()
    draft.resize_token_embeddings(mask + 1, mean_resizing=False)
    with torch.no_grad():
        draft.get_input_embeddings().weight[mask] = embeddings.mean(0)
        out = draft.get_output_embeddings()
        if out.weight.data_ptr() != draft.get_input_embeddings().weight.data_ptr():
            out.weight[mask] = 0.0
    setattr(draft.config, MASK_KEY, mask)
    return mask


def block_layout(seq_len: int, anchors: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For one row of seq_len real tokens and masks after each anchor: the positions of all N tokens (real
    t: t; the j-th mask of anchor a: a + j, which is also where its teacher sits), and the (N, N) bool
    matrix of who sees whom."""
    a, depth = anchors.repeat_interleave(k - 1), torch.arange(1, k).repeat(len(anchors))
    positions = torch.cat([torch.arange(seq_len), a + depth])
    n_mask = len(a)
    sees = torch.zeros(seq_len + n_mask, seq_len + n_mask, dtype=torch.bool)
    sees[:seq_len, :seq_len] = torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
    sees[seq_len:, :seq_len] = torch.arange(seq_len)[None, :] <= a[:, None]           # the real prefix up to a
    same = (a[:, None] == a[None, :]) & (depth[None, :] <= depth[:, None])            # its own anchor's masks
    sees[seq_len:, seq_len:] = same
    return positions, sees


def pard_loss(draft: PreTrainedModel, rows: torch.Tensor, final_h: torch.Tensor, lm_head: torch.nn.Module,
              mask: int, k: int, anchors: torch.Tensor) -> tuple[torch.Tensor, list[float]]:
    """Soft cross-entropy against the target's distributions at every real position and every mask, and
    top-1 agreement with the target by draft depth (1: the real tokens, j + 1: the j-th masks)."""
    b, t = rows.shape
    positions, sees = block_layout(t, anchors, k)
    dev = rows.device
    ids = torch.cat([rows, torch.full((b, len(positions) - t), mask, dtype=rows.dtype, device=dev)], 1)
    additive = torch.zeros(sees.shape, device=dev).masked_fill_(~sees.to(dev), torch.finfo(torch.float32).min)
    logits = draft(input_ids=ids, position_ids=positions.to(dev).expand(b, -1),
                   attention_mask=additive[None, None].expand(b, 1, -1, -1)).logits[..., :mask]
    with torch.no_grad():  # a token's teacher sits at its position
        teacher = torch.nn.functional.linear(final_h[:, positions.to(dev)].float(), lm_head.weight)
    loss = soft_cross_entropy(logits, teacher)
    agree = (logits.argmax(-1) == teacher.argmax(-1)).float()
    by_depth = [float(agree[:, :t].mean())] + [float(agree[:, t + j::k - 1].mean()) for j in range(k - 1)]
    return loss, by_depth


def draw_anchors(seq_len: int, k: int, share: float, g: torch.Generator) -> torch.Tensor:
    """A random share of the positions that have k - 1 positions after them in the row, sorted."""
    usable = seq_len - k + 1
    count = max(1, int(round(share * usable)))
    return torch.randperm(usable, generator=g)[:count].sort().values


def train_parallel_draft(target_dir: str | Path, out: Path, preset: str = "stdlib", device: str | None = None,
                         seed: int = 0, stop_after_minutes: float | None = None,
                         stop_after_steps: int | None = None, **overrides) -> dict:
    """Adapt a draft model into a parallel draft for a frozen target; writes out/pard/ (a transformers
    model whose config names the mask token, the target's fingerprint and record.json); resumable from
    out/pard.ckpt."""
    m = choose_preset(PRESETS, preset, overrides)
    if m.k < 2:
        raise ValueError(f"k is the tokens drafted per pass, at least 2 (one mask); got {m.k}")
    start = frozen_start(target_dir, out, preset, m, device, seed, stop_after_minutes)
    dev, target, features = start.device, start.target, start.features
    lm_head = target.get_output_embeddings()
    draft_dir = Path(m.draft) if m.draft else BUNDLED_DIR / "draft"
    torch.manual_seed(seed)
    draft = load_model(draft_dir, dev, torch.float32)
    if draft.config.vocab_size != target.config.vocab_size:
        raise ValueError(f"the draft {draft_dir} has {draft.config.vocab_size} tokens, the target "
                         f"{target.config.vocab_size}: a parallel draft is adapted from a draft of the same vocabulary")
    mask = add_mask_token(draft)
    draft.train()
    train_h, train_rows = features["train"], features["train_rows"].long()
    held_h, held_rows = features["heldout"].to(dev, torch.float32), features["heldout_rows"].long().to(dev)
    held_anchors = draw_anchors(held_rows.shape[1], m.k, m.anchor_share, torch.Generator().manual_seed(1))
    opt = torch.optim.AdamW(draft.parameters(), lr=m.lr, betas=(0.9, 0.95), weight_decay=0.0)

    def step_fn(step: int):
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        pick = torch.randint(0, len(train_h), (m.batch,), generator=g)
        anchors = draw_anchors(train_rows.shape[1], m.k, m.anchor_share, g)
        loss, by_depth = pard_loss(draft, train_rows[pick].to(dev), train_h[pick].to(dev, torch.float32), lm_head,
                                   mask, m.k, anchors)
        return loss, [round(loss.item(), 4)] + [round(x, 4) for x in by_depth]

    def evaluate(step: int, _):
        draft.eval()
        with torch.no_grad():
            losses, depths = [], []
            for i in range(0, len(held_rows), m.batch):
                loss, by_depth = pard_loss(draft, held_rows[i:i + m.batch], held_h[i:i + m.batch], lm_head, mask,
                                           m.k, held_anchors)
                losses.append(float(loss))
                depths.append(by_depth)
        draft.train()
        top1 = [round(sum(d[j] for d in depths) / len(depths), 4) for j in range(m.k)]
        entry = {"step": step, "heldout_loss": round(sum(losses) / len(losses), 4), "heldout_top1_by_depth": top1}
        return entry, f"held-out loss {entry['heldout_loss']:.4f}, top-1 agreement by depth {top1}"

    ckpt = out / f"{METHOD.name}.ckpt"
    log = train_loop(METHOD.name, draft, opt, m.steps, step_fn, ckpt_file=ckpt, key="draft",
                     log={"evals": [], "seconds": 0.0, "feature_seconds": features["seconds"],
                          "rows": features["rows"]},
                     schedule=m, device=dev, evaluate=evaluate, eval_every=m.eval_every, evaluate_first=True,
                     clip=m.clip, deadline=start.deadline, stop_after_steps=stop_after_steps,
                     check_resume=lambda saved: check_resumed_rows(saved, features, ckpt))
    report = {"method": METHOD.name, "preset": asdict(m), "draft_from": str(draft_dir), "target_from": str(target_dir),
              "mask_token_id": mask, "device": str(dev), "hardware": hardware(dev), "torch": torch.__version__,
              "seed": seed, "training_rows": features["rows"], "log": log}
    folder = out / METHOD.bundled
    draft.eval().to(torch.float16).save_pretrained(folder)  # half precision, as the bundled draft ships
    record_target(folder, target)
    (folder / "record.json").write_text(json.dumps(report, indent=1))
    return report
