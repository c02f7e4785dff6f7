"""Train the course's bundled pair: a tokenizer, a target, and a draft distilled from the target.

    python -m speclab.train pair --out runs/stdlib          # the shipped pair (resumable)
    python -m speclab.train pair --out /tmp/micro --preset micro   # a few-second smoke run

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
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from speclab import corpus
from speclab.devices import pick_device

EOS = "<|endoftext|>"


# ---------------------------------------------------------------- configuration (plain values)
@dataclass
class Preset:
    vocab_size: int = 4096
    hidden: int = 256
    intermediate: int = 768
    heads: int = 4
    target_layers: int = 8
    draft_layers: int = 1
    context: int = 1024
    seq_len: int = 256
    batch: int = 16
    target_steps: int = 1800
    draft_steps: int = 600
    lr: float = 1e-3
    warmup: int = 100
    eval_batches: int = 16
    eval_every: int = 400
    max_files: int | None = None  # None: the whole library


PRESETS = {
    "stdlib": Preset(),
    # A pair that trains in seconds, for the CI smoke test and for trying the command out.
    "micro": Preset(vocab_size=512, hidden=32, intermediate=64, heads=2, target_layers=2, context=128,
                    seq_len=32, batch=4, target_steps=6, draft_steps=4, warmup=2, eval_batches=2,
                    eval_every=3, max_files=200),
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


def prepare_data(out: Path, p: Preset) -> tuple[PreTrainedTokenizerFast, torch.Tensor, torch.Tensor]:
    """Tokenizer and encoded train/held-out streams, built once and cached in out/."""
    data_file = out / "data.pt"
    train_texts = heldout_texts = None
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


def get_batch(stream: torch.Tensor, p: Preset, seed: int, step: int, device: torch.device) -> torch.Tensor:
    """batch x (seq_len + 1) windows at positions drawn from a generator seeded by (seed, step)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    starts = torch.randint(0, len(stream) - p.seq_len - 1, (p.batch,), generator=g)
    rows = torch.stack([stream[s: s + p.seq_len + 1] for s in starts.tolist()])
    return rows.long().to(device)


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


def train_stage(name: str, model: LlamaForCausalLM, train: torch.Tensor, heldout: torch.Tensor, p: Preset,
                steps: int, out: Path, device: torch.device, seed: int, teacher: LlamaForCausalLM | None = None,
                deadline: float | None = None, amp: bool = False) -> dict:
    """Train `model` for `steps` steps (cross-entropy, or distillation from `teacher`), resuming from
    out/name.ckpt. Returns the log: held-out loss per evaluation, tokens/s, seconds spent."""
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
            batch = get_batch(train, p, seed, step, device)
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


def draft_from_target(target: LlamaForCausalLM, p: Preset) -> LlamaForCausalLM:
    """A draft that starts as the target's embedding, first layers and head: it begins where the
    target's early layers already are, so distillation needs fewer steps to agree with it."""
    draft = LlamaForCausalLM(llama_config(p, p.draft_layers))
    state = {k: v for k, v in target.state_dict().items() if not k.startswith("model.layers.")
             or int(k.split(".")[2]) < p.draft_layers}
    draft.load_state_dict(state, strict=False)
    return draft


def export(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, path: Path) -> None:
    """Hugging Face format, half precision: loads with AutoModelForCausalLM.from_pretrained(path)."""
    model.to(torch.float16).save_pretrained(path)
    tokenizer.save_pretrained(path)
    model.to(torch.float32)


# ---------------------------------------------------------------- the pair command
def train_pair(out: Path, preset: str = "stdlib", device: str | None = None, seed: int = 0,
               stop_after_minutes: float | None = None, plain_draft: bool = True, amp: bool | None = None,
               **overrides) -> dict:
    """Tokenizer, target (cross-entropy), distilled draft and, for comparison, a plainly trained
    draft of the same shape. Writes out/{target,draft,draft-plain}/ and out/training.json."""
    p = Preset(**{**asdict(PRESETS[preset]), **{k: v for k, v in overrides.items() if v is not None}})
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
    target.eval().requires_grad_(False)

    torch.manual_seed(seed + 1)
    draft = draft_from_target(target, p).to(dev)
    report["draft"] = train_stage("draft", draft, train, heldout, p, p.draft_steps, out, dev, seed + 1,
                                  teacher=target, deadline=deadline, amp=amp)
    export(draft, tokenizer, out / "draft")
    if plain_draft:
        torch.manual_seed(seed + 2)
        plain = LlamaForCausalLM(llama_config(p, p.draft_layers)).to(dev)
        report["draft_plain"] = train_stage("draft-plain", plain, train, heldout, p, p.draft_steps, out, dev,
                                            seed + 1, deadline=deadline, amp=amp)
        export(plain, tokenizer, out / "draft-plain")
    report["hardware"] = f"{platform.machine()}, {torch.get_num_threads()} CPU threads" if dev.type == "cpu" else \
        torch.cuda.get_device_name(dev) if dev.type == "cuda" else str(dev)
    (out / "training.json").write_text(json.dumps(report, indent=1))
    return report


def install_pair(out: Path, dest: Path | None = None) -> Path:
    """Copy a trained pair (target/, draft/, draft-plain/, training.json) into the package, where
    load_pair() finds it."""
    from speclab.models import BUNDLED_DIR
    dest = dest or BUNDLED_DIR
    for name in ("target", "draft", "draft-plain"):
        if (out / name).exists():
            shutil.rmtree(dest / name, ignore_errors=True)
            shutil.copytree(out / name, dest / name)
    shutil.copy(out / "training.json", dest / "training.json")
    return dest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m speclab.train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    pair = sub.add_parser("pair", help="train tokenizer, target and draft (resumable)")
    pair.add_argument("--out", type=Path, required=True, help="output folder (checkpoints and exported models)")
    pair.add_argument("--preset", choices=sorted(PRESETS), default="stdlib")
    pair.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    pair.add_argument("--seed", type=int, default=0)
    pair.add_argument("--target-steps", type=int, help="override the preset's target steps")
    pair.add_argument("--draft-steps", type=int, help="override the preset's draft steps")
    pair.add_argument("--stop-after-minutes", type=float, help="checkpoint and stop after this long; rerun to resume")
    pair.add_argument("--no-amp", action="store_true", help="train in fp32 even where bf16 autocast is supported")
    pair.add_argument("--no-plain-draft", action="store_true", help="skip the plainly trained comparison draft")
    pair.add_argument("--install", action="store_true",
                      help="when done, copy the pair into the package (speclab/pairs/stdlib), where load_pair() finds it")
    args = parser.parse_args(argv)
    report = train_pair(args.out, args.preset, args.device, args.seed, args.stop_after_minutes,
                        plain_draft=not args.no_plain_draft, amp=False if args.no_amp else None, target_steps=args.target_steps,
                        draft_steps=args.draft_steps)
    for stage in ("target", "draft", "draft_plain"):
        if stage in report:
            last = report[stage]["evals"][-1]
            print(f"{stage}: held-out loss {last['heldout_loss']:.3f} after {last['step']} steps, "
                  f"{report[stage]['seconds'] / 60:.1f} min, {report[stage]['tokens_per_s']:.0f} tokens/s")
    if args.install:
        print(f"installed into {install_pair(args.out)}")


if __name__ == "__main__":
    main()
