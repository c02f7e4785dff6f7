"""Train the course's bundled pair (a tokenizer, a target, and a draft distilled from the target), and
drafters for a frozen target: drafts, Medusa heads, EAGLE heads, an MTP module, exit adapters.

    python -m speclab train pair --out runs/stdlib          # target and drafts (resumable)
    python -m speclab train pair --out /tmp/micro --preset micro   # a few-second smoke run
    python -m speclab train draft --target DIR --out runs/draft   # a new draft for an existing target
    python -m speclab train medusa --target DIR --out runs/medusa # Medusa heads for a frozen target
    python -m speclab train eagle --target DIR --out runs/eagle   # an EAGLE-1 head (eagle3, mtp: the others)
    python -m speclab train exit --target DIR --out runs/eagle    # layer-skip exit adapters

Every stage saves a checkpoint and is skipped or resumed when the command is run again, so a long
run can be stopped (Ctrl-C, or --stop-after-minutes) and continued later, on CPU or CUDA.
Batches are drawn from a generator seeded by (seed, step), so a resumed run sees the same data as an
uninterrupted one.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from speclab import corpus
from speclab.devices import pick_device
from speclab.models import shallow_config

EOS = "<|endoftext|>"


# ---------------------------------------------------------------- configuration (plain values)
@dataclass
class Preset:
    # The bundled pair. The target is deep and thin on purpose: on a CPU a decode step costs per layer
    # more than per weight, so depth is what makes a target step dear against a two-layer draft's
    # (MobileLLM, Liu et al. 2024, finds deep-thin models no worse at this size).
    vocab_size: int = 4096
    hidden: int = 192
    intermediate: int = 576
    heads: int = 3
    target_layers: int = 24
    draft_layers: int = 2
    context: int = 1024
    seq_len: int = 256
    batch: int = 16
    target_steps: int = 1800
    draft_steps: int = 1500
    lr: float = 1e-3
    warmup: int = 100
    eval_batches: int = 16
    eval_every: int = 400
    max_files: int | None = None  # None: the whole library
    # Distillation data: besides corpus windows, the target's own continuations of corpus prompts (half
    # greedy, half sampled at temperature 1), because in speculative decoding the draft reads contexts
    # the target wrote (sequence-level distillation, Kim & Rush 2016; on-policy data, DistillSpec).
    generated: int = 2048          # continuations of seq_len + 1 tokens
    generated_share: float = 0.67  # share of a distillation batch's rows taken from them
    prompt_len: int = 64           # corpus tokens each continuation starts from


PRESETS = {
    "stdlib": Preset(),
    # A pair that trains in seconds, for the CI smoke test and for trying the command out.
    "micro": Preset(vocab_size=512, hidden=32, intermediate=64, heads=2, target_layers=2, draft_layers=1, context=128,
                    seq_len=32, batch=4, target_steps=6, draft_steps=4, warmup=2, eval_batches=2,
                    eval_every=3, max_files=200, generated=8, prompt_len=8),
}


def llama_config(p: Preset, layers: int) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=p.vocab_size, hidden_size=p.hidden, intermediate_size=p.intermediate,
        num_hidden_layers=layers, num_attention_heads=p.heads, num_key_value_heads=p.heads,
        max_position_embeddings=p.context, tie_word_embeddings=True, bos_token_id=None,
        eos_token_id=0, pad_token_id=0,
    )


# ---------------------------------------------------------------- tokenizer and data
def train_tokenizer(texts: list[str], vocab_size: int, out: Path) -> PreTrainedTokenizerFast:
    """Byte-level BPE (the GPT-2 recipe) with one special token, id 0, used as EOS and padding."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS)
    fast.save_pretrained(out)
    return fast


def encode(tokenizer: PreTrainedTokenizerFast, texts: list[str]) -> torch.Tensor:
    """All texts as one stream of ids, each file followed by EOS."""
    ids: list[int] = []
    if not texts:
        raise ValueError("no texts to encode: the corpus split is empty (raise max_files)")
    for enc in tokenizer(texts, add_special_tokens=False)["input_ids"]:
        ids.extend(enc)
        ids.append(tokenizer.eos_token_id)
    return torch.tensor(ids, dtype=torch.int32)


def prepare_data(out: Path, p: Preset, tokenizer: PreTrainedTokenizerBase | None = None
                 ) -> tuple[PreTrainedTokenizerBase, torch.Tensor, torch.Tensor]:
    """Tokenizer (trained here unless one is given, e.g. an existing target's) and the encoded
    train/held-out streams, built once and cached in out/."""
    data_file = out / "data.pt"
    train_texts = heldout_texts = None
    if tokenizer is None:
        if not (out / "tokenizer" / "tokenizer.json").exists():
            train_texts, heldout_texts = corpus.split_texts(max_files=p.max_files)
            train_tokenizer(train_texts, p.vocab_size, out / "tokenizer")
        tokenizer = PreTrainedTokenizerFast.from_pretrained(out / "tokenizer")
    if not data_file.exists():
        if train_texts is None:
            train_texts, heldout_texts = corpus.split_texts(max_files=p.max_files)
        torch.save({"train": encode(tokenizer, train_texts), "heldout": encode(tokenizer, heldout_texts)}, data_file)
    data = torch.load(data_file)
    return tokenizer, data["train"], data["heldout"]


def get_batch(stream: torch.Tensor, p: Preset, seed: int, step: int, device: torch.device,
              generated: torch.Tensor | None = None) -> torch.Tensor:
    """batch x (seq_len + 1) windows at positions drawn from a generator seeded by (seed, step).
    With `generated` (rows of seq_len + 1 ids), a share p.generated_share of the rows come from it."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    starts = torch.randint(0, len(stream) - p.seq_len - 1, (p.batch,), generator=g)
    rows = torch.stack([stream[s: s + p.seq_len + 1] for s in starts.tolist()])
    if generated is not None and len(generated):
        use = torch.rand(p.batch, generator=g) < p.generated_share
        picks = torch.randint(0, len(generated), (p.batch,), generator=g)
        rows[use] = generated[picks[use]].to(rows.dtype)
    return rows.long().to(device)


@torch.inference_mode()
def generate_continuations(target: PreTrainedModel, train: torch.Tensor, p: Preset, out: Path,
                           device: torch.device, seed: int, deadline: float | None = None,
                           chunk: int = 64) -> torch.Tensor:
    """p.generated continuations by the target of corpus prompts (p.prompt_len tokens each, continued to
    seq_len + 1), alternately greedy and sampled at temperature 1, chunk by chunk; saved after each
    chunk in out/generated.pt, so an interrupted run resumes where it stopped."""
    path = out / "generated.pt"
    done = torch.load(path) if path.exists() else torch.empty(0, p.seq_len + 1, dtype=torch.int32)
    new = p.seq_len + 1 - p.prompt_len
    target.eval()
    bar = tqdm(total=p.generated, initial=min(len(done), p.generated), desc="generated", mininterval=5)
    while len(done) < p.generated:
        if deadline is not None and time.time() > deadline:
            raise SystemExit(f"generated: stopped at {len(done)}/{p.generated}; run the same command again to resume.")
        index, offset = divmod(len(done), chunk)
        n = min(chunk - offset, p.generated - len(done))
        g = torch.Generator().manual_seed(seed * 1_000_003 + index)
        # a chunk's prompts are fixed by its index; a run asking for more rows than an earlier one
        # continues a partly done chunk where it stopped, rather than repeating its first prompts
        starts = torch.randint(0, len(train) - p.prompt_len, (chunk,), generator=g)[offset:offset + n].tolist()
        prompts = torch.stack([train[s: s + p.prompt_len] for s in starts]).long().to(device)
        sampled = index % 2 == 1
        torch.manual_seed(seed * 1_000_003 + index)
        rows = target.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=new,
                               min_new_tokens=new, do_sample=sampled, temperature=1.0 if sampled else None,
                               top_k=None, top_p=None, pad_token_id=0)
        done = torch.cat([done, rows.cpu().to(torch.int32)])
        torch.save(done, path)
        bar.update(n)
    bar.close()
    return done[:p.generated]


# ---------------------------------------------------------------- training
def bf16_autocast_supported(device: torch.device) -> bool:
    """bf16 mixed precision halves training time on GPUs and on CPUs with native bf16 (AVX512-BF16, AMX)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        try:
            return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        except (AttributeError, RuntimeError):
            return False
    return False


