"""What every trainer reads, whatever its preset: the tokenizer, the encoded corpus, batches drawn by
(seed, step), the target's own continuations, the frozen target's features (computed once and cached in
the run's folder), and what a record says about the machine it ran on.

The presets passed in are plain objects; each function names the fields it reads.
"""
from __future__ import annotations

import math
import platform
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from tqdm.auto import tqdm
from transformers import (
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from speclab import corpus
from speclab.devices import cpu_name
from speclab.methods.eagle import eagle3_layers
from speclab.models import load_tokenizer
from speclab.train.chat_data import answer_next, chat_rows
from speclab.train.loop import save_whole, stopped

EOS = "<|endoftext|>"


def choose_preset(presets: Mapping, name: str, overrides: Mapping):
    """The preset called `name` with the overrides that are not None (the command line's unset options)."""
    if name not in presets:
        raise ValueError(f"unknown preset {name!r}; choose from {sorted(presets)}")
    base = presets[name]
    return type(base)(**{**asdict(base), **{k: v for k, v in overrides.items() if v is not None}})


def scaled_steps(m, conversations: int | None, steps: int | None, base_steps: int) -> int | None:
    """`steps` if given; else preset m's base_steps scaled to `conversations` (the same steps per
    conversation as the preset: the points of a data-scaling curve train one recipe); else None."""
    if steps is not None or conversations is None:
        return steps
    if getattr(m, "corpus", None) != "chat" or not m.conversations:
        raise ValueError("--conversations applies to a chat preset (smollm2, smollm2-everyday); this preset "
                         f"trains on {getattr(m, 'corpus', 'library')} rows")
    if conversations < 1:
        raise ValueError(f"--conversations must be at least 1, got {conversations}")
    return max(1, round(base_steps * conversations / m.conversations))


# ---------------------------------------------------------------- tokenizer and corpus
def train_tokenizer(texts: list[str], vocab_size: int, out: Path) -> PreTrainedTokenizerFast:
    """Byte-level BPE (the GPT-2 recipe) with one special token, id 0, used as EOS and padding."""
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


def prepare_data(out: Path, p, tokenizer: PreTrainedTokenizerBase | None = None
                 ) -> tuple[PreTrainedTokenizerBase, torch.Tensor, torch.Tensor]:
    """Tokenizer (trained here, p.vocab_size ids, unless one is given, e.g. an existing target's) and the
    encoded train/held-out streams of p.max_files library files, built once and cached in out/."""
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
        save_whole({"train": encode(tokenizer, train_texts), "heldout": encode(tokenizer, heldout_texts)}, data_file)
    data = torch.load(data_file)
    return tokenizer, data["train"], data["heldout"]


def get_batch(stream: torch.Tensor, p, seed: int, step: int, device: torch.device,
              generated: torch.Tensor | None = None) -> torch.Tensor:
    """p.batch x (p.seq_len + 1) windows at positions drawn from a generator seeded by (seed, step).
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
def generate_continuations(target: PreTrainedModel, train: torch.Tensor, p, out: Path,
                           device: torch.device, seed: int, deadline: float | None = None,
                           chunk: int = 64) -> torch.Tensor:
    """p.generated continuations by the target of corpus prompts (p.prompt_len tokens each, continued to
    p.seq_len + 1), alternately greedy and sampled at temperature 1, chunk by chunk; saved after each
    chunk in out/generated.pt, so an interrupted run resumes where it stopped."""
    path = out / "generated.pt"
    done = torch.load(path) if path.exists() else torch.empty(0, p.seq_len + 1, dtype=torch.int32)
    new = p.seq_len + 1 - p.prompt_len
    target.eval()
    bar = tqdm(total=p.generated, initial=min(len(done), p.generated), desc="generated", mininterval=5)
    while len(done) < p.generated:
        if deadline is not None and time.time() > deadline:
            raise stopped("generated", f"{len(done)}/{p.generated}")
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
        save_whole(done, path)
        bar.update(n)
    bar.close()
    return done[:p.generated]


# ---------------------------------------------------------------- the frozen target's features
@torch.inference_mode()
def target_features(target: PreTrainedModel, rows: torch.Tensor, device: torch.device, chunk: int = 16,
                    layers: Sequence[int] = (-1,), greedy: list | None = None) -> torch.Tensor:
    """The target's hidden states at every position of every row, float16 on the CPU: computed once,
    reused by every training step. `layers` index transformers' hidden_states (-1, the default: the
    last, after the final norm, what the lm_head reads); several are concatenated (n, T, len * H).
    A list passed as `greedy` receives the target's greedy next token at every position (int32
    chunks), which the same forward computes: a trainer with a draft vocabulary then needs only its
    rows of the lm_head per step, not all of a 49k vocabulary's."""
    out = []
    for i in range(0, len(rows), chunk):
        result = target(input_ids=rows[i:i + chunk].long().to(device), output_hidden_states=True)
        hidden = result.hidden_states
        out.append(torch.cat([hidden[layer] for layer in layers], dim=-1).to("cpu", torch.float16))
        if greedy is not None:
            greedy.append(result.logits.argmax(-1).to("cpu", torch.int32))
    return torch.cat(out)


