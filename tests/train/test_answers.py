"""The target's own answers at scale: speclab's batched decoding on the fast path writes what
transformers' generate writes, a longer run starts with a shorter one's requests, and the command
records its tokens per second and its host; a packed stream restores on a new machine and goes on."""
import json

import pytest
import torch

from speclab.runner import disable_fast_path, enable_fast_path
from speclab.train import answers, chat_data, chat_requests
from speclab.train.answers import self_answers
from speclab.train.replies import answer, reply_length
from tests.conftest import tiny_model
from tests.test_models import WORDS
from tests.test_packaged import chat_tokenizer
from tests.train.test_chat_requests import PASSAGE, fake_replies  # noqa: F401 (a fixture)


def conversations(n: int) -> list[list[dict]]:
    return [[{"role": "user", "content": " ".join(WORDS[(3 * i + j) % len(WORDS)] for j in range(2 + 3 * i))}]
            for i in range(n)]


def test_the_fast_path_answers_greedy_as_transformers_does_with_ragged_rows():
    target, tok = tiny_model("llama", layers=2, vocab=64, seed=3), chat_tokenizer()
    convs = conversations(3)  # prompts of different lengths: transformers pads them, speclab does not
    eager = answer(target, tok, convs, max_new_tokens=8, sampled=False, seed=0)
    enable_fast_path(target, "static", max_len=64, max_batch=3)
    try:
        fast = answer(target, tok, convs, max_new_tokens=8, sampled=False, seed=0)
        sampled = [answer(target, tok, convs, max_new_tokens=8, sampled=True, seed=s) for s in (5, 5, 6)]
    finally:
        disable_fast_path(target)
    assert all(torch.equal(a, b) for a, b in zip(eager, fast))
    assert all(0 < reply_length(tok, c, r) <= 8 for c, r in zip(convs, fast))
    assert all(torch.equal(a, b) for a, b in zip(sampled[0], sampled[1]))  # a seed reproduces a sampled batch
    assert any(not torch.equal(a, b) for a, b in zip(sampled[0], sampled[2]))


def test_a_longer_run_starts_with_a_shorter_ones_requests_and_reuses_passages_past_the_cap(tmp_path, monkeypatch):
    def replies(target, tokenizer, prompts, max_new_tokens, batch):  # the same prompt, the same reply
        return [f"{PASSAGE} It is about {p.split(' about ')[-1].split('.')[0]}." for p in prompts]
    monkeypatch.setattr(chat_requests, "target_replies", replies)
    monkeypatch.setattr(chat_requests, "MAX_PASSAGES", 6)
    (tmp_path / "short").mkdir(), (tmp_path / "long").mkdir()
    short = chat_requests.everyday_requests(None, None, tmp_path / "short", n=21, batch=4)
    long = chat_requests.everyday_requests(None, None, tmp_path / "long", n=70, batch=4)
    assert long[:21] == short
    kept = torch.load(tmp_path / "long" / "everyday_material.pt")
    assert 6 <= len(kept["passages"]) < 10 and len(kept["foreign"]) == 3  # capped, not one per request
    passages = [r[0]["content"].split("\n\n", 1)[1] for r in long[2::7]]  # the summarization category's
    assert len(set(passages)) < len(passages) and set(passages) <= set(kept["passages"])  # reused, in turn


def test_the_command_records_tokens_per_second_and_the_host(fake_replies, tmp_path):  # noqa: F811
    target_dir = tmp_path / "target"
    tiny_model("llama", layers=1, vocab=64, seed=0, context=512).save_pretrained(target_dir)
    chat_tokenizer().save_pretrained(target_dir)
    record = self_answers(target_dir, tmp_path / "run", n=7, batch=4)
    saved = json.loads((tmp_path / "run" / "answers.json").read_text())
    assert saved["conversations"] == 7 and saved["answer_tokens"] > 0 and saved["answer_tokens_per_s"] > 0
    batches = torch.load(tmp_path / "run" / "chat_conversations.pt")["batches"]  # 7 at 4 a batch: 2 batches
    assert len(batches) == 2 and saved["median_batch_tokens_per_s"] > 0
    assert sum(tokens for tokens, _ in batches) == saved["answer_tokens"]
    assert "fast path" in saved["decoder"] and "CPU thread" in saved["this_run_host"] and record == saved
    assert saved["hosts"] == [{"host": saved["this_run_host"], "batches": 2,
                               "median_batch_tokens_per_s": saved["median_batch_tokens_per_s"]}]