def lr_at(step: int, p: Preset, total: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    if step < p.warmup:
        return p.lr * (step + 1) / p.warmup
    progress = (step - p.warmup) / max(1, total - p.warmup)
    return p.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


@torch.no_grad()
def heldout_loss(model: LlamaForCausalLM, heldout: torch.Tensor, p: Preset, device: torch.device) -> float:
    """Mean next-token cross-entropy on fixed held-out windows (the same ones every time)."""
    model.eval()
    losses = []
    for i in range(p.eval_batches):
        batch = get_batch(heldout, p, seed=12345, step=i, device=device)
        logits = model(batch[:, :-1]).logits
        losses.append(F.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten()).item())
    model.train()
    return sum(losses) / len(losses)


def distillation_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """KL(target || draft) per position: the draft learns the target's whole distribution, not just
    the data's next token, which is what acceptance (the overlap of the two) rewards."""
    s = F.log_softmax(student_logits.float().flatten(0, 1), dim=-1)
    t = F.log_softmax(teacher_logits.float().flatten(0, 1), dim=-1)
    return F.kl_div(s, t, log_target=True, reduction="batchmean")


def train_stage(name: str, model: PreTrainedModel, train: torch.Tensor, heldout: torch.Tensor, p: Preset,
                steps: int, out: Path, device: torch.device, seed: int, teacher: PreTrainedModel | None = None,
                deadline: float | None = None, amp: bool = False, generated: torch.Tensor | None = None) -> dict:
    """Train `model` for `steps` steps (cross-entropy, or distillation from `teacher` on corpus windows
    mixed with `generated` rows), resuming from out/name.ckpt. Returns the log: held-out loss per
    evaluation, tokens/s, seconds spent."""
    ckpt_file = out / f"{name}.ckpt"
    opt = torch.optim.AdamW(model.parameters(), lr=p.lr, betas=(0.9, 0.95), weight_decay=0.1)
    log = {"evals": [], "seconds": 0.0, "steps": steps}
    step = 0
    if ckpt_file.exists():
        state = torch.load(ckpt_file, map_location=device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step, log = state["step"], state["log"]

    def save():
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "log": log}, ckpt_file)

    model.train()
    bar = tqdm(total=steps, initial=step, desc=name, mininterval=5)
    started, last_save = time.perf_counter(), time.perf_counter()
    interrupted = False
    try:
        while step < steps:
            if deadline is not None and time.time() > deadline:
                interrupted = True
                break
            for group in opt.param_groups:
                group["lr"] = lr_at(step, p, steps)
            batch = get_batch(train, p, seed, step, device, generated)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
                logits = model(batch[:, :-1]).logits
                if teacher is None:
                    loss = F.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten())
                else:
                    with torch.no_grad():
                        teacher_logits = teacher(batch[:, :-1]).logits
                    loss = distillation_loss(logits, teacher_logits)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            bar.update(1)
            if step % p.eval_every == 0 or step == steps:
                ev = heldout_loss(model, heldout, p, device)
                log["evals"].append({"step": step, "train_loss": round(loss.item(), 4), "heldout_loss": round(ev, 4)})
                bar.write(f"{name} step {step}: train loss {loss.item():.3f}, held-out loss {ev:.3f}")
            if time.perf_counter() - last_save > 300:
                log["seconds"] += time.perf_counter() - started
                started = last_save = time.perf_counter()
                save()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        bar.close()
    log["seconds"] += time.perf_counter() - started
    log["tokens_per_s"] = round(step * p.batch * p.seq_len / max(log["seconds"], 1e-9), 1)
    save()
    if interrupted:
        raise SystemExit(f"{name}: stopped at step {step}/{steps}; run the same command again to resume.")
    return log


def draft_from_target(target: PreTrainedModel, layers: int) -> PreTrainedModel:
    """A draft of the target's own kind and width that starts as its embedding, first `layers` decoder
    layers and head: it begins where the target's early layers already are, so distillation needs
    fewer steps to agree with it. Works for any model whose layers live under model.layers."""
    if layers >= target.config.num_hidden_layers:
        raise ValueError(f"a draft needs fewer layers than the target's {target.config.num_hidden_layers}; got {layers}")
    draft = type(target)(shallow_config(target.config, layers))
    state = {k: v for k, v in target.state_dict().items() if not k.startswith("model.layers.")
             or int(k.split(".")[2]) < layers}
    missing, _ = draft.load_state_dict(state, strict=False)
    if missing:
        raise ValueError(f"could not copy the target's weights into the draft (missing {missing[:3]}...): "
                         "draft_from_target expects a decoder whose layers are model.layers.N")
    return draft.to(next(target.parameters()).device, torch.float32)


def export(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, path: Path) -> None:
    """Hugging Face format, half precision: loads with AutoModelForCausalLM.from_pretrained(path)."""
    model.to(torch.float16).save_pretrained(path)
    tokenizer.save_pretrained(path)
    model.to(torch.float32)


# ---------------------------------------------------------------- the commands
def resolve_preset(preset: str, overrides: dict) -> Preset:
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {sorted(PRESETS)}")
    return Preset(**{**asdict(PRESETS[preset]), **{k: v for k, v in overrides.items() if v is not None}})


def hardware(dev: torch.device) -> str:
    """What a training record or a timed choice ran on: the GPU, or the CPU's model name (timings, and
    the settings chosen from them, differ between CPUs of one architecture: chapter 8.7) and threads."""
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    if dev.type != "cpu":
        return str(dev)
    from speclab.devices import cpu_name
    return f"{cpu_name()} ({platform.machine()}), {torch.get_num_threads()} CPU threads"


def train_drafts(target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, train: torch.Tensor,
                 heldout: torch.Tensor, p: Preset, out: Path, dev: torch.device, seed: int,
                 deadline: float | None, amp: bool, plain_draft: bool) -> dict:
    """The target's continuations, a draft distilled from the target (initialised from its first
    layers), and optionally a plainly trained draft of the same shape for comparison."""
    target.eval().requires_grad_(False)
    report = {"draft_layers": p.draft_layers}
    generated = generate_continuations(target, train, p, out, dev, seed + 3, deadline)
    report["generated"] = {"sequences": len(generated), "prompt_tokens": p.prompt_len,
                           "share_of_distillation_rows": p.generated_share}
    torch.manual_seed(seed + 1)
    draft = draft_from_target(target, p.draft_layers)
    report["draft"] = train_stage("draft", draft, train, heldout, p, p.draft_steps, out, dev, seed + 1,
                                  teacher=target, deadline=deadline, amp=amp, generated=generated)
    export(draft, tokenizer, out / "draft")
    if plain_draft:
        torch.manual_seed(seed + 2)
        plain = type(target)(shallow_config(target.config, p.draft_layers)).to(dev)
        report["draft_plain"] = train_stage("draft-plain", plain, train, heldout, p, p.draft_steps, out, dev,
                                            seed + 1, deadline=deadline, amp=amp)
        export(plain, tokenizer, out / "draft-plain")
    return report


def train_pair(out: Path, preset: str = "stdlib", device: str | None = None, seed: int = 0,
               stop_after_minutes: float | None = None, plain_draft: bool = True, amp: bool | None = None,
               **overrides) -> dict:
    """Tokenizer, target (cross-entropy), distilled draft and, for comparison, a plainly trained
    draft of the same shape. Writes out/{target,draft,draft-plain}/ and out/training.json."""
    p = resolve_preset(preset, overrides)
    out.mkdir(parents=True, exist_ok=True)
    dev = pick_device(device)
    torch.manual_seed(seed)
    deadline = time.time() + 60 * stop_after_minutes if stop_after_minutes else None
    amp = bf16_autocast_supported(dev) if amp is None else amp
    tokenizer, train, heldout = prepare_data(out, p)
    report = {"preset": asdict(p), "device": str(dev), "torch": torch.__version__, "seed": seed, "bf16_autocast": amp,
              "train_tokens": len(train), "heldout_tokens": len(heldout)}
    print(f"corpus: {len(train):,} training tokens, {len(heldout):,} held-out tokens; device {dev}, bf16 autocast {amp}")

    target = LlamaForCausalLM(llama_config(p, p.target_layers)).to(dev)
    report["target"] = train_stage("target", target, train, heldout, p, p.target_steps, out, dev, seed,
                                   deadline=deadline, amp=amp)
    export(target, tokenizer, out / "target")
    report.update(train_drafts(target, tokenizer, train, heldout, p, out, dev, seed, deadline, amp, plain_draft))
    report["hardware"] = hardware(dev)
    (out / "training.json").write_text(json.dumps(report, indent=1))
    return report


