"""EAGLE-2's settings for a trained head, chosen on this machine by timing them (top_k, depth,
total_tokens, min_confidence): what `train eagle` and `train eagle3` run when training ends, and what
load_drafter reads back from the head's tree.json; `train eagle-tree` runs it again for a trained head
(on another machine, or with other prompts).
"""
from __future__ import annotations

import json
import statistics
from functools import partial
from pathlib import Path

import torch

from speclab.decoding import generate, speculative_generate
from speclab.devices import pick_device, timer
from speclab.measure.bench import time_interleaved
from speclab.measure.workloads import TUNING, encode_chat, tuning_prompts
from speclab.methods.eagle import TREE_SETTINGS, EagleDrafter, FeatureHead, head_dtype, measured_settings
from speclab.models import load_model, load_tokenizer
from speclab.train.chat_data import check_disjoint
from speclab.train import chat_requests, varied_requests
from speclab.train.chat_requests import TUNING_CATEGORIES
from speclab.train.data import hardware

# (top_k, depth, total_tokens, min_confidence): chains of several depths (one-row head passes are the
# cheapest) and trees two or three wide, as published; and deeper ones that stop growing where the head
# is unsure (EagleDrafter's min_confidence)
EAGLE_TREE_CANDIDATES = ((1, 8, 8, None), (1, 10, 10, None), (1, 12, 12, None), (1, 14, 14, None), (1, 16, 16, None),
                         (2, 6, 12, None), (2, 8, 16, None), (2, 12, 16, None), (3, 6, 16, None),
                         (1, 20, 20, 0.1), (1, 24, 24, 0.05), (1, 24, 24, 0.1), (1, 24, 24, 0.2),
                         (2, 12, 16, 0.1))
# Sampled rounds (temperature 1): shorter chains, a stop, one tree. Wide point-mass trees do not pay sampled:
# each node is accepted only as often as the target draws that very token.
EAGLE_SAMPLED_CANDIDATES = ((1, 4, 4, None), (1, 6, 6, None), (1, 8, 8, None), (1, 12, 12, None),
                            (1, 12, 12, 0.1), (1, 20, 20, 0.1), (2, 6, 12, None))
# A head whose drafts are accepted less often than half the time (SmolLM2-135M's: about 0.4 at the first
# position on chat prompts) pays with short chains and narrow trees; the deep candidates above never would.
EAGLE_SHORT_CANDIDATES = ((1, 2, 2, None), (1, 3, 3, None), (1, 4, 4, None), (1, 6, 6, None),
                          (1, 8, 8, 0.2), (1, 12, 12, 0.3), (2, 2, 4, None), (2, 3, 6, None), (2, 4, 8, None),
                          (3, 3, 9, None), (2, 6, 12, None))
EAGLE_SHORT_SAMPLED_CANDIDATES = ((1, 1, 1, None), (1, 2, 2, None), (1, 3, 3, None), (1, 4, 4, None),
                                  (1, 8, 8, 0.2), (2, 2, 4, None))
CANDIDATES = {"deep": (EAGLE_TREE_CANDIDATES, EAGLE_SAMPLED_CANDIDATES),
              "short": (EAGLE_SHORT_CANDIDATES, EAGLE_SHORT_SAMPLED_CANDIDATES)}
# what the settings are timed on: held-out library code, or chat requests in the everyday forms or the varied ones
PROMPTS = ("code", "chat", "varied")


def tuning_inputs(tokenizer, prompts: str, n: int, training: Path | None = None) -> tuple[list[torch.Tensor], str]:
    """The token ids of n tuning prompts and what they are: "code", held-out library code
    (speclab.measure.workloads.tuning_prompts); "chat", everyday requests through the chat template
    (speclab.train.chat_requests.tuning_requests), or "varied", requests in the varied forms
    (speclab.train.varied_requests.tuning_requests), none of them in `training` (a chat_conversations.pt the
    head learnt from, where given), for a chat target."""
    if prompts == "code":
        return ([tokenizer(p, return_tensors="pt").input_ids[0] for p in tuning_prompts(n)],
                f"held-out code prompts {TUNING.start + 1}-{TUNING.start + n}")
    if prompts in ("chat", "varied"):
        texts = trained_texts(tokenizer, training) if training is not None else None
        held = None if texts is None else "\n\x00".join(texts)  # one string: a search per request, not per text
        module = chat_requests if prompts == "chat" else varied_requests
        requests = module.tuning_requests(n, None if held is None else lambda r: r in held)
        check_disjoint(requests)
        held_out = "" if texts is None else f", none in the {len(texts):,} conversations the head's training drew from"
        forms = "" if prompts == "chat" else " in the varied forms"
        return ([encode_chat(tokenizer, messages) for messages in requests],
                f"{n} chat requests{forms} ({', '.join(TUNING_CATEGORIES)} in turn; {module.__name__.split('.')[-1]}"
                f".tuning_requests{held_out})")
    raise ValueError(f"unknown tuning prompts {prompts!r}; choose from {PROMPTS}")


