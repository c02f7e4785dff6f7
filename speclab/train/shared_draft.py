"""A draft for an existing target that has no small sibling (SmolLM2-135M-Instruct): a few layers of
the target's width, reading its embeddings and scoring a draft vocabulary (speclab.shared_draft),
distilled on the target's own distributions over its cached features.

    python -m speclab train shared-draft --target DIR --out runs/smollm2 --preset smollm2

It starts as the target's first `layers` layers, final norm and the lm_head rows of its draft vocabulary,
so it begins where the target's early layers already are. The teacher is the target's distribution
restricted to the draft vocabulary, at the positions whose target token lies in it (as EAGLE-3's
reference trains its draft vocabulary: cnets.py). The rows and the target's last hidden states are
cached_features' (the same file the EAGLE-3 head of the same preset reads), so the teacher costs one
lm_head product a step, not a target forward.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from speclab import shared_draft
from speclab.methods.eagle import draft_vocabulary
from speclab.models import shallow_config
from speclab.train.chat_data import summary as chat_summary
from speclab.train.data import (
    check_resumed_rows,
    choose_preset,
    hardware,
)
from speclab.train.eagle import soft_cross_entropy
from speclab.train.frozen import frozen_start
from speclab.train.loop import loss_function, precision_name, step_precision, train_loop


@dataclass
class SharedDraftPreset:
    layers: int = 2             # decoder layers, started from the target's first ones
    draft_vocab: int = 8192     # output rows: the most frequent tokens of the training rows
    # the rows (cached_features' fields; the EAGLE preset of the same name reads the same file)
    corpus: str = "chat"
    conversations: int = 640    # 10 batches of 64 replies: about 35 min of the target answering on 2 CPU cores
    requests: str = "library"   # their first messages (speclab.train.chat_data.first_messages)
    corpus_rows: int = 0
    generated: int = 0
    prompt_len: int = 64
    heldout_rows: int = 32
    seq_len: int = 256
    batch: int = 8
    steps: int = 1500
    lr: float = 3e-4            # lower than a head's: the layers start trained
    warmup: int = 50
    clip: float = 1.0
    eval_every: int = 250
    answers_only: bool = False  # train only where the target's next token is an answer's (as EAGLE-3's preset)
    # the steps' forward under bfloat16 autocast (None: by device; as EAGLE-3's preset). Off for the draft: on 700
    # SmolLM2 conversations (300 steps, same rows and batches, 2-core AMD EPYC) it halved the time (156 s against
    # 317) but held-out top-1 on answers fell from 0.325 to 0.321 (loss 3.968 against 3.956) at both evaluations,
    # where the head's did not move (the draft starts from the target's trained layers; why it differs, unmeasured)
    bf16: bool | None = False
    # the soft cross-entropy compiled (speclab.train.loop.loss_function; as EAGLE-3's preset): a smaller share of
    # the draft's step, whose two layers are most of it (0.63 s against 0.68, medians of 8 steps, float32, 2-core Xeon family 6 model 167)
    compile_loss: bool = False


PRESETS = {
    "smollm2": SharedDraftPreset(compile_loss=True),
    # everyday requests over the target's own passages (speclab.train.chat_requests) instead of the library's
    "smollm2-everyday": SharedDraftPreset(conversations=1400, requests="everyday", steps=2000, compile_loss=True),
    "micro": SharedDraftPreset(layers=1, draft_vocab=32, corpus="stdlib", conversations=0, corpus_rows=16,
                               generated=4, prompt_len=8, heldout_rows=4, seq_len=32, batch=4, steps=6, warmup=2,
                               eval_every=3),
    # the same on a few chat conversations, for the tests' chat stand-in of SmolLM2
    "micro-chat": SharedDraftPreset(layers=1, draft_vocab=16, conversations=8, heldout_rows=2, seq_len=16, batch=2,
                                    steps=4, warmup=1, eval_every=2),
}


def build(target: PreTrainedModel, layers: int, draft_ids: torch.Tensor) -> PreTrainedModel:
    """A draft of the target's kind and width with `layers` decoder layers, started from the target's
    first layers, final norm and the lm_head rows of `draft_ids`, reading the target's embeddings."""
    config = shallow_config(target.config, layers)
    config.tie_word_embeddings = False  # its output rows are its own; its input rows are the target's
    draft = AutoModelForCausalLM.from_config(config)
    state = {k: v for k, v in target.state_dict().items() if k.startswith(("model.layers.", "model.norm."))
             and (not k.startswith("model.layers.") or int(k.split(".")[2]) < layers)}
    draft.load_state_dict(state, strict=False)
    head = shared_draft.DraftVocabHead(config.hidden_size, draft_ids, config.vocab_size)
    with torch.no_grad():
        head.weight.copy_(target.get_output_embeddings().weight[draft_ids.long()])
    draft.lm_head = head
    shared_draft.share_embeddings(draft, target)
    return draft.to(next(target.parameters()).device, torch.float32)