def train_draft(target_dir: str | Path, out: Path, preset: str = "stdlib", device: str | None = None, seed: int = 0,
                stop_after_minutes: float | None = None, plain_draft: bool = True, amp: bool | None = None,
                **overrides) -> dict:
    """A draft (and a plain comparison draft) for an existing target: the bundled one, a local
    directory or a hub model, distilled on the standard library tokenized with the target's own
    tokenizer. Writes out/{draft,draft-plain}/ and out/training.json."""
    from speclab.models import load_model, load_tokenizer
    p = resolve_preset(preset, overrides)
    out.mkdir(parents=True, exist_ok=True)
    dev = pick_device(device)
    amp = bf16_autocast_supported(dev) if amp is None else amp
    deadline = time.time() + 60 * stop_after_minutes if stop_after_minutes else None
    tokenizer = load_tokenizer(target_dir)
    target = load_model(target_dir, dev, torch.float32)
    tokenizer, train, heldout = prepare_data(out, p, tokenizer)
    report = {"preset": asdict(p), "target_from": str(target_dir), "device": str(dev), "torch": torch.__version__,
              "seed": seed, "bf16_autocast": amp, "train_tokens": len(train), "heldout_tokens": len(heldout)}
    print(f"target {target_dir}; corpus: {len(train):,} training tokens; device {dev}, bf16 autocast {amp}")
    report.update(train_drafts(target, tokenizer, train, heldout, p, out, dev, seed, deadline, amp, plain_draft))
    report["hardware"] = hardware(dev)
    (out / "training.json").write_text(json.dumps(report, indent=1))
    return report


# ---------------------------------------------------------------- Medusa heads for a frozen target
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


@torch.inference_mode()
def target_features(target: PreTrainedModel, rows: torch.Tensor, device: torch.device, chunk: int = 16,
                    layers: Sequence[int] = (-1,)) -> torch.Tensor:
    """The target's hidden states at every position of every row, float16 on the CPU: computed once,
    reused by every training step. `layers` index transformers' hidden_states (-1, the default: the
    last, after the final norm, what the lm_head reads); several are concatenated (n, T, len * H)."""
    out = []
    for i in range(0, len(rows), chunk):
        hidden = target(input_ids=rows[i:i + chunk].long().to(device), output_hidden_states=True).hidden_states
        out.append(torch.cat([hidden[layer] for layer in layers], dim=-1).to("cpu", torch.float16))
    return torch.cat(out)


def medusa_loss(heads: torch.nn.Module, lm_head: torch.nn.Module, h: torch.Tensor, decay: float
                ) -> tuple[torch.Tensor, list[float]]:
    """Self-distillation: head i at position t learns the target's own distribution for token t+2+i,
    softmax(lm_head(h[t+1+i])), read off the stored features (Medusa-2's self-distillation, with the
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


def eagle_predict(head: torch.nn.Module, embed: torch.nn.Module, tokens: torch.Tensor, h: torch.Tensor,
                  noise: float = 0.0, generator: torch.Generator | None = None) -> torch.Tensor:
    """The head's outputs (B, T-1, H) for rows `tokens` (B, T) with the target's features h (B, T, H),
    teacher-forced: from pair (f_t, x_{t+1}) it predicts f_{t+1}. `noise`: U(-noise, noise) added to
    the input features."""
    inputs = h[:, :-1].float()
    if noise:
        inputs = inputs + (torch.rand(inputs.shape, generator=generator, device=inputs.device) * 2 - 1) * noise
    return head(embed(tokens[:, 1:].to(h.device)), inputs)


def unroll_mask(n: int, step: int, dtype: torch.dtype, device: torch.device | str = "cpu") -> torch.Tensor:
    """The additive mask (1, 1, n, n * (step + 1)) of unrolled step `step` over the head's cache, which
    holds the step-0 rows of anchors 0..n-1 and then each later step's n rows: the row of anchor t
    sees the step-0 rows of anchors <= t (the true prefix) and its own rows of steps 1..step (its
    chain of drafts), exactly what it sees when drafting step `step` after true pair t."""
    visible = torch.cat([torch.ones(n, n, dtype=torch.bool).tril()] + [torch.eye(n, dtype=torch.bool)] * step, dim=1)
    mask = torch.zeros(visible.shape, dtype=dtype).masked_fill_(~visible, torch.finfo(dtype).min)
    return mask[None, None].to(device)


def unroll(head: torch.nn.Module, embed: torch.nn.Module, tokens: torch.Tensor, first: torch.Tensor,
           steps: int) -> list[torch.Tensor]:
    """The head drafting `steps` steps on its own outputs from every true pair at once: the
    training-time test of EAGLE-3 (Li et al. 2025), and the measure of how a head does at depth.
    tokens (B, T); first (B, T-1, H): the first step's input feature of pair t (head.fuse of what the
    target hands over). Returns [h_0, ..., h_{steps-1}], h_j (B, n, H) with n = T - steps: h_j[:, t]
    is the head's output after j steps from true pair t, fed the true tokens x_{t+1..t+1+j} and its
    own outputs; the lm_head reads from it the distribution of x_{t+j+2}."""
    batch, length = tokens.shape
    n = length - steps
    if n < 1:
        raise ValueError(f"rows of {length} tokens are too short to unroll {steps} steps")
    cache, g, outputs = head.new_cache(), first[:, :n], []
    for j in range(steps):
        positions = (torch.arange(n, device=first.device) + j).expand(batch, n)
        g = head(embed(tokens[:, 1 + j:1 + j + n].to(first.device)), g, cache,
                 attention_mask=unroll_mask(n, j, head.dtype, first.device).expand(batch, -1, -1, -1),
                 position_ids=positions)
        outputs.append(g)
    return outputs


def soft_cross_entropy(logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of softmax(logits) against the target's own distribution softmax(teacher_logits)."""
    teacher = torch.softmax(teacher_logits.detach().float(), -1)
    return -(teacher * torch.log_softmax(logits.float(), -1)).sum(-1).mean()


def eagle3_loss(head: torch.nn.Module, embed: torch.nn.Module, lm_head: torch.nn.Module, tokens: torch.Tensor,
                layer_h: torch.Tensor, final_h: torch.Tensor, steps: int = 4, decay: float = 0.8
                ) -> tuple[torch.Tensor, list[float]]:
    """EAGLE-3's loss (Li et al. 2025): the head unrolled `steps` steps on its own outputs (`unroll`,
    the training-time test), step j's cross-entropy against the target's distribution of the token
    it drafts weighted decay ** j; no feature loss. layer_h (B, T, 3H): the fused layers' hidden
    states; final_h (B, T, H): the target's last features, whose lm_head rows are the teacher.
    Returns the loss and each step's cross-entropy."""
    outputs = unroll(head, embed, tokens, head.fuse(layer_h[:, :-1].float()), steps)
    n = tokens.shape[1] - steps
    total, per_step = 0.0, []
    with torch.no_grad():
        teacher = lm_head(final_h.float())
    for j, h in enumerate(outputs):
        ce = soft_cross_entropy(lm_head(head.logits_input(h)), teacher[:, 1 + j:1 + j + n])
        total = total + decay ** j * ce
        per_step.append(ce.item())
    return total, per_step


@torch.no_grad()
def unrolled_accuracy(head: torch.nn.Module, embed: torch.nn.Module, lm_head: torch.nn.Module, tokens: torch.Tensor,
                      inputs: torch.Tensor, final_h: torch.Tensor, steps: int) -> list[float]:
    """acc[j]: how often the head, j steps into drafting on its own outputs (fed the true tokens),
    names the target's own greedy token: the chance draft j + 1 is accepted given the earlier ones
    were, under greedy decoding. inputs: what the target hands over (final_h for EAGLE-1, the fused
    layers' hidden states for EAGLE-3)."""
    outputs = unroll(head, embed, tokens, head.fuse(inputs[:, :-1].float()), steps)
    n = tokens.shape[1] - steps
    truth = lm_head(final_h.float()).argmax(-1)
    return [round(float((lm_head(head.logits_input(h)).argmax(-1) == truth[:, 1 + j:1 + j + n]).float().mean()), 4)
            for j, h in enumerate(outputs)]


def eagle_loss(head: torch.nn.Module, embed: torch.nn.Module, lm_head: torch.nn.Module, tokens: torch.Tensor,
               h: torch.Tensor, noise: float = 0.1, ce_weight: float = 0.1,
               generator: torch.Generator | None = None, inputs: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, float, float]:
    """EAGLE-1's loss (Li et al. 2024): smooth L1 from the predicted to the true next feature, plus
    ce_weight times the cross-entropy of lm_head(prediction) against the target's own distribution
    lm_head(f_{t+1}) (the token after x_{t+1}). The noise on the input features teaches the head to
    draft on from its own imperfect predictions. `inputs`: the features the head reads, when they
    differ from the features it must predict (h). Returns (loss, feature loss, cross-entropy)."""
    predicted = eagle_predict(head, embed, tokens, h if inputs is None else inputs, noise, generator)
    truth = h[:, 1:].float()
    feature_loss = torch.nn.functional.smooth_l1_loss(predicted, truth)
    ce = soft_cross_entropy(lm_head(predicted), lm_head(truth))
    return feature_loss + ce_weight * ce, feature_loss.item(), ce.item()


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
    from speclab.methods.medusa import MedusaHeads
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


