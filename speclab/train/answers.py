"""The target's own answers to everyday chat requests, at scale: the rows a chat target's drafters learn
from (speclab.train.chat_data), written by speclab's batched decoding on the fast path.

    python -m speclab train answers --target smollm2 --out runs/smollm2-scale --conversations 14000

Resumable: chat_conversations saves after every batch, and a run asked for more conversations continues
the same stream, so the first N of a long run are exactly what a run of N writes. That is what makes the
data points of a scaling curve nested: train with --conversations 1400, 4000, 14000 on one folder.
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

from speclab.devices import pick_device
from speclab.models import load_model, load_tokenizer
from speclab.runner import enable_fast_path
from speclab.train.chat_data import chat_conversations, summary
from speclab.train.data import hardware
from speclab.train.loop import deadline_after
from speclab.train.replies import MAX_PROMPT_TOKENS

MAX_NEW_TOKENS = 256  # chat_conversations' default: a first reply; a second turn gets half


def median_batch_rate(state: dict) -> float | None:
    """The median of the batches' answer tokens per second (None before batches were timed one by one): the
    rate the generation ran at, which a pause in the middle of a batch does not move as it moves the sums."""
    rates = [tokens / seconds for tokens, seconds in state.get("batches", []) if seconds > 0]
    return round(statistics.median(rates), 1) if rates else None


def self_answers(target_dir: str | Path, out: Path, n: int, batch: int = 64, seed: int = 0,
                 stop_after_minutes: float | None = None, requests: str = "everyday") -> dict:
    """Answer n chat requests (chat_conversations; requests "everyday", or "varied", which a stream of
    everyday ones goes on with) on the fast path, B = batch at a time, into out/chat_conversations.pt;
    write and return out/answers.json: tokens, seconds, tokens per second of the answering, and the host."""
    if n < 1 or batch < 1:
        raise ValueError(f"ask for at least one conversation and a batch of at least one, not {n} and {batch}")
    out.mkdir(parents=True, exist_ok=True)
    dev = pick_device("cpu" if not torch.cuda.is_available() else "cuda")
    target = load_model(target_dir, dev, torch.float32).requires_grad_(False)
    tokenizer = load_tokenizer(target_dir)
    # a prompt of at most MAX_PROMPT_TOKENS and a reply of at most MAX_NEW_TOKENS fit the static cache
    enable_fast_path(target, "static", max_len=MAX_PROMPT_TOKENS + MAX_NEW_TOKENS, max_batch=batch)
    started = time.time()
    chat_conversations(target, tokenizer, out, n, max_new_tokens=MAX_NEW_TOKENS, seed=seed, batch=batch,
                       deadline=deadline_after(stop_after_minutes), requests=requests)
    state = torch.load(out / "chat_conversations.pt")
    record = {**summary(out), "decoder": f"speclab generate, fast path (static cache), batch {batch}",
              "answer_tokens": int(state.get("answer_tokens", 0)), "host": hardware(dev),
              "this_run_seconds": round(time.time() - started, 1)}
    record["answer_tokens_per_s"] = record["answer_tokens"] / max(state.get("answer_seconds", 0.0), 1e-9)
    record["median_batch_tokens_per_s"] = median_batch_rate(state)
    (out / "answers.json").write_text(json.dumps(record, indent=1) + "\n")
    return record
