"""The bundled pair and drafts for a target: a tokenizer and a target trained from scratch on the
standard library, a draft distilled from the target (and, for comparison, one trained plainly), and
new drafts for an existing target.

    python -m speclab train pair --out runs/stdlib                 # target and drafts (resumable)
    python -m speclab train draft --target DIR --out runs/draft   # drafts for an existing target
"""
from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from speclab.devices import pick_device
from speclab.artifacts import record_target
from speclab.models import BUNDLED_DIR, load_model, load_tokenizer, shallow_config
from speclab.train.install import check_same_target
from speclab.train.data import choose_preset, generate_continuations, get_batch, hardware, prepare_data
from speclab.train.loop import deadline_after, has_bf16_units, train_loop


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


def resolve_preset(preset: str, overrides: dict) -> Preset:
    return choose_preset(PRESETS, preset, overrides)


def rows_preset(preset: str, m) -> Preset:
    """The corpus a trainer for a frozen target cuts its rows from (cached_features): the pair preset of
    its size (micro's library files for micro, else the whole library), with the trainer's row length
    m.seq_len, continuations m.generated and prompts m.prompt_len."""
    return resolve_preset("micro" if preset == "micro" else "stdlib",
                          dict(seq_len=m.seq_len, generated=m.generated, prompt_len=m.prompt_len))


def llama_config(p: Preset, layers: int) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=p.vocab_size, hidden_size=p.hidden, intermediate_size=p.intermediate,
        num_hidden_layers=layers, num_attention_heads=p.heads, num_key_value_heads=p.heads,
        max_position_embeddings=p.context, tie_word_embeddings=True, bos_token_id=None,
        eos_token_id=0, pad_token_id=0,
    )


# ---------------------------------------------------------------- one model trained on the corpus
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
                deadline: float | None = None, amp: bool = False, generated: torch.Tensor | None = None,
                stop_after_steps: int | None = None) -> dict:
    """Train `model` for `steps` steps (cross-entropy, or distillation from `teacher` on corpus windows
    mixed with `generated` rows), resuming from out/name.ckpt. Returns the log: held-out loss per
    evaluation, tokens/s, seconds spent."""
    opt = torch.optim.AdamW(model.parameters(), lr=p.lr, betas=(0.9, 0.95), weight_decay=0.1)

    def step_fn(step: int):
        batch = get_batch(train, p, seed, step, device, generated)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            logits = model(batch[:, :-1]).logits
            if teacher is None:
                return F.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten()), None
            with torch.no_grad():
                teacher_logits = teacher(batch[:, :-1]).logits
            return distillation_loss(logits, teacher_logits), None

    def evaluate(step: int, loss: torch.Tensor):
        ev = heldout_loss(model, heldout, p, device)
        return ({"step": step, "train_loss": round(loss.item(), 4), "heldout_loss": round(ev, 4)},
                f"train loss {loss.item():.3f}, held-out loss {ev:.3f}")

    log = train_loop(name, model, opt, steps, step_fn, ckpt_file=out / f"{name}.ckpt", key="model",
                     log={"evals": [], "seconds": 0.0, "steps": steps}, schedule=p, device=device,
                     evaluate=evaluate, eval_every=p.eval_every, clip=1.0, deadline=deadline,
                     stop_after_steps=stop_after_steps, save_every_s=300)
    log["tokens_per_s"] = round(steps * p.batch * p.seq_len / max(log["seconds"], 1e-9), 1)
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
    record_target(out / "draft", target)  # so load_drafter finds this draft for this target, once installed
    if plain_draft:
        torch.manual_seed(seed + 2)
        plain = type(target)(shallow_config(target.config, p.draft_layers)).to(dev)
        report["draft_plain"] = train_stage("draft-plain", plain, train, heldout, p, p.draft_steps, out, dev,
                                            seed + 1, deadline=deadline, amp=amp)
        export(plain, tokenizer, out / "draft-plain")
        record_target(out / "draft-plain", target)
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
    deadline = deadline_after(stop_after_minutes)
    amp = has_bf16_units(dev) if amp is None else amp
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
    p = resolve_preset(preset, overrides)
    out.mkdir(parents=True, exist_ok=True)
    dev = pick_device(device)
    amp = has_bf16_units(dev) if amp is None else amp
    deadline = deadline_after(stop_after_minutes)
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


def install_pair(out: Path, dest: Path | None = None) -> Path:
    """Copy what a run trained (target/, draft/, draft-plain/) into the package, where load_pair() finds
    it, and merge its training.json into the package's: a draft-only run keeps the target's record."""
    dest = dest or BUNDLED_DIR
    if not (out / "target").exists():  # a draft-only run: its draft must serve the target already there
        check_same_target(out / "draft", dest)
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