def draft_loss(draft: torch.nn.Module, rows: torch.Tensor, final_h: torch.Tensor, next_tokens: torch.Tensor,
               lm_head: torch.nn.Module, answers: torch.Tensor | None = None, answers_only: bool = False,
               ce: Callable = soft_cross_entropy) -> tuple[torch.Tensor, float, float | None]:
    """Soft cross-entropy of the draft's next-token distribution against the target's, both over the draft
    vocabulary, at the positions whose target token (next_tokens, the target's greedy choice) is in it
    (and, with answers_only, an answer's: `answers`, chat_data.answer_next); the draft's top-1 agreement
    with that token over all positions (a token outside the draft vocabulary counts as a miss), and over
    the answers' positions (None without `answers`). `ce`: soft_cross_entropy or its compiled fusion."""
    head: shared_draft.DraftVocabHead = draft.lm_head
    logits = head.draft_logits(draft.model(input_ids=rows).last_hidden_state)
    with torch.no_grad():  # the target's logits over the draft vocabulary's rows only
        teacher = torch.nn.functional.linear(final_h.float(), lm_head.weight[head.draft_ids])
        kept = torch.isin(next_tokens, head.draft_ids).float()
    loss = ce(logits, teacher, kept * answers if answers_only else kept)
    right = head.draft_ids[logits.argmax(-1)] == next_tokens
    return loss, right.float().mean().item(), None if answers is None else right[answers].float().mean().item()


def train_shared_draft(target_dir: str | Path, out: Path, preset: str = "smollm2", device: str | None = None,
                       seed: int = 0, stop_after_minutes: float | None = None, stop_after_steps: int | None = None,
                       **overrides) -> dict:
    """Distil the draft and write out/draft/ (shared_draft.save) with out/draft/record.json; resumable
    from out/draft.ckpt."""
    m = choose_preset(PRESETS, preset, overrides)
    start = frozen_start(target_dir, out, preset, m, device, seed, stop_after_minutes)
    dev, deadline, target, features = start.device, start.deadline, start.target, start.features
    lm_head = target.get_output_embeddings()
    if "train_next" not in features:
        raise ValueError(f"{out / 'features.pt'} predates the target's greedy tokens being cached: delete it (it is "
                         "recomputed) or pass another --out")
    train_h, train_rows, train_next = features["train"], features["train_rows"].long(), features["train_next"].long()
    held_h, held_rows = features["heldout"].to(dev, torch.float32), features["heldout_rows"].long().to(dev)
    held_next = features["heldout_next"].long().to(dev)
    d2t, _ = draft_vocabulary(train_rows, m.draft_vocab, target.config.vocab_size)
    torch.manual_seed(seed)
    draft = build(target, m.layers, torch.arange(m.draft_vocab) + d2t)
    trained = [p for n, p in draft.named_parameters() if "embed_tokens" not in n]
    opt = torch.optim.AdamW(trained, lr=m.lr, betas=(0.9, 0.95), weight_decay=0.0)

    train_answers, held_answers = features.get("train_answers"), features.get("heldout_answers")
    if m.answers_only and train_answers is None:
        raise ValueError("answers_only needs chat rows (corpus 'chat'): library rows have no answers to restrict it to")
    held_answers = None if held_answers is None else held_answers.to(dev)

    precision = step_precision(m.bf16, dev)  # checked before the first step
    ce = loss_function(soft_cross_entropy, m.compile_loss, dev)

    def step_fn(step: int):
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        pick = torch.randint(0, len(train_h), (m.batch,), generator=g)
        with precision:
            loss, top1, _ = draft_loss(draft, train_rows[pick].to(dev), train_h[pick].to(dev, torch.float32),
                                       train_next[pick].to(dev), lm_head,
                                       None if train_answers is None else train_answers[pick].to(dev), m.answers_only,
                                       ce)
        return loss, [round(loss.item(), 4), round(top1, 4)]

    def evaluate(step: int, _):
        draft.eval()
        with torch.no_grad():
            loss, top1, answer_top1 = draft_loss(draft, held_rows, held_h, held_next, lm_head, held_answers,
                                                 m.answers_only)
        draft.train()
        entry = {"step": step, "heldout_loss": round(float(loss), 4), "heldout_top1": round(top1, 4)}
        if answer_top1 is not None:  # the drafts an answer needs: what decoding a reply will meet
            entry["heldout_answer_top1"] = round(answer_top1, 4)
        return entry, f"held-out loss {entry['heldout_loss']:.4f}, top-1 agreement with the target {top1:.3f}"

    log = train_loop("shared-draft", draft, opt, m.steps, step_fn, ckpt_file=out / "draft.ckpt", key="draft",
                     log={"evals": [], "seconds": 0.0, "feature_seconds": features["seconds"],
                          "rows": features["rows"]},
                     schedule=m, device=dev, evaluate=evaluate, eval_every=m.eval_every, evaluate_first=True,
                     clip=m.clip, deadline=deadline, stop_after_steps=stop_after_steps,
                     check_resume=lambda saved: check_resumed_rows(saved, features, out / "draft.ckpt"))
    draft.eval()
    with torch.no_grad():
        coverage = float(torch.isin(held_next, draft.lm_head.draft_ids).float().mean())
    report = {"method": "shared-embedding draft", "preset": asdict(m), "target_from": str(target_dir),
              "device": str(dev), "hardware": hardware(dev), "torch": torch.__version__, "seed": seed,
              "step_precision": precision_name(precision),
              "training_rows": features["rows"], "rows_spec": features.get("spec"), "chat": chat_summary(out),
              "own_parameters": sum(p.numel() for p in trained),
              "draft_vocab": {"size": m.draft_vocab, "heldout_coverage": round(coverage, 4)}, "log": log}
    shared_draft.save(draft, target, out / "draft")
    (out / "draft" / "record.json").write_text(json.dumps(report, indent=1))
    return report