def test_rates_are_kept_by_host_and_batches_from_before_hosts_were_kept_are_said_to_be_unrecorded():
    state = {"batches": [(100, 1.0), (300, 1.0), (200, 2.0), (90, 1.0), (50, 1.0)]}
    chat_data.note_host(state, "fast")  # the next batch on ran on "fast"
    assert state["hosts"] == [[5, "fast"]]
    state["batches"].append((120, 1.0))
    chat_data.note_host(state, "fast")  # the same machine again: no new mark
    chat_data.note_host(state, "slow")
    state["batches"].append((30, 1.0))
    assert state["hosts"] == [[5, "fast"], [6, "slow"]]
    assert answers.rates_by_host(state) == [
        {"host": None, "batches": 5, "median_batch_tokens_per_s": 100.0},
        {"host": "fast", "batches": 1, "median_batch_tokens_per_s": 120.0},
        {"host": "slow", "batches": 1, "median_batch_tokens_per_s": 30.0}]


def test_a_packed_stream_outlives_its_machine_and_goes_on_as_one_run_would(fake_replies, tmp_path,  # noqa: F811
                                                                           monkeypatch):
    target_dir = tmp_path / "target"
    tiny_model("llama", layers=1, vocab=64, seed=0, context=512).save_pretrained(target_dir)
    chat_tokenizer().save_pretrained(target_dir)
    monkeypatch.setattr(answers, "PART", 4)  # two batches of 2
    self_answers(target_dir, tmp_path / "one run", n=10, batch=2)
    packed = tmp_path / "packed"
    self_answers(target_dir, tmp_path / "lost", n=6, batch=2, packed=packed)
    assert sorted(p.name for p in packed.glob("conversations_*")) == ["conversations_000.pt"]  # whole parts only
    written = (packed / "conversations_000.pt").stat().st_mtime_ns
    answered = []
    monkeypatch.setattr(chat_data, "answer", lambda t, tok, convs, *a: answered.extend(convs) or
                        answer(t, tok, convs, *a))
    self_answers(target_dir, tmp_path / "next machine", n=10, batch=2, packed=packed)
    assert sum(len(c) == 1 for c in answered) == 6  # restores 4, answers the first turns of 6
    whole, resumed = (torch.load(tmp_path / d / "chat_conversations.pt") for d in ("one run", "next machine"))
    assert len(resumed["conversations"]) == 10
    assert all(torch.equal(a, b) for a, b in zip(whole["conversations"], resumed["conversations"]))
    assert (packed / "conversations_000.pt").stat().st_mtime_ns == written  # a part is written once
    counters = json.loads((packed / "stream.json").read_text())
    assert counters["conversations"] == 8 and len(counters["batches"]) == 4
    assert [mark[0] for mark in counters["hosts"]] == [0]  # one machine answered the packed batches
    assert [b[0] for b in counters["batches"]] == [b[0] for b in whole["batches"][:4]]  # the tokens a batch
    restored = tmp_path / "restored"
    assert answers.unpack_stream(packed, restored) == 8
    state = torch.load(restored / "chat_conversations.pt")
    assert state["answer_tokens"] == sum(b[0] for b in whole["batches"][:4])
    assert state["hosts"] == counters["hosts"]  # a restored stream's batches keep the machine they ran on
    with pytest.raises(ValueError, match="parts of 3"):
        answers.pack_stream(tmp_path / "one run", tmp_path / "odd", part=3, batch=2)