def resumable_features(target: PreTrainedModel, rows: torch.Tensor, device: torch.device,
                       groups: Sequence[Sequence[int]], parts: Path, deadline: float | None = None,
                       part_rows: int = 256, backing: Path | None = None) -> tuple[list[torch.Tensor], torch.Tensor]:
    """target_features over `rows` for each group of layers, with the target's greedy next tokens, `part_rows`
    rows at a time, each part saved in the folder `parts` as it is done: a run stopped (a deadline, a session's
    end) resumes at the first part missing. A part is checked against the rows and layers it was computed
    from. Each group's features are gathered into one tensor made once (a part at a time beside it, not all
    of them twice); with `backing`, a folder, each is a file there mapped into memory, whose pages the kernel
    can write out and drop, so a gather larger than the free memory (17 GB for 14,000 SmolLM2 conversations)
    does not end in the out-of-memory killer. Returns ([(n, T, len(group) * H) float16 per group], greedy
    (n, T) int32)."""
    parts.mkdir(parents=True, exist_ok=True)
    layers = [layer for group in groups for layer in group]
    gathered: list[torch.Tensor] = []
    greedy = torch.empty(rows.shape, dtype=torch.int32)
    bar = tqdm(total=len(rows), desc="target's features", mininterval=10)
    for start in range(0, len(rows), part_rows):
        chunk = rows[start:start + part_rows]
        path = parts / f"rows{start:07d}-{len(chunk)}.pt"
        saved = torch.load(path) if path.exists() else None
        if saved is None or not torch.equal(saved["rows"], chunk.to(torch.int32)) or saved["layers"] != layers:
            if deadline is not None and time.time() > deadline:
                raise stopped("target's features", f"row {start}/{len(rows)}")
            next_tokens: list = []
            saved = {"rows": chunk.to(torch.int32), "layers": layers,
                     "features": target_features(target, chunk, device, layers=layers, greedy=next_tokens),
                     "greedy": torch.cat(next_tokens)}
            save_whole(saved, path)
        width = saved["features"].shape[-1] // len(layers)
        if not gathered:
            gathered = [gather_tensor((len(rows), rows.shape[1], width * len(group)), backing, i)
                        for i, group in enumerate(groups)]
        for out, piece in zip(gathered, saved["features"].split([width * len(g) for g in groups], dim=-1)):
            out[start:start + len(chunk)] = piece
        greedy[start:start + len(chunk)] = saved["greedy"]
        bar.update(len(chunk))
    bar.close()
    return gathered, greedy


def gather_tensor(shape: tuple[int, ...], backing: Path | None, index: int) -> torch.Tensor:
    """An empty float16 tensor of `shape`: in memory, or mapped from backing/gather{index}.f16 (made anew)."""
    if backing is None:
        return torch.empty(shape, dtype=torch.float16)
    backing.mkdir(parents=True, exist_ok=True)
    path = backing / f"gather{index}.f16"
    path.unlink(missing_ok=True)
    return torch.from_file(str(path), shared=True, size=math.prod(shape), dtype=torch.float16).view(shape)


