"""Varied chat requests: every category in its new forms, none sharing material with a bench prompt, the
first m of n the same, and a stream of everyday answers going on with them (and only with them)."""
import random

import pytest
import torch

from speclab.train import chat_data, varied_requests
from speclab.train.tuning import tuning_inputs
from speclab.measure.workloads import encode_chat
from speclab.models import BUNDLED_DIR, load_tokenizer
from speclab.train.chat_requests import CATEGORIES
from tests.conftest import tiny_model
from tests.test_packaged import chat_tokenizer
from tests.train.test_chat_requests import PASSAGE, fake_replies  # noqa: F401 (a fixture)

PASSAGES = [PASSAGE, "The harbour festival starts on 3 May at noon. Ana Lopez runs the food stalls this year. "
            "Tickets cost five euros and children enter free."]
FOREIGN = [("French", "Le moulin est ouvert le samedi.")]


def test_every_category_has_its_forms_and_an_unknown_one_is_refused():
    made = {c: {varied_requests.varied_request(c, random.Random(s), PASSAGES, FOREIGN) for s in range(40)}
            for c in CATEGORIES}
    assert all(len(texts) > 20 for texts in made.values())  # each category varies
    assert any("Le moulin est ouvert le samedi." in t for t in made["translation"])  # into English
    assert any("opened again on Saturday. Volunteers" in t for t in made["translation"])  # two sentences out of it
    assert any(PASSAGES[0] in t and PASSAGES[1] in t for t in made["summarization"])  # two passages, one text
    assert any(t.startswith(("Hi all", "Summarize", "TL;DR")) or "Hi all,\n" in t for t in made["summarization"])
    assert all(("Document: " in t or "Passage: " in t or "Notes: " in t or "Article: " in t or "Notice: " in t)
               for t in made["rag"])
    assert any("\n    " in t for t in made["code"]) and any("Python" in t for t in made["code"])  # read, and write
    assert all(t.split()[-1].endswith((".", "?")) for t in made["math"])
    with pytest.raises(ValueError, match="unknown category 'poems'"):
        varied_requests.varied_request("poems", random.Random(0), PASSAGES, FOREIGN)
    assert set(varied_requests.FOLLOW_UPS) == set(CATEGORIES)


def test_a_large_stream_of_them_meets_no_bench_prompt(fake_replies, tmp_path):  # noqa: F811
    requests = varied_requests.varied_requests(None, None, tmp_path, n=1400, batch=64)
    chat_data.check_disjoint(requests)  # raises if any shares a 60-character stretch with a bench prompt


@pytest.mark.parametrize("category, distinct", [("conversation", 0.6), ("qa", 0.6), ("math", 0.6), ("code", 0.2)])
def test_the_categories_without_material_repeat_little(category, distinct):
    rng = random.Random(0)  # (the others vary with the target's passages)
    texts = [varied_requests.varied_request(category, rng, PASSAGES, FOREIGN) for _ in range(300)]
    assert len(set(texts)) > distinct * len(texts)


def test_the_first_m_of_n_are_a_run_of_ms_and_start_keeps_the_categories_in_turn(fake_replies, tmp_path):  # noqa: F811
    short = varied_requests.varied_requests(None, None, tmp_path, n=10, batch=64)
    long = varied_requests.varied_requests(None, None, tmp_path, n=30, batch=64)
    assert long[:10] == short and varied_requests.varied_requests(None, None, tmp_path, n=10, seed=1) != short
    later = varied_requests.varied_requests(None, None, tmp_path, n=7, start=5)  # rag, code, conversation, ...
    labels = ("Document: ", "Passage: ", "Notes: ", "Article: ", "Notice: ")
    assert any(label in later[0][0]["content"] for label in labels)  # conversation 5: rag
    assert not any(label in r[0]["content"] for r in later[1:] for label in labels)
    assert later[6][0]["content"].endswith(varied_requests.MATH_ENDINGS)  # conversation 11: math