def trained_texts(tokenizer, training: Path) -> list[str]:
    """The conversations of a chat_conversations.pt (chat_data.chat_conversations) as text."""
    if not training.is_file():
        raise FileNotFoundError(f"no training conversations at {training}: pass the chat_conversations.pt the "
                                "head was trained on, or none")
    return tokenizer.batch_decode([c.tolist() for c in torch.load(training)["conversations"]])


def choose_eagle_tree(target_dir: str | Path, head_dir: Path, candidates=None, num_prompts: int = 8,
                      max_new_tokens: int = 128, repeats: int = 3, device: str | None = None,
                      temperature: float = 0.0, prompts: str = "code", candidate_set: str = "deep",
                      training: Path | None = None) -> dict:
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
    when training ends. prompts="chat" times on chat requests instead (tuning_inputs; none of them in
    `training`, the head's chat_conversations.pt, where given), and candidate_set="short" tries the short
    chains and narrow trees of a rarely accepted head."""
    if candidate_set not in CANDIDATES:
        raise ValueError(f"unknown candidate set {candidate_set!r}; choose from {tuple(CANDIDATES)}")
    dev = pick_device(device)
    target = load_model(target_dir, dev, torch.float32)
    tok = load_tokenizer(target_dir)
    room = target.config.max_position_embeddings - max_new_tokens  # a small model's context may be short
    encoded, described = tuning_inputs(tok, prompts, num_prompts, training)
    inputs = [ids[-room:].to(dev) for ids in encoded]
    head = FeatureHead.load(head_dir, device=dev, dtype=head_dtype(target))  # timed as it drafts
    greedy = temperature == 0
    if candidates is None:
        candidates = CANDIDATES[candidate_set][0 if greedy else 1]
    sampling = dict(max_new_tokens=max_new_tokens, temperature=temperature)
    reference = [generate(target, p, **sampling).tokens.tolist() for p in inputs] if greedy else None

    drafters = {c: EagleDrafter(head, target, top_k=c[0], depth=c[1], total_tokens=c[2], min_confidence=c[3])
                for c in candidates}

    def decode(candidate, i: int):
        with timer(dev) as t:
            if candidate == "target-only":
                result = generate(target, inputs[i], seed=i, **sampling)
            else:
                result = speculative_generate(target, drafters[candidate], inputs[i], seed=i, **sampling)
        if candidate != "target-only" and greedy and result.tokens.tolist() != reference[i]:
            raise AssertionError(f"EAGLE-2 {candidate} changed the greedy output")
        return t["seconds"], result.stats

    timed = time_interleaved({c: partial(decode, c) for c in ("target-only", *candidates)}, len(inputs), repeats)
    seconds = {name: [total for total, _ in runs] for name, runs in timed.items()}
    per_pass = {c: sum(st.new_tokens for st in timed[c][-1][1]) / sum(st.rounds for st in timed[c][-1][1])
                for c in candidates}
    base = statistics.median(seconds["target-only"])
    table = [{**dict(zip(TREE_SETTINGS, c)), "tokens_per_pass": round(per_pass[c], 3),
              "speedup": round(base / statistics.median(seconds[c]), 3)} for c in candidates]
    best = max(table, key=lambda row: row["speedup"])
    choice = {**{name: best[name] for name in TREE_SETTINGS}, "table": table,
              "prompts": described,
              "max_new_tokens": max_new_tokens,
              "repeats": repeats, "temperature": temperature, "device": str(dev),
              "hardware": hardware(dev), "threads": torch.get_num_threads(),
              # whether no prompt was one the head trained on: code is held out by construction, chat requests
              # where `training` was given
              "held_out": prompts == "code" or training is not None}
    written = measured_settings(head_dir)
    if greedy:
        written = {**choice, **({"sampled": written["sampled"]} if "sampled" in written else {})}
    else:
        written["sampled"] = choice
    (head_dir / "tree.json").write_text(json.dumps(written, indent=1))
    return choice
