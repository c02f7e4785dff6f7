"""Everyday chat requests: every category's form, the target's passages tidied, kept and resumed, none
sharing material with a bench prompt, and the conversations built on them."""
import random

import pytest
import torch

from speclab.measure.workloads import chat_records, encode_chat
from speclab.models import BUNDLED_DIR, load_tokenizer
from speclab.train import chat_data, chat_requests
from speclab.train.data import rows_spec
from speclab.train.replies import MAX_PROMPT_TOKENS, reply_text
from speclab.train.shared_draft import PRESETS
from speclab.train.tuning import tuning_inputs
from tests.conftest import tiny_model
from tests.test_models import WORDS
from tests.test_packaged import chat_tokenizer

PASSAGE = ("The old mill by the river opened again on Saturday. Volunteers had repaired its wheel over two "
           "winters. Entry costs three euros. The café inside sells bread made from the mill's own flour.")


@pytest.fixture()
def fake_replies(monkeypatch):
    """The target's replies, as text, without a target: a preamble line, then a passage numbered by call."""
    calls = []

    def replies(target, tokenizer, prompts, max_new_tokens, batch):
        calls.append(list(prompts))
        return [f"Here is {p[:20]}:\n**{PASSAGE}** Reply {len(calls)}.{i}." for i, p in enumerate(prompts)]
    monkeypatch.setattr(chat_requests, "target_replies", replies)
    return calls


def test_every_category_has_its_form_and_an_unknown_one_is_refused():
    rng = random.Random(0)
    back = ("French", "Le moulin est ouvert.")
    made = {c: chat_requests.request(c, rng, PASSAGE, back) for c in chat_requests.CATEGORIES}
    assert made["summarization"].endswith(PASSAGE) and PASSAGE in made["rag"] and "Question: " in made["rag"]
    assert "Python" in made["code"] and made["math"].split()[-1].endswith(".")
    translations = {chat_requests.request("translation", random.Random(s), PASSAGE, back) for s in range(20)}
    assert any("Le moulin est ouvert." in t for t in translations)  # back into English
    assert any("The old mill by the river opened again on Saturday." in t for t in translations)  # out of it
    with pytest.raises(ValueError, match="unknown category 'poems'"):
        chat_requests.request("poems", rng, PASSAGE, ("French", ""))


def test_a_reply_is_tidied_into_whole_sentences_or_dropped():
    tidy = chat_requests.tidy_passage(f"Sure, here is the notice:\n\n**{PASSAGE}**\nMore text follows here.",
                                      max_chars=len(PASSAGE) + 5)
    assert tidy == PASSAGE  # preamble and emphasis gone, cut after a whole sentence
    assert chat_requests.tidy_passage(f"{PASSAGE} And then the reply ran out of") == PASSAGE
    assert chat_requests.tidy_passage("Too short. Really.") == ""


def test_the_targets_material_is_kept_and_resumed_without_asking_again(fake_replies, tmp_path):
    first = chat_requests.everyday_requests(None, None, tmp_path, n=14, batch=3)
    asked = len(fake_replies)
    for turn in (0, 7):  # the categories in turn: summaries end with a passage, documents ask a question, ...
        assert first[turn + 2][0]["content"].endswith(f"Reply 1.{(turn // 7) * 2}.")
        assert "Question: " in first[turn + 5][0]["content"] and "Python" in first[turn + 6][0]["content"]
        assert first[turn + 4][0]["content"].endswith(chat_requests.MATH_ENDINGS)
    assert chat_requests.everyday_requests(None, None, tmp_path, n=14, batch=3) == first
    assert len(fake_replies) == asked  # read back from out/everyday_material.pt
    assert chat_requests.everyday_requests(None, None, tmp_path, n=14, seed=1, batch=3) != first


def test_a_passage_sharing_material_with_a_bench_prompt_is_refused(monkeypatch, tmp_path):
    bench = chat_records()[8]["messages"][0]["content"].split("\n\n", 1)[1]  # a summarization prompt's text
    monkeypatch.setattr(chat_requests, "target_replies", lambda t, tok, prompts, m, b: [bench] * len(prompts))
    with pytest.raises(ValueError, match="overlaps a bench prompt"):
        chat_data.first_messages("everyday", None, None, tmp_path, 7, 0, 4)


def test_everyday_conversations_give_every_conversation_a_second_turn(fake_replies, tmp_path):
    target, tok = tiny_model("llama", layers=1, vocab=64, seed=0), chat_tokenizer()
    convs = chat_data.chat_conversations(target, tok, tmp_path, n=14, max_new_tokens=4, batch=7, requests="everyday")
    assert len(convs) == 14
    user = tok.convert_tokens_to_ids("<user>")
    assert all(int((convs[i] == user).sum()) == 2 for i in (0, 7))  # the conversation category: two user turns
    with pytest.raises(ValueError, match="holds answers to everyday requests, not library"):
        chat_data.chat_conversations(target, tok, tmp_path, n=14, max_new_tokens=4, batch=7)
    assert chat_data.summary(tmp_path)["requests"] == "everyday"
    with pytest.raises(ValueError, match="unknown requests 'forum'"):
        chat_data.first_messages("forum", target, tok, tmp_path, 7, 0, 7)