EAGLE_INPUTS = ("feature+token", "feature", "token")


class ZeroEmbedding(torch.nn.Module):
    """An embedding that hides the token: zeros of the embedding's width (the "feature" ablation)."""

    def __init__(self, embed: torch.nn.Module):
        super().__init__()
        self.embed = embed

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(self.embed(ids))


def quick_eagle(target: PreTrainedModel, rows: torch.Tensor, steps: int, inputs: str = "feature+token",
                heldout: torch.Tensor | None = None, batch: int = 4, lr: float = 1e-3, seed: int = 0,
                eval_every: int = 0) -> tuple[torch.nn.Module, list[list[float]], list[tuple[int, float]]]:
    """A short, in-memory EAGLE-1 training on token `rows` (n, T), for watching a head learn (chapter
    8); `train eagle` makes the real head. `inputs` is the EAGLE paper's ablation of what the head
    reads: "feature+token" (EAGLE: the feature and the token that follows it), "feature" (the
    features alone: the head must guess which token was sampled) or "token" (the tokens alone: a
    one-layer draft model on the target's embeddings). Returns the head, [feature loss, ce] at every
    step, and (step, held-out top-1) every eval_every steps when `heldout` rows are given."""
    if inputs not in EAGLE_INPUTS:
        raise ValueError(f"inputs must be one of {EAGLE_INPUTS}, got {inputs!r}")
    from speclab.methods.eagle import EagleHead
    device = next(target.parameters()).device
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    features = target_features(target, rows, device)
    held_h = target_features(target, heldout, device).float() if heldout is not None else None
    torch.manual_seed(seed)
    head = EagleHead.for_target(target)
    opt = torch.optim.AdamW(head.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    token_embed = embed if inputs != "feature" else ZeroEmbedding(embed)
    g = torch.Generator().manual_seed(seed)
    losses, accuracy = [], []

    def held_out_top1() -> float:
        seen = held_h if inputs != "token" else torch.zeros_like(held_h)
        predicted = eagle_predict(head, token_embed, heldout.long().to(device), seen)
        truth = lm_head(held_h[:, 1:]).argmax(-1)
        return float((lm_head(predicted).argmax(-1) == truth).float().mean())

    with torch.enable_grad():
        for step in range(steps):
            if heldout is not None and eval_every and step % eval_every == 0:
                with torch.no_grad():
                    accuracy.append((step, held_out_top1()))
            pick = torch.randint(0, len(features), (batch,), generator=g)
            h = features[pick].to(device, torch.float32)
            seen = h if inputs != "token" else torch.zeros_like(h)
            loss, feature_loss, ce = eagle_loss(head, token_embed, lm_head, rows[pick].long().to(device), h,
                                                noise=0.0, inputs=seen)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append([feature_loss, ce])
    if heldout is not None and eval_every:
        with torch.no_grad():
            accuracy.append((steps, held_out_top1()))
    return head.eval(), losses, accuracy


def cached_features(target: PreTrainedModel, target_dir: str | Path, out: Path, data: str, m, dev: torch.device,
                    seed: int, deadline: float | None = None) -> dict:
    """The frozen target's features over its training rows, computed once into out/features.pt and
    reused by every head trained on them (Medusa, EAGLE): m.corpus_rows standard-library windows and
    m.generated of the target's own continuations (m.seq_len tokens each), and m.heldout_rows held-out
    windows. Returns {"train", "heldout": features (n, T, H) float16; "train_rows", "heldout_rows":
    the token ids (n, T); "seconds", "rows"}."""
    from speclab.models import load_tokenizer
    data_preset = resolve_preset(data, dict(seq_len=m.seq_len, generated=m.generated, prompt_len=m.prompt_len))
    _, train, heldout = prepare_data(out, data_preset, load_tokenizer(target_dir))
    features_file = out / "features.pt"
    features = torch.load(features_file) if features_file.exists() else None
    wanted = m.corpus_rows + m.generated
    if features is not None and features.get("rows") != wanted:
        # Another head in this folder was trained on other rows (a different --generated): rebuild
        # rather than train this one on rows its preset did not ask for.
        print(f"{features_file} holds {features.get('rows')} rows, this preset asks for {wanted}: recomputing")
        features = None
    if features is not None and "train_rows" in features:
        return features
    generated = generate_continuations(target, train, data_preset, out, dev, seed + 3, deadline)
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(train) - m.seq_len, (m.corpus_rows,), generator=g).tolist()
    rows = torch.cat([torch.stack([train[s:s + m.seq_len] for s in starts]), generated[:, :m.seq_len]])
    held_starts = torch.linspace(0, len(heldout) - m.seq_len - 1, m.heldout_rows).long().tolist()
    held = torch.stack([heldout[s:s + m.seq_len] for s in held_starts])
    if features is None:  # (files from before rows were kept only lack the rows, rebuilt above)
        started = time.perf_counter()
        features = {"train": target_features(target, rows, dev), "heldout": target_features(target, held, dev),
                    "seconds": time.perf_counter() - started, "rows": len(rows)}
    features.update(train_rows=rows.to(torch.int32), heldout_rows=held.to(torch.int32))
    torch.save(features, features_file)
    return features


def check_resumed_rows(log: dict, features: dict, ckpt_file: Path) -> None:
    """Refuse to resume a checkpoint trained on other rows than the cached features now hold (a run
    restarted with another --generated in the same folder), instead of mixing two datasets."""
    if log.get("rows", features["rows"]) != features["rows"]:
        raise ValueError(f"{ckpt_file} was trained on {log['rows']} rows, but this run's data has {features['rows']}: "
                         f"pass the same --generated as before to resume, or delete {ckpt_file} (or use another "
                         "--out) to start over")


def train_medusa(target_dir: str | Path, out: Path, preset: str = "stdlib", device: str | None = None, seed: int = 0,
                 stop_after_minutes: float | None = None, **overrides) -> dict:
    """Medusa heads for a frozen target (the bundled one, a local directory or a hub model), trained on
    its hidden states over standard-library windows and over its own continuations. Resumable.
    Writes out/medusa/ (heads and config) and out/medusa.json (the record: loss curve, accuracies)."""
    from speclab.methods.medusa import MedusaHeads
    from speclab.models import load_model
    if preset not in MEDUSA_PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {sorted(MEDUSA_PRESETS)}")
    m = MedusaPreset(**{**asdict(MEDUSA_PRESETS[preset]), **{k: v for k, v in overrides.items() if v is not None}})
    out.mkdir(parents=True, exist_ok=True)
    dev = pick_device(device)
    deadline = time.time() + 60 * stop_after_minutes if stop_after_minutes else None
    target = load_model(target_dir, dev, torch.float32).requires_grad_(False)
    lm_head = target.get_output_embeddings()
    features = cached_features(target, target_dir, out, "micro" if preset == "micro" else "stdlib", m, dev, seed,
                               deadline)
    train_h, held_h = features["train"], features["heldout"].to(dev, torch.float32)

    torch.manual_seed(seed)
    heads = MedusaHeads.for_target(target, m.num_heads, m.num_layers)
    opt = torch.optim.AdamW(heads.parameters(), lr=m.lr, betas=(0.9, 0.95), weight_decay=0.0)
    ckpt_file = out / "medusa.ckpt"
    step, log = 0, {"evals": [], "seconds": 0.0, "feature_seconds": features["seconds"], "rows": features["rows"]}
    if ckpt_file.exists():
        state = torch.load(ckpt_file, map_location=dev)
        check_resumed_rows(state["log"], features, ckpt_file)
        heads.load_state_dict(state["heads"])
        opt.load_state_dict(state["opt"])
        step, log = state["step"], state["log"]
    schedule = Preset(lr=m.lr, warmup=m.warmup)

    def evaluate() -> None:
        heads.eval()
        with torch.no_grad():
            loss, per_head = medusa_loss(heads, lm_head, held_h, m.decay)
        top1 = [row[0] for row in head_accuracies(heads, lm_head, held_h, 1)]
        log["evals"].append({"step": step, "heldout_loss": round(float(loss), 4),
                             "heldout_head_loss": [round(x, 4) for x in per_head], "heldout_top1": top1})
        heads.train()

    if not log["evals"]:
        evaluate()  # step 0: every head is a copy of lm_head, predicting the next token instead
    bar = tqdm(total=m.steps, initial=step, desc="medusa", mininterval=5)
    started, last_save = time.perf_counter(), time.perf_counter()
    heads.train()
    try:
        while step < m.steps:
            if deadline is not None and time.time() > deadline:
                break
            g = torch.Generator().manual_seed(seed * 1_000_003 + step)
            h = train_h[torch.randint(0, len(train_h), (m.batch,), generator=g)].to(dev, torch.float32)
            loss = medusa_step(heads, lm_head, opt, h, lr_at(step, schedule, m.steps), m.decay)
            step += 1
            bar.update(1)
            log.setdefault("train", []).append([step, round(loss, 4)])
            if step % m.eval_every == 0 or step == m.steps:
                evaluate()
                last = log["evals"][-1]
                bar.write(f"medusa step {step}: held-out loss {last['heldout_loss']:.3f}, top-1 {last['heldout_top1']}")
            if time.perf_counter() - last_save > 120:
                log["seconds"] += time.perf_counter() - started
                started = last_save = time.perf_counter()
                torch.save({"heads": heads.state_dict(), "opt": opt.state_dict(), "step": step, "log": log}, ckpt_file)
    except KeyboardInterrupt:
        pass
    finally:
        bar.close()
    log["seconds"] += time.perf_counter() - started
    torch.save({"heads": heads.state_dict(), "opt": opt.state_dict(), "step": step, "log": log}, ckpt_file)
    if step < m.steps:
        raise SystemExit(f"medusa: stopped at step {step}/{m.steps}; run the same command again to resume.")
    heads.eval()
    report = {"preset": asdict(m), "target_from": str(target_dir), "device": str(dev), "hardware": hardware(dev),
              "torch": torch.__version__, "seed": seed, "training_rows": features["rows"],
              "parameters": sum(p.numel() for p in heads.parameters()), "log": log,
              "accuracy": head_accuracies(heads, lm_head, held_h, m.ranks)}
    heads.save(out / "medusa")
    (out / "medusa" / "record.json").write_text(json.dumps(report, indent=1))
    return report