def cached_features(target: PreTrainedModel, target_dir: str | Path, out: Path, data, m, dev: torch.device,
                    seed: int, deadline: float | None = None) -> dict:
    """The frozen target's features over its training rows, computed once into out/features.pt and
    reused by every head trained on them (Medusa, EAGLE, MTP, exit adapters, a shared-embedding draft).
    The rows (m.seq_len tokens each) depend on m.corpus: "stdlib", m.corpus_rows standard-library
    windows and m.generated of the target's own continuations, and m.heldout_rows held-out windows
    (`data`: the corpus preset they are cut from, its max_files, and m's row length and continuations:
    speclab.train.pair.rows_preset); "chat", m.conversations chat conversations answered by the target
    (speclab.train.chat_data), packed, a twentieth of them held out. Returns {"train", "heldout":
    features (n, T, H) float16; "train_rows", "heldout_rows": the token ids (n, T); "train_next",
    "heldout_next": the target's greedy next token at each position (n, T; absent from files written before
    they were kept); "seconds", "rows", "spec"}."""
    features_file = out / "features.pt"
    # memory-mapped: a large point's features stay on disk, and a training step reads its batch's rows
    features = torch.load(features_file, mmap=True) if features_file.exists() else None
    spec = rows_spec(m)
    if features is not None and features.get("spec", features.get("rows")) != spec:
        # Another head in this folder was trained on other rows (a different --generated): rebuild
        # rather than train this one on rows its preset did not ask for.
        print(f"{features_file} holds rows {features.get('spec', features.get('rows'))}, this preset asks for "
              f"{spec}: recomputing")
        features = None
    if features is not None and "train_rows" in features:
        return with_answers(features, m, target_dir)
    if features is not None:  # a file from before rows were kept: read whole, since it is written again below
        features = torch.load(features_file)
    if m_corpus(m) == "chat":
        rows, held = chat_rows(target, load_tokenizer(target_dir), out, m.conversations, m.seq_len, seed, deadline,
                               requests=getattr(m, "requests", "library"))
        held = held[:m.heldout_rows]
    else:
        rows, held = library_rows(target, target_dir, out, data, m, dev, seed, deadline)
    if features is None:  # (files from before rows were kept only lack the rows, rebuilt above)
        started = time.perf_counter()
        # Chat rows are long and the target deep: one pass also keeps EAGLE-3's fused layers
        # (out/features_layers.pt, which speclab.train.eagle.eagle3_features then finds cached).
        fused = list(eagle3_layers(target.config.num_hidden_layers)) if m_corpus(m) == "chat" else []
        groups = [fused, [-1]] if fused else [[-1]]
        train, train_next = resumable_features(target, rows, dev, groups, out / "features.parts", deadline,
                                               backing=out / "features.gather")
        heldout, held_next = resumable_features(target, held, dev, groups, out / "features.parts.heldout", deadline)
        if fused:
            save_whole({"train": train[0], "heldout": heldout[0], "layers": fused, "seconds": 0.0},
                       out / "features_layers.pt")
        features = {"train": train[-1], "heldout": heldout[-1], "train_next": train_next, "heldout_next": held_next,
                    "seconds": time.perf_counter() - started, "rows": spec if isinstance(spec, int) else len(rows)}
        del train, heldout
    features.update(train_rows=rows.to(torch.int32), heldout_rows=held.to(torch.int32), spec=spec)
    save_whole(features, features_file)
    for parts in (out / "features.parts", out / "features.parts.heldout", out / "features.gather"):
        shutil.rmtree(parts, ignore_errors=True)  # features.pt holds them now
    features = torch.load(features_file, mmap=True)  # the same, mapped: the tensors in memory are let go
    return with_answers(features, m, target_dir)


def with_answers(features: dict, m, target_dir: str | Path) -> dict:
    """Chat rows' features with "train_answers" and "heldout_answers" (chat_data.answer_next: where the
    target's next token is an answer's), computed from the rows on each load (a few ms; not saved)."""
    if m_corpus(m) == "chat":
        tokenizer = load_tokenizer(target_dir)
        for part in ("train", "heldout"):
            features[f"{part}_answers"] = answer_next(features[f"{part}_rows"], tokenizer)
    return features


def m_corpus(m) -> str:
    return getattr(m, "corpus", "stdlib")


def rows_spec(m) -> int | str:
    """What identifies a preset's training rows: their count for the library's (as files written before
    chat rows existed record it), the conversations and row length for chat rows."""
    if getattr(m, "corpus", "stdlib") == "chat":
        requests = getattr(m, "requests", "library")  # (named only when not the first kind, as before it existed)
        kind = "" if requests == "library" else f" of {requests} requests"
        return f"chat: {m.conversations} conversations{kind}, rows of {m.seq_len}"
    return m.corpus_rows + m.generated


def library_rows(target: PreTrainedModel, target_dir: str | Path, out: Path, data, m, dev: torch.device,
                 seed: int, deadline: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(train rows, held-out rows) from the standard library and the target's continuations of it."""
    _, train, heldout = prepare_data(out, data, load_tokenizer(target_dir))
    generated = generate_continuations(target, train, data, out, dev, seed + 3, deadline)
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(train) - m.seq_len, (m.corpus_rows,), generator=g).tolist()
    rows = torch.cat([torch.stack([train[s:s + m.seq_len] for s in starts]), generated[:, :m.seq_len]])
    held_starts = torch.linspace(0, len(heldout) - m.seq_len - 1, m.heldout_rows).long().tolist()
    held = torch.stack([heldout[s:s + m.seq_len] for s in held_starts])
    return rows, held


def check_resumed_rows(log: dict, features: dict, ckpt_file: Path) -> None:
    """Refuse to resume a checkpoint trained on other rows than the cached features now hold (a run
    restarted with another --generated in the same folder), instead of mixing two datasets."""
    if log.get("rows", features["rows"]) != features["rows"]:
        raise ValueError(f"{ckpt_file} was trained on {log['rows']} rows, but this run's data has {features['rows']}: "
                         f"pass the same --generated as before to resume, or delete {ckpt_file} (or use another "
                         "--out) to start over")


# ---------------------------------------------------------------- the machine
def hardware(dev: torch.device) -> str:
    """What a training record or a timed choice ran on: the GPU, or the CPU's model name (timings, and
    the settings chosen from them, differ between CPUs of one architecture: chapter 8.7) and threads."""
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    if dev.type != "cpu":
        return str(dev)
    threads = torch.get_num_threads()
    return f"{cpu_name()} ({platform.machine()}), {threads} CPU thread{'' if threads == 1 else 's'}"