def test_the_rows_of_everyday_requests_are_told_apart_from_the_librarys():
    assert rows_spec(PRESETS["smollm2"]) == "chat: 640 conversations, rows of 256"  # as in the shipped records
    assert rows_spec(PRESETS["smollm2-everyday"]) == "chat: 1400 conversations of everyday requests, rows of 256"


def test_tuning_requests_are_reproducible_need_no_target_and_meet_no_bench_prompt():
    requests = chat_requests.tuning_requests(8)
    assert requests == chat_requests.tuning_requests(8) and len(requests) == 8
    assert all(len(r) == 1 and r[0]["role"] == "user" and r[0]["content"] for r in requests)
    assert "Python" in requests[chat_requests.TUNING_CATEGORIES.index("code")][0]["content"]
    chat_data.check_disjoint(requests)
    with pytest.raises(ValueError, match="at least one"):
        chat_requests.tuning_requests(0)
    with pytest.raises(ValueError, match="choose from"):
        tuning_inputs(None, "prose", 2)


def test_tuning_requests_skip_the_heads_training_conversations(tmp_path):
    plain = chat_requests.tuning_requests(6)
    trained = {plain[0][0]["content"], plain[2][0]["content"]}
    kept = chat_requests.tuning_requests(6, seen=lambda text: text in trained)
    assert not trained & {r[0]["content"] for r in kept} and len(kept) == 6
    assert chat_requests.tuning_requests(6, seen=lambda text: False) == plain  # nothing trained on: the same draws
    assert "Python" in kept[chat_requests.TUNING_CATEGORIES.index("code")][0]["content"]  # categories in turn
    with pytest.raises(ValueError, match="outside the training data"):
        chat_requests.tuning_requests(2, seen=lambda text: True)
    # from a chat_conversations.pt: a request that occurs anywhere in a conversation is skipped (the bundled
    # tokenizer round-trips text; it has no chat template, so encode_chat writes "User:" lines)
    tok = load_tokenizer(BUNDLED_DIR / "target")
    conversation = encode_chat(tok, plain[0]).to(torch.int32)
    torch.save({"conversations": [conversation]}, tmp_path / "chat_conversations.pt")
    ids, described = tuning_inputs(tok, "chat", 4, tmp_path / "chat_conversations.pt")
    assert [i.tolist() for i in ids] == [encode_chat(tok, r).tolist() for r in
                                         chat_requests.tuning_requests(4, seen=lambda t: t == plain[0][0]["content"])]
    assert "none in the 1 conversations the head's training drew from" in described
    with pytest.raises(FileNotFoundError, match="no training conversations"):
        tuning_inputs(tok, "chat", 4, tmp_path / "missing.pt")


def test_a_reply_is_read_after_the_prompt_answer_kept_even_where_it_cut_the_prompt():
    tok = chat_tokenizer()
    for length in (5, MAX_PROMPT_TOKENS + 40):  # a short prompt, and one answer() cuts to its last tokens
        conv = [{"role": "user", "content": " ".join(WORDS[i % len(WORDS)] for i in range(length))}]
        reply = tok(" ".join(WORDS[:3]), return_tensors="pt").input_ids[0]
        row = torch.cat([encode_chat(tok, conv)[-MAX_PROMPT_TOKENS:], reply])
        assert reply_text(tok, conv, row) == " ".join(WORDS[:3])


def test_held_out_requests_in_the_everyday_forms_are_reproducible_and_none_a_stream_holds():
    made = chat_requests.held_out_requests(8, seen=lambda text: False)
    assert len(set(made)) == 8 and made == chat_requests.held_out_requests(8, lambda text: False)
    assert made[1].endswith(chat_requests.MATH_ENDINGS) and not made[0].endswith(chat_requests.MATH_ENDINGS)
    assert made != [r[0]["content"] for r in chat_requests.tuning_requests(8)]  # a seed of their own
    skipped = chat_requests.held_out_requests(8, seen=lambda text: text in made[:2])
    assert not set(made[:2]) & set(skipped)
    with pytest.raises(ValueError, match="passages"):
        chat_requests.held_out_requests(2, lambda text: False, ("qa", "summarization"))
    with pytest.raises(ValueError, match="found only 0 of 2 requests outside the stream"):
        chat_requests.held_out_requests(2, seen=lambda text: True)
