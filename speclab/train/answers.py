"""The target's own answers to everyday chat requests, at scale: the rows a chat target's drafters learn
from (speclab.train.chat_data), written by speclab's batched decoding on the fast path.

    python -m speclab train answers --target smollm2 --out runs/smollm2-scale --conversations 14000

Resumable: chat_conversations saves after every batch, and a run asked for more conversations continues
the same stream, so the first N of a long run are exactly what a run of N writes. That is what makes the
data points of a scaling curve nested: train with --conversations 1400, 4000, 14000 on one folder.
"""
from __future__ import annotations

import json
import shutil
import statistics
import time
from pathlib import Path

import torch

from speclab.devices import pick_device
from speclab.models import load_model, load_tokenizer
from speclab.runner import enable_fast_path
from speclab.train.chat_data import chat_conversations, summary
from speclab.train.data import hardware
from speclab.train.loop import deadline_after, save_whole
from speclab.train.replies import MAX_PROMPT_TOKENS

MAX_NEW_TOKENS = 256  # chat_conversations' default: a first reply; a second turn gets half
MATERIAL = ("everyday_material.pt",)  # the target's passages and translations the requests are drawn over


def median_batch_rate(state: dict) -> float | None:
    """The median of the batches' answer tokens per second (None before batches were timed one by one): the
    rate the generation ran at, which a pause in the middle of a batch does not move as it moves the sums."""
    rates = [tokens / seconds for tokens, seconds in state.get("batches", []) if seconds > 0]
    return round(statistics.median(rates), 1) if rates else None


def rates_by_host(state: dict) -> list[dict]:
    """The median batch's answer tokens per second on each machine that answered part of the stream
    (chat_data.note_host), in the order they first ran; "host" None for batches timed before hosts were kept."""
    marks = [[0, None], *state.get("hosts", [])]
    groups: dict = {}
    for i, batch in enumerate(state.get("batches", [])):
        host = [h for first, h in marks if first <= i][-1]
        groups.setdefault(host, []).append(batch)
    return [{"host": host, "batches": len(timed), "median_batch_tokens_per_s": median_batch_rate({"batches": timed})}
            for host, timed in groups.items()]