def test_an_everyday_stream_goes_on_with_varied_requests_and_records_where(fake_replies, tmp_path, monkeypatch):  # noqa: F811
    target, tok = tiny_model("llama", layers=1, vocab=64, seed=0), chat_tokenizer()
    asked = []
    real_answer = chat_data.answer

    def answer(target, tokenizer, convs, max_new_tokens, sampled, seed):
        asked.append([c[0]["content"] for c in convs])
        return real_answer(target, tokenizer, convs, max_new_tokens, sampled, seed)
    monkeypatch.setattr(chat_data, "answer", answer)
    first = chat_data.chat_conversations(target, tok, tmp_path, n=14, max_new_tokens=4, batch=7, requests="everyday")
    more = chat_data.chat_conversations(target, tok, tmp_path, n=21, max_new_tokens=4, batch=7, requests="varied")
    assert all(torch.equal(a, b) for a, b in zip(first, more[:14])) and len(more) == 21
    state = torch.load(tmp_path / "chat_conversations.pt")
    assert state["requests"] == "everyday" and state["continued"] == [("varied", 14)]
    firsts = [batch for batch in asked if len(batch) == 7]  # each batch's first turns (second turns come after)
    assert firsts[-1] == [r[0]["content"] for r in
                          varied_requests.varied_requests(None, None, tmp_path, n=7, batch=7, start=14)]
    user = tok.convert_tokens_to_ids("<user>")
    assert int((more[14] == user).sum()) == 2  # conversation 14 is a conversation: it has a second turn
    # reading needs a kind the stream holds; answering more, its latest kind
    assert len(chat_data.chat_conversations(target, tok, tmp_path, n=21, batch=7, requests="everyday")) == 21
    with pytest.raises(ValueError, match="holds answers to varied requests, not everyday"):
        chat_data.chat_conversations(target, tok, tmp_path, n=28, max_new_tokens=4, batch=7, requests="everyday")
    summary = chat_data.summary(tmp_path)
    assert summary["continued"] == [["varied", 14]] and "from conversation 14 on" in summary["instructions"]


def test_a_library_stream_cannot_go_on_with_varied_requests(tmp_path):
    library = {"conversations": [torch.ones(3)] * 7, "requests": "library"}  # (the check alone: no answering)
    with pytest.raises(ValueError, match="holds answers to library requests, not varied: pass another --out$"):
        chat_data.continue_stream(library, "varied", 14, tmp_path)
    with pytest.raises(ValueError, match="go on with --requests varied"):
        chat_data.continue_stream({"conversations": [], "requests": "everyday"}, "library", 7, tmp_path)
    chat_data.continue_stream(library, "library", 7, tmp_path)  # reading its own kind, or answering more of it
    chat_data.continue_stream(library, "library", 14, tmp_path)
    assert "continued" not in library


def test_held_out_requests_are_different_reproducible_and_none_a_stream_holds():
    categories = ("conversation", "qa", "math", "code")
    made = varied_requests.held_out_requests(12, categories, seen=lambda text: False)
    assert len(set(made)) == 12 and made == varied_requests.held_out_requests(12, categories, lambda text: False)
    assert made[3].endswith(varied_requests.MATH_ENDINGS) is False and made[2].endswith(varied_requests.MATH_ENDINGS)
    skipped = varied_requests.held_out_requests(12, categories, seen=lambda text: text in made[:4])
    assert not set(made[:4]) & set(skipped)
    with pytest.raises(ValueError, match="passages"):
        varied_requests.held_out_requests(2, ("qa", "rag"), seen=lambda text: False)
    with pytest.raises(ValueError, match="found only 0 of 2"):
        varied_requests.held_out_requests(2, categories, seen=lambda text: True)


def test_tuning_requests_in_the_varied_forms_skip_the_training_and_are_not_the_held_out_set(tmp_path):
    plain = varied_requests.tuning_requests(8)
    texts = [r[0]["content"] for r in plain]
    assert plain == varied_requests.tuning_requests(8) and len(set(texts)) == 8
    assert texts[2].endswith(varied_requests.MATH_ENDINGS)  # TUNING_CATEGORIES in turn: conversation, qa, math, code
    assert not set(texts) & set(varied_requests.held_out_requests(32, ("conversation", "qa", "math", "code"),
                                                                  seen=lambda text: False))  # a seed of their own
    kept = varied_requests.tuning_requests(8, seen=lambda text: text in texts[:4])
    assert not set(texts[:4]) & {r[0]["content"] for r in kept}
    with pytest.raises(ValueError, match="at least one"):
        varied_requests.tuning_requests(0)
    with pytest.raises(ValueError, match="found only 0 of 2 tuning requests in the varied forms"):
        varied_requests.tuning_requests(2, seen=lambda text: True)
    # through tuning_inputs, as `train eagle-tree --prompts varied` and `train scale --bench` ask for them
    tok = load_tokenizer(BUNDLED_DIR / "target")  # round-trips text (a request is found in a decoded conversation)
    torch.save({"conversations": [encode_chat(tok, plain[0]).to(torch.int32)]},
               tmp_path / "chat_conversations.pt")
    ids, described = tuning_inputs(tok, "varied", 4, tmp_path / "chat_conversations.pt")
    skipped = varied_requests.tuning_requests(4, seen=lambda text: text == texts[0])
    assert [i.tolist() for i in ids] == [encode_chat(tok, r).tolist() for r in skipped]
    assert "in the varied forms" in described and "none in the 1 conversations the head's training drew from" in described