@dataclass
class EaglePreset:
    corpus_rows: int = 1024   # the corpus windows of Medusa's rows (out/features.pt is shared when all rows agree)
    # The target's own continuations, half greedy, half sampled: the text the head drafts in at decode time.
    # 1024 of them and 12000 steps, against 128 and 6000, lifted the EAGLE-1 head from 5.33 to 6.65 tokens a pass
    # (a 10-deep chain, held-out code prompts; not measured apart: chapter 8.3). The shipped EAGLE-3 head and MTP
    # module were trained on the same rows (their records).
    generated: int = 1024
    heldout_rows: int = 64
    seq_len: int = 256
    prompt_len: int = 64
    batch: int = 8
    steps: int = 12000       # EAGLE-1: 29 min on 2 CPU threads, the features computed once beforehand
    eagle3_steps: int = 4000  # EAGLE-3: each step unrolls ttt_steps head passes (0.53 s a step here)
    mtp_steps: int = 3000     # MTP: one head pass a step, trained one step deep
    lr: float = 1e-3
    warmup: int = 50
    noise: float = 0.1        # U(-noise, noise) on the input features (Li et al. 2024); EAGLE-1 only
    ce_weight: float = 0.1    # EAGLE-1 only: EAGLE-3 has the cross-entropy alone
    clip: float = 0.5         # gradient norm clip, as in the reference recipe
    eval_every: int = 100
    ttt_steps: int = 4        # EAGLE-3: steps the head is unrolled on its own outputs in training
    decay: float = 0.8        # EAGLE-3: weight of unrolled step j is decay ** j
    eval_depth: int = 6       # steps of the held-out unrolled accuracy (acceptance by draft position)
    # EAGLE-2's settings, chosen by timing after training (choose_eagle_tree): how many prompts of the tuning
    # set (held-out code prompts speclab bench never times; at most 8), new tokens each, and timed repeats.
    # Four prompts picked a setting that gained 25% tokens a pass on them and 6% on the bench's prompts:
    # eight make the choice steadier.
    tree_prompts: int = 8
    tree_tokens: int = 128
    tree_repeats: int = 3


EAGLE_PRESETS = {
    "stdlib": EaglePreset(),
    "micro": EaglePreset(corpus_rows=16, generated=4, heldout_rows=4, seq_len=32, prompt_len=8, batch=4, steps=6,
                         eagle3_steps=6, mtp_steps=6, warmup=2, eval_every=3, ttt_steps=2, eval_depth=3,
                         tree_prompts=1, tree_tokens=8, tree_repeats=1),
}


def eagle3_features(target: PreTrainedModel, out: Path, features: dict, layers: Sequence[int], dev: torch.device
                    ) -> dict:
    """The fused layers' hidden states over the same rows as `features` (cached_features), computed
    once into out/features_layers.pt: {"train", "heldout": (n, T, len(layers) * H) float16, "layers"}."""
    path = out / "features_layers.pt"
    cached = torch.load(path) if path.exists() else None
    if cached is not None and cached["layers"] == list(layers) and len(cached["train"]) == len(features["train_rows"]):
        return cached
    started = time.perf_counter()
    cached = {"train": target_features(target, features["train_rows"], dev, layers=layers),
              "heldout": target_features(target, features["heldout_rows"], dev, layers=layers),
              "layers": list(layers)}
    cached["seconds"] = time.perf_counter() - started
    torch.save(cached, path)
    return cached