def self_answers(target_dir: str | Path, out: Path, n: int, batch: int = 64, seed: int = 0,
                 stop_after_minutes: float | None = None, requests: str = "everyday",
                 packed: Path | None = None) -> dict:
    """Answer n chat requests (chat_conversations; requests "everyday", or "varied", which a stream of
    everyday ones goes on with) on the fast path, B = batch at a time, into out/chat_conversations.pt;
    write and return out/answers.json: tokens, seconds, tokens per second of the answering, this run's host,
    and the median batch's rate on each host that answered part of the stream (rates_by_host).
    `packed`: a folder the stream is restored from first and packed into after each part (pack_stream), so
    that hours of answering outlive the machine they ran on."""
    if n < 1 or batch < 1:
        raise ValueError(f"ask for at least one conversation and a batch of at least one, not {n} and {batch}")
    out.mkdir(parents=True, exist_ok=True)
    if packed is not None and n % PART:
        print(f"note: only whole parts of {PART} are packed, so the last {n % PART} of {n} conversations stay "
              f"in {out} alone; ask for {n // PART * PART + PART} to pack them too")
    if packed is not None and (packed / "stream.json").exists():
        unpack_stream(packed, out)
    dev = pick_device("cpu" if not torch.cuda.is_available() else "cuda")
    target = load_model(target_dir, dev, torch.float32).requires_grad_(False)
    tokenizer = load_tokenizer(target_dir)
    # a prompt of at most MAX_PROMPT_TOKENS and a reply of at most MAX_NEW_TOKENS fit the static cache
    enable_fast_path(target, "static", max_len=MAX_PROMPT_TOKENS + MAX_NEW_TOKENS, max_batch=batch)
    started, deadline = time.time(), deadline_after(stop_after_minutes)
    # a part at a time where the stream is packed (a run of n answers the first m exactly as a run of m)
    goals = [*range(PART, n, PART), n] if packed is not None else [n]
    for goal in goals:
        chat_conversations(target, tokenizer, out, goal, max_new_tokens=MAX_NEW_TOKENS, seed=seed, batch=batch,
                           deadline=deadline, requests=requests, host=hardware(dev))
        if packed is not None:
            pack_stream(out, packed, PART, batch)
    state = torch.load(out / "chat_conversations.pt")
    record = {**summary(out), "decoder": f"speclab generate, fast path (static cache), batch {batch}",
              "answer_tokens": int(state.get("answer_tokens", 0)), "this_run_host": hardware(dev),
              "this_run_seconds": round(time.time() - started, 1)}
    record["answer_tokens_per_s"] = record["answer_tokens"] / max(state.get("answer_seconds", 0.0), 1e-9)
    # the median over every batch, and on each machine: a restored stream's batches ran on earlier ones
    record["median_batch_tokens_per_s"] = median_batch_rate(state)
    record["hosts"] = rates_by_host(state)
    (out / "answers.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


PART = 512  # conversations a packed part holds: eight batches of 64


def pack_stream(out: Path, packed: Path, part: int = PART, batch: int = 64) -> int:
    """Copy out/'s stream into `packed` as parts of `part` conversations, uint16 tokens end to end with
    their lengths, written once each and never again (a git history then holds every token once), the
    target's material as it is, and stream.json, the counters of the packed conversations. Only whole parts
    are packed, each a whole number of batches, so a stream restored from them resumes at a batch's start.
    Returns how many conversations `packed` holds."""
    state = torch.load(out / "chat_conversations.pt")
    done = len(state["conversations"]) // part * part
    batches = state.get("batches", [])
    starts = [start for _, start in state.get("continued", [])]
    if part % batch or any(start % batch for start in starts) or len(batches) * batch < done:
        raise ValueError(f"{out} cannot be packed into parts of {part}: its batches must be {batch} wide, counted "
                         f"one by one, and part a multiple of them (the stream's stretches start at {[0, *starts]})")
    packed.mkdir(parents=True, exist_ok=True)
    for first in range(0, done, part):
        path = packed / f"conversations_{first // part:03d}.pt"
        if not path.exists():
            rows = state["conversations"][first:first + part]
            save_whole({"tokens": torch.cat(rows).to(torch.uint16),
                        "lengths": torch.tensor([len(r) for r in rows], dtype=torch.int32)}, path)
    for name in MATERIAL:
        if (out / name).exists():
            shutil.copy(out / name, packed / name)
    kept = batches[:done // batch]
    counters = {"conversations": done, "part": part, "requests": state.get("requests", "library"),
                "continued": [list(c) for c in state.get("continued", []) if c[1] < done],
                "batches": kept, "material_seconds": state.get("material_seconds", 0.0),
                "hosts": [mark for mark in state.get("hosts", []) if mark[0] < len(kept)]}
    (packed / "stream.json").write_text(json.dumps(counters) + "\n")
    return done


def unpack_stream(packed: Path, out: Path) -> int:
    """Restore out/chat_conversations.pt (and the material) from `packed` (pack_stream) where out holds
    fewer conversations than it; returns how many conversations out holds after."""
    counters = json.loads((packed / "stream.json").read_text())
    path = out / "chat_conversations.pt"
    have = len(torch.load(path)["conversations"]) if path.exists() else 0
    if have >= counters["conversations"]:
        return have
    conversations = []
    for first in range(0, counters["conversations"], counters["part"]):
        part = torch.load(packed / f"conversations_{first // counters['part']:03d}.pt")
        conversations += list(part["tokens"].to(torch.int32).split(part["lengths"].tolist()))
    seconds = sum(s for _, s in counters["batches"])
    state = {"conversations": conversations, "requests": counters["requests"], "seconds": seconds,
             "answer_tokens": sum(t for t, _ in counters["batches"]), "answer_seconds": seconds,
             "batches": [tuple(b) for b in counters["batches"]], "material_seconds": counters["material_seconds"]}
    if counters["continued"]:
        state["continued"] = [tuple(c) for c in counters["continued"]]
    if counters.get("hosts"):
        state["hosts"] = [list(mark) for mark in counters["hosts"]]
    out.mkdir(parents=True, exist_ok=True)
    for name in MATERIAL:
        if (packed / name).exists():
            shutil.copy(packed / name, out / name)
    save_whole(state, path)
    return len(conversations)