def train_eagle(target_dir: str | Path, out: Path, preset: str = "stdlib", device: str | None = None, seed: int = 0,
                stop_after_minutes: float | None = None, version: int = 1, inputs: str = "feature+token",
                **overrides) -> dict:
    """An EAGLE head for a frozen Llama-family target, trained on the target's features over
    standard-library windows and its own continuations (cached_features: shared with Medusa when the
    rows agree).
    version 1 (train eagle): EAGLE-1's feature regression plus 0.1 x cross-entropy, noisy inputs.
    version 3 (train eagle3): EAGLE-3's fused low/middle/high layers and the training-time test
    (eagle3_loss). Resumable. Writes out/eagle/ or out/eagle3/ (head, config and record.json: loss
    curves, held-out accuracy, and accuracy by draft position). `inputs` (EAGLE-1 only): the EAGLE
    paper's ablation of what the head reads (see quick_eagle); "feature" or "token" train a head
    that is only measured, written to out/eagle-feature/ or out/eagle-token/.
    version "mtp" (train mtp): DeepSeek-V3's MTP module (speclab.methods.mtp) on the target's last features,
    trained one step deep (eagle3_loss with one step: the cross-entropy against the target's
    distribution of the token two ahead), written to out/mtp/; its record's accuracy by draft
    position measures what chaining it costs."""
    from speclab.methods.eagle import EagleHead, eagle3_layers
    from speclab.models import load_model
    from speclab.methods.mtp import MtpModule
    if preset not in EAGLE_PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {sorted(EAGLE_PRESETS)}")
    if version not in (1, 3, "mtp"):
        raise ValueError(f"version must be 1, 3 (EAGLE) or 'mtp', got {version!r}")
    if inputs not in EAGLE_INPUTS or (version != 1 and inputs != "feature+token"):
        raise ValueError(f"inputs must be one of {EAGLE_INPUTS} (EAGLE-1 only), got {inputs!r}")
    m = EaglePreset(**{**asdict(EAGLE_PRESETS[preset]), **{k: v for k, v in overrides.items() if v is not None}})
    if version != 1 and overrides.get("steps") is None:
        m.steps = m.eagle3_steps if version == 3 else m.mtp_steps
    if version == "mtp":
        m.ttt_steps = 1   # DeepSeek-V3 trains its module one step deep
    name = {3: "eagle3", "mtp": "mtp"}.get(version) or ("eagle" if inputs == "feature+token" else f"eagle-{inputs}")
    if inputs != "feature+token":
        m.eval_depth = 1  # a head that never read its own outputs is measured one step deep
    out.mkdir(parents=True, exist_ok=True)
    dev = pick_device(device)
    deadline = time.time() + 60 * stop_after_minutes if stop_after_minutes else None
    target = load_model(target_dir, dev, torch.float32).requires_grad_(False)
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    features = cached_features(target, target_dir, out, "micro" if preset == "micro" else "stdlib", m, dev, seed,
                               deadline)
    train_h, train_rows = features["train"], features["train_rows"].long()
    held_h, held_rows = features["heldout"].to(dev, torch.float32), features["heldout_rows"].long().to(dev)
    feature_seconds = features["seconds"]
    if version == 3:  # the inputs are the fused layers; the last features stay the teacher
        layered = eagle3_features(target, out, features, eagle3_layers(target.config.num_hidden_layers), dev)
        train_in, held_in = layered["train"], layered["heldout"].to(dev, torch.float32)
        feature_seconds += layered["seconds"]
    else:
        train_in, held_in = train_h, held_h

    if inputs == "feature":  # the ablation: the head does not see the token that follows the feature
        embed = ZeroEmbedding(embed)
    torch.manual_seed(seed)
    head = MtpModule.for_target(target) if version == "mtp" else EagleHead.for_target(target, version)
    opt = torch.optim.AdamW(head.parameters(), lr=m.lr, betas=(0.9, 0.95), weight_decay=0.0)
    ckpt_file = out / f"{name}.ckpt"
    step, log = 0, {"evals": [], "seconds": 0.0, "feature_seconds": feature_seconds, "rows": features["rows"]}
    if ckpt_file.exists():
        state = torch.load(ckpt_file, map_location=dev)
        check_resumed_rows(state["log"], features, ckpt_file)
        head.load_state_dict(state["head"])
        opt.load_state_dict(state["opt"])
        step, log = state["step"], state["log"]
    schedule = Preset(lr=m.lr, warmup=m.warmup)

    def seen(features: torch.Tensor) -> torch.Tensor:  # the ablation without features reads zeros
        return torch.zeros_like(features) if inputs == "token" else features

    def loss_of(rows, layer_in, final, g=None) -> tuple[torch.Tensor, list[float]]:
        if version == 1:
            loss, feature_loss, ce = eagle_loss(head, embed, lm_head, rows, final, m.noise if g else 0.0,
                                                m.ce_weight, g, inputs=seen(final))
            return loss, [round(feature_loss, 4), round(ce, 4)]
        loss, per_step = eagle3_loss(head, embed, lm_head, rows, layer_in, final, m.ttt_steps, m.decay)
        return loss, [round(x, 4) for x in per_step]

    def evaluate() -> None:
        head.eval()
        with torch.no_grad():
            loss, parts = loss_of(held_rows, held_in, held_h)
        by_position = unrolled_accuracy(head, embed, lm_head, held_rows, seen(held_in), held_h, m.eval_depth)
        entry = {"step": step, "heldout_loss": round(float(loss), 4), "heldout_top1": by_position[0],
                 "heldout_top1_by_step": by_position}
        if version == 1:
            entry.update(heldout_feature_loss=parts[0], heldout_ce=parts[1])
        else:
            entry.update(heldout_ce_by_step=parts)
        log["evals"].append(entry)
        head.train()

    if not log["evals"]:
        evaluate()
    bar = tqdm(total=m.steps, initial=step, desc=name, mininterval=5)
    started, last_save = time.perf_counter(), time.perf_counter()
    head.train()
    try:
        while step < m.steps:
            if deadline is not None and time.time() > deadline:
                break
            g = torch.Generator().manual_seed(seed * 1_000_003 + step)
            pick = torch.randint(0, len(train_h), (m.batch,), generator=g)
            for group in opt.param_groups:
                group["lr"] = lr_at(step, schedule, m.steps)
            loss, parts = loss_of(train_rows[pick].to(dev), train_in[pick].to(dev, torch.float32),
                                  train_h[pick].to(dev, torch.float32), g)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), m.clip)
            opt.step()
            step += 1
            bar.update(1)
            log.setdefault("train", []).append([step, *parts])
            if step % m.eval_every == 0 or step == m.steps:
                evaluate()
                last = log["evals"][-1]
                bar.write(f"{name} step {step}: held-out loss {last['heldout_loss']:.4f}, top-1 by draft position "
                          f"{last['heldout_top1_by_step']}")
            if time.perf_counter() - last_save > 120:
                log["seconds"] += time.perf_counter() - started
                started = last_save = time.perf_counter()
                torch.save({"head": head.state_dict(), "opt": opt.state_dict(), "step": step, "log": log}, ckpt_file)
    except KeyboardInterrupt:
        pass
    finally:
        bar.close()
    log["seconds"] += time.perf_counter() - started
    torch.save({"head": head.state_dict(), "opt": opt.state_dict(), "step": step, "log": log}, ckpt_file)
    if step < m.steps:
        raise SystemExit(f"{name}: stopped at step {step}/{m.steps}; run the same command again to resume.")
    head.eval()
    report = {"version": version, "method": name, "inputs": inputs, "preset": asdict(m), "target_from": str(target_dir), "device": str(dev),
              "hardware": hardware(dev), "torch": torch.__version__, "seed": seed, "training_rows": features["rows"],
              "feature_layers": list(head.feature_layers), "parameters": sum(p.numel() for p in head.parameters()),
              "log": log}
    head.save(out / name)
    (out / name / "record.json").write_text(json.dumps(report, indent=1))
    return report


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


def train_exit(target_dir: str | Path, out: Path, exit_layers: Sequence[int] | None = None, preset: str = "stdlib",
               device: str | None = None, seed: int = 0, **overrides) -> dict:
    """An exit adapter (speclab.methods.layer_skip.ExitAdapter) for each exit layer of a frozen Llama-family
    target: trained so that the exit's distribution matches the final layer's (soft cross-entropy
    against the target's own distribution, on its hidden states over the cached rows). Resumable per
    layer. Writes out/exit/ (the adapters, one file) with record.json: for each layer, held-out top-1
    agreement with the target without and with its adapter, and the loss curve."""
    from speclab.methods.layer_skip import ExitAdapter, check_exit_layer, save_adapters
    from speclab.models import load_model
    if preset not in EXIT_PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {sorted(EXIT_PRESETS)}")
    m = ExitPreset(**{**asdict(EXIT_PRESETS[preset]), **{k: v for k, v in overrides.items() if v is not None}})
    out.mkdir(parents=True, exist_ok=True)
    dev = pick_device(device)
    target = load_model(target_dir, dev, torch.float32).requires_grad_(False)
    num_layers = target.config.num_hidden_layers
    layers = sorted({check_exit_layer(target, int(e)) for e in (exit_layers or range(2, num_layers - 1, 2))})
    features = cached_features(target, target_dir, out, "micro" if preset == "micro" else "stdlib", m, dev, seed)
    path = out / "features_exit.pt"
    hidden = torch.load(path) if path.exists() else None
    if hidden is None or hidden["layers"] != layers or len(hidden["train"]) != len(features["train_rows"]):
        started = time.perf_counter()
        hidden = {"layers": layers,
                  "train": target_features(target, features["train_rows"], dev, layers=layers),
                  "heldout": target_features(target, features["heldout_rows"], dev, layers=layers)}
        hidden["seconds"] = time.perf_counter() - started
        torch.save(hidden, path)
    width = target.config.hidden_size
    ckpt_file = out / "exit.ckpt"
    state = torch.load(ckpt_file) if ckpt_file.exists() else {"adapters": {}, "record": {}}
    schedule = Preset(lr=m.lr, warmup=m.warmup)
    held_final = features["heldout"].to(dev, torch.float32)
    adapters = {}
    for i, layer in enumerate(layers):
        adapter = ExitAdapter(width).to(dev)
        if layer in state["adapters"]:
            adapter.load_state_dict(state["adapters"][layer])
            adapters[layer] = adapter.eval()
            continue
        started = time.perf_counter()
        opt = torch.optim.AdamW(adapter.parameters(), lr=m.lr, betas=(0.9, 0.95), weight_decay=0.0)
        held = hidden["heldout"][..., i * width:(i + 1) * width].to(dev, torch.float32)
        curve = []
        for step in tqdm(range(m.steps), desc=f"exit {layer}", mininterval=5):
            g = torch.Generator().manual_seed(seed * 1_000_003 + layer * 10_007 + step)
            pick = torch.randint(0, len(features["train"]), (m.batch,), generator=g)
            h = hidden["train"][pick][..., i * width:(i + 1) * width].to(dev, torch.float32)
            with torch.no_grad():
                teacher = target.get_output_embeddings()(features["train"][pick].to(dev, torch.float32))
            for group in opt.param_groups:
                group["lr"] = lr_at(step, schedule, m.steps)
            loss = soft_cross_entropy(exit_logits(target, h, adapter), teacher)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            curve.append(round(loss.item(), 4))
        adapter.eval()
        adapters[layer] = adapter
        state["adapters"][layer] = adapter.state_dict()
        state["record"][layer] = {"top1_plain": exit_agreement(target, held, held_final),
                                  "top1_adapter": exit_agreement(target, held, held_final, adapter),
                                  "loss": curve, "seconds": round(time.perf_counter() - started, 1)}
        torch.save(state, ckpt_file)
    report = {"preset": asdict(m), "target_from": str(target_dir), "device": str(dev), "hardware": hardware(dev),
              "torch": torch.__version__, "seed": seed, "layers_of_target": num_layers,
              "feature_seconds": round(hidden.get("seconds", 0.0), 1),
              "layers": {str(layer): state["record"][layer] for layer in layers}}
    save_adapters(adapters, target, out / "exit", report)
    return report


def install_eagle(out: Path, dest: Path | None = None, name: str = "eagle") -> Path:
    """Copy a trained EAGLE head (out/eagle/, or out/eagle3/ with name="eagle3") into the package, next
    to the bundled target."""
    from speclab.models import BUNDLED_DIR
    dest = (dest or BUNDLED_DIR) / name
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(out / name, dest)
    return dest


def choose_medusa_tree(target_dir: str | Path, heads_dir: Path, device: str | None = None) -> dict:
    """Pick the heads' default tree on this device: for each node budget, the tree with the most
    expected accepted tokens (from the heads' held-out accuracies), priced by a measured verify pass;
    the fastest modelled one wins. Writes heads_dir/tree.json, which load_drafter("medusa") reads."""
    from speclab.models import load_model
    from speclab.measure.profiling import tree_pass_costs
    from speclab.trees import best_tree, tree_from_accuracies
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


# (top_k, depth, total_tokens, min_confidence): chains of several depths (one-row head passes are the
# cheapest) and trees two or three wide, as published; and deeper ones that stop growing where the head
# is unsure (EagleDrafter's min_confidence)
EAGLE_TREE_CANDIDATES = ((1, 8, 8, None), (1, 10, 10, None), (1, 12, 12, None), (1, 14, 14, None), (1, 16, 16, None),
                         (2, 6, 12, None), (2, 8, 16, None), (2, 12, 16, None), (3, 6, 16, None),
                         (1, 20, 20, 0.1), (1, 24, 24, 0.05), (1, 24, 24, 0.1), (1, 24, 24, 0.2),
                         (2, 12, 16, 0.1))
# Sampled rounds (temperature 1): shorter chains, a stop, one tree. Point-mass trees two to eight wide ran
# at about 0.7x target-only sampled on the bundled target: each node is accepted only as often as the
# target draws that very token.
EAGLE_SAMPLED_CANDIDATES = ((1, 4, 4, None), (1, 6, 6, None), (1, 8, 8, None), (1, 12, 12, None),
                            (1, 12, 12, 0.1), (1, 20, 20, 0.1), (2, 6, 12, None))


def choose_eagle_tree(target_dir: str | Path, head_dir: Path, candidates=None, num_prompts: int = 8,
                      max_new_tokens: int = 128, repeats: int = 3, device: str | None = None,
                      temperature: float = 0.0) -> dict:
    """Pick EAGLE-2's settings for a head on this device by timing them: decoding of held-out code prompts
    with each (top_k, depth, total_tokens, min_confidence) and with target-only decoding, `repeats`
    times, interleaved prompt by prompt as `speclab bench` does (bench.time_interleaved); the setting
    with the best median speed wins. Greedy (temperature 0, EAGLE_TREE_CANDIDATES by default), every run
    must equal target-only's output; sampled (EAGLE_SAMPLED_CANDIDATES by default), prompt i is decoded
    with seed i by every method. The prompts are the first `num_prompts` of the tuning set
    (speclab.measure.workloads.tuning_prompts), which `speclab bench` never times: settings chosen on the
    prompts they are then measured on would flatter them. Writes head_dir/tree.json, which
    load_drafter("eagle" / "eagle3") reads for its defaults: the greedy choice at the top, the sampled
    one under "sampled" (each run keeps the other's entry); `train eagle` and `train eagle3` run both
    when training ends."""
    import statistics

    from speclab.measure.bench import time_interleaved
    from speclab.decoding import generate, speculative_generate
    from speclab.devices import timer
    from speclab.methods.eagle import TREE_SETTINGS, EagleDrafter, EagleHead, measured_settings
    from speclab.models import load_model, load_tokenizer
    from speclab.measure.workloads import TUNING, tuning_prompts
    dev = pick_device(device)
    target = load_model(target_dir, dev, torch.float32)
    tok = load_tokenizer(target_dir)
    room = target.config.max_position_embeddings - max_new_tokens  # a small model's context may be short
    prompts = [tok(p, return_tensors="pt").input_ids[0][-room:].to(dev)
               for p in tuning_prompts(num_prompts)]
    head = EagleHead.load(head_dir, device=dev)
    greedy = temperature == 0
    if candidates is None:
        candidates = EAGLE_TREE_CANDIDATES if greedy else EAGLE_SAMPLED_CANDIDATES
    sampling = dict(max_new_tokens=max_new_tokens, temperature=temperature)
    reference = [generate(target, p, **sampling).tokens.tolist() for p in prompts] if greedy else None

    drafters = {c: EagleDrafter(head, target, top_k=c[0], depth=c[1], total_tokens=c[2], min_confidence=c[3])
                for c in candidates}

    def decode(candidate, i: int):
        with timer(dev) as t:
            if candidate == "target-only":
                result = generate(target, prompts[i], seed=i, **sampling)
            else:
                result = speculative_generate(target, drafters[candidate], prompts[i], seed=i, **sampling)
        if candidate != "target-only" and greedy and result.tokens.tolist() != reference[i]:
            raise AssertionError(f"EAGLE-2 {candidate} changed the greedy output")
        return t["seconds"], result.stats

    timed = time_interleaved({c: partial(decode, c) for c in ("target-only", *candidates)}, len(prompts), repeats)
    seconds = {name: [total for total, _ in runs] for name, runs in timed.items()}
    per_pass = {c: sum(st.new_tokens for st in timed[c][-1][1]) / sum(st.rounds for st in timed[c][-1][1])
                for c in candidates}
    base = statistics.median(seconds["target-only"])
    table = [{**dict(zip(TREE_SETTINGS, c)), "tokens_per_pass": round(per_pass[c], 3),
              "speedup": round(base / statistics.median(seconds[c]), 3)} for c in candidates]
    best = max(table, key=lambda row: row["speedup"])
    choice = {**{name: best[name] for name in TREE_SETTINGS}, "table": table,
              "prompts": f"held-out code prompts {TUNING.start + 1}-{TUNING.start + num_prompts}", "max_new_tokens": max_new_tokens,
              "repeats": repeats, "temperature": temperature, "device": str(dev),
              "hardware": hardware(dev), "threads": torch.get_num_threads()}
    written = measured_settings(head_dir)
    if greedy:
        written = {**choice, **({"sampled": written["sampled"]} if "sampled" in written else {})}
    else:
        written["sampled"] = choice
    (head_dir / "tree.json").write_text(json.dumps(written, indent=1))
    return choice


def install_medusa(out: Path, dest: Path | None = None) -> Path:
    """Copy trained heads (out/medusa/: weights, record, chosen tree) into the package, next to the
    bundled target."""
    from speclab.models import BUNDLED_DIR
    dest = (dest or BUNDLED_DIR) / "medusa"
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(out / "medusa", dest)
    return dest


def install_pair(out: Path, dest: Path | None = None) -> Path:
    """Copy what a run trained (target/, draft/, draft-plain/) into the package, where load_pair() finds
    it, and merge its training.json into the package's: a draft-only run keeps the target's record."""
    from speclab.models import BUNDLED_DIR
    dest = dest or BUNDLED_DIR
    for name in ("target", "draft", "draft-plain"):
        if (out / name).exists():
            shutil.rmtree(dest / name, ignore_errors=True)
            shutil.copytree(out / name, dest / name)
    report = json.loads((out / "training.json").read_text())
    record = dest / "training.json"
    if "target_from" in report and record.exists():  # draft-only run: keep how the target was trained
        old = json.loads(record.read_text())
        report = {**report, "target": old["target"], "target_preset": old["preset"],
                  "target_device": old["device"], "target_hardware": old.get("hardware"),
                  "target_history": old.get("history")}
    record.write_text(json.dumps(report, indent=1))
    return dest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m speclab train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    pair = sub.add_parser("pair", help="train tokenizer, target and drafts (resumable)")
    draft = sub.add_parser("draft", help="train drafts for an existing target (resumable)")
    draft.add_argument("--target", required=True, help="target model: a local directory (the bundled one is "
                       "speclab/pairs/stdlib/target) or a hub id")
    for cmd in (pair, draft):
        cmd.add_argument("--out", type=Path, required=True, help="output folder (checkpoints and exported models)")
        cmd.add_argument("--preset", choices=sorted(PRESETS), default="stdlib")
        cmd.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
        cmd.add_argument("--seed", type=int, default=0)
        cmd.add_argument("--draft-steps", type=int, help="override the preset's draft steps")
        cmd.add_argument("--draft-layers", type=int, help="override the preset's draft depth")
        cmd.add_argument("--stop-after-minutes", type=float, help="checkpoint and stop after this long; rerun to resume")
        cmd.add_argument("--no-amp", action="store_true", help="train in fp32 even where bf16 autocast is supported")
        cmd.add_argument("--no-plain-draft", action="store_true", help="skip the plainly trained comparison draft")
        cmd.add_argument("--install", action="store_true", help="when done, copy the result into the package "
                         "(speclab/pairs/stdlib), where load_pair() finds it")
    pair.add_argument("--target-steps", type=int, help="override the preset's target steps")
    medusa = sub.add_parser("medusa", help="train Medusa heads for a frozen target (resumable)")
    medusa.add_argument("--target", required=True, help="target model: a local directory (the bundled one is "
                        "speclab/pairs/stdlib/target) or a hub id")
    medusa.add_argument("--out", type=Path, required=True, help="output folder (features, checkpoint, heads)")
    medusa.add_argument("--preset", choices=sorted(MEDUSA_PRESETS), default="stdlib")
    medusa.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    medusa.add_argument("--seed", type=int, default=0)
    medusa.add_argument("--heads", type=int, help="number of heads (default 4)")
    medusa.add_argument("--steps", type=int, help="override the preset's training steps")
    medusa.add_argument("--stop-after-minutes", type=float, help="checkpoint and stop after this long; rerun to resume")
    medusa.add_argument("--install", action="store_true", help="when done, copy the heads into the package "
                        "(speclab/pairs/stdlib/medusa), where load_drafter('medusa') finds them")
    for version, command in ((1, "eagle"), (3, "eagle3"), ("mtp", "mtp")):
        what = {1: "an EAGLE-1 head (feature regression)",
                3: "an EAGLE-3 head (fused low/middle/high layers, training-time test)",
                "mtp": "a DeepSeek-V3-style MTP module (one step deep, on the last features)"}[version]
        then = "" if version == "mtp" else "; then time EAGLE-2's settings with it and write the fastest to tree.json"
        eagle = sub.add_parser(command, help=f"train {what} for a frozen Llama-family target (resumable){then}")
        eagle.add_argument("--target", required=True, help="target model: a local directory (the bundled one is "
                           "speclab/pairs/stdlib/target) or a hub id")
        eagle.add_argument("--out", type=Path, required=True, help="output folder (features, checkpoint, head); "
                           "the folder of train medusa reuses its cached features")
        eagle.add_argument("--preset", choices=sorted(EAGLE_PRESETS), default="stdlib")
        eagle.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
        eagle.add_argument("--seed", type=int, default=0)
        eagle.add_argument("--steps", type=int, help="override the preset's training steps")
        eagle.add_argument("--generated", type=int, help="how many of the target's own continuations to train on "
                           f"besides the corpus rows (default {EAGLE_PRESETS['stdlib'].generated}; each shipped "
                           "head's record says what it was trained with)")
        if version == 3:
            eagle.add_argument("--ttt-steps", type=int, help="steps unrolled in training (default 4)")
        else:
            eagle.add_argument("--inputs", choices=EAGLE_INPUTS, default="feature+token", help="what the head "
                               "reads (the EAGLE paper's ablation; chapter 8): feature+token (EAGLE), or a head "
                               "that is only measured: feature (no token) or token (no feature)")
        eagle.add_argument("--stop-after-minutes", type=float, help="checkpoint and stop after this long; rerun to "
                           "resume")
        eagle.add_argument("--install", action="store_true", help=f"when done, copy the head into the package "
                           f"(speclab/pairs/stdlib/{command}), where load_drafter({command!r}) finds it")
    exit_ = sub.add_parser("exit", help="train layer-skip exit adapters (a tuned lens per exit layer) for a frozen "
                           "Llama-family target (resumable)")
    exit_.add_argument("--target", required=True, help="target model: a local directory (the bundled one is "
                       "speclab/pairs/stdlib/target) or a hub id")
    exit_.add_argument("--out", type=Path, required=True, help="output folder (features, checkpoint, adapters); the "
                       "folder of train medusa / eagle reuses its cached rows")
    exit_.add_argument("--exit-layers", default=None, help="comma-separated exit layers (default: every second "
                       "layer, 2 to L-2)")
    exit_.add_argument("--preset", choices=sorted(EXIT_PRESETS), default="stdlib")
    exit_.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    exit_.add_argument("--seed", type=int, default=0)
    exit_.add_argument("--steps", type=int, help="override the preset's steps per adapter")
    exit_.add_argument("--install", action="store_true", help="when done, copy the adapters into the package "
                       "(speclab/pairs/stdlib/exit), where load_drafter('layer_skip', adapter=True) finds them")
    args = parser.parse_args(argv)
    if args.command == "exit":
        layers = [int(x) for x in args.exit_layers.split(",")] if args.exit_layers else None
        report = train_exit(args.target, args.out, layers, preset=args.preset, device=args.device, seed=args.seed,
                            steps=args.steps)
        for layer, entry in report["layers"].items():
            print(f"exit after layer {layer}: held-out top-1 agreement with the target {entry['top1_plain']:.3f} "
                  f"without the adapter, {entry['top1_adapter']:.3f} with it")
        if args.install:
            print(f"installed into {install_eagle(args.out, name='exit')}")
        return
    if args.command in ("eagle", "eagle3", "mtp"):
        version = {"eagle": 1, "eagle3": 3, "mtp": "mtp"}[args.command]
        report = train_eagle(args.target, args.out, preset=args.preset, device=args.device, seed=args.seed,
                             stop_after_minutes=args.stop_after_minutes, version=version, steps=args.steps,
                             generated=args.generated, ttt_steps=getattr(args, "ttt_steps", None),
                             inputs=getattr(args, "inputs", "feature+token"))
        last = report["log"]["evals"][-1]
        print(f"{args.command}: held-out loss {last['heldout_loss']:.4f}, top-1 by draft position "
              f"{last['heldout_top1_by_step']}, {report['log']['seconds'] / 60:.1f} min")
        if args.command in ("eagle", "eagle3") and report["inputs"] == "feature+token":
            from speclab.methods.eagle import describe_tree
            m = EAGLE_PRESETS[args.preset]
            for temperature in (0.0, 1.0):  # greedy rounds and sampled ones want different trees
                started = time.perf_counter()
                choice = choose_eagle_tree(args.target, args.out / args.command, num_prompts=m.tree_prompts,
                                           max_new_tokens=m.tree_tokens, repeats=m.tree_repeats, device=args.device,
                                           temperature=temperature)
                print(f"EAGLE-2 settings timed against target-only at temperature {temperature:g} on "
                      f"{choice['prompts']} ({(time.perf_counter() - started) / 60:.1f} min):")
                for row in choice["table"]:
                    print(f"  {describe_tree(row)}: {row['tokens_per_pass']:.2f} tokens/pass, {row['speedup']:.2f}x")
                print(f"chosen: {describe_tree(choice)} (written to {args.out / args.command / 'tree.json'})")
        if args.install:
            if report["inputs"] != "feature+token":
                raise SystemExit("an ablation head (--inputs feature or token) is measured, not installed")
            print(f"installed into {install_eagle(args.out, name=args.command)}")
        return
    if args.command == "medusa":
        report = train_medusa(args.target, args.out, preset=args.preset, device=args.device, seed=args.seed,
                              stop_after_minutes=args.stop_after_minutes, num_heads=args.heads, steps=args.steps)
        last = report["log"]["evals"][-1]
        print(f"medusa: held-out loss {last['heldout_loss']:.3f}, top-1 accuracy by head {last['heldout_top1']}, "
              f"{report['log']['seconds'] / 60:.1f} min")
        choice = choose_medusa_tree(args.target, args.out / "medusa", args.device)
        print("tree by node budget (verify pass cost in one-token decode steps, measured here):")
        for row in choice["table"]:
            print(f"  {row['budget']:3d} nodes, depth {row['depth']}: {row['tokens_per_pass']:.2f} tokens/pass "
                  f"modelled, pass cost {row['pass_cost']:.2f} -> {row['modelled_speedup']:.2f}x")
        print(f"chosen: {choice['budget']} nodes (written to {args.out / 'medusa' / 'tree.json'})")
        if args.install:
            print(f"installed into {install_medusa(args.out)}")
        return
    common = dict(preset=args.preset, device=args.device, seed=args.seed, stop_after_minutes=args.stop_after_minutes,
                  plain_draft=not args.no_plain_draft, amp=False if args.no_amp else None,
                  draft_steps=args.draft_steps, draft_layers=args.draft_layers)
    if args.command == "pair":
        report = train_pair(args.out, target_steps=args.target_steps, **common)
    else:
        report = train_draft(args.target, args.out, **common)
    for stage in ("target", "draft", "draft_plain"):
        if stage in report:
            last = report[stage]["evals"][-1]
            print(f"{stage}: held-out loss {last['heldout_loss']:.3f} after {last['step']} steps, "
                  f"{report[stage]['seconds'] / 60:.1f} min, {report[stage]['tokens_per_s']:.0f} tokens/s")
    if args.install:
        print(f"installed into {install_pair(args.out)}")


if __name__ == "__main__":
    main()
