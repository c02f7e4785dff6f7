"""Chat training rows: instructions in the seven categories, none sharing material with a bench prompt,
answered by the target, resumable, packed into rows without padding."""
import random

import pytest
import torch

from speclab.measure.workloads import chat_records, encode_chat
from speclab.train import chat_data
from tests.conftest import tiny_model
from tests.test_packaged import chat_tokenizer

WORDS = "w1 w2 w3 w4 w5 w6 w7 w8"


@pytest.fixture()
def small_library(monkeypatch):
    """A few stand-in paragraphs, sentences and functions instead of the whole standard library."""
    texts = ([f"paragraph {i} about sorting lists and dictionaries in place " * 3 for i in range(5)],
             [f"Sentence number {i} says something plain." for i in range(5)],
             [f"def f{i}(x):\n    return x + {i}" for i in range(5)])
    monkeypatch.setattr(chat_data, "library_texts", lambda rng: texts)


def test_instructions_take_the_categories_in_turn_and_are_reproducible(small_library):
    first = chat_data.instructions(14, seed=0)
    assert first == chat_data.instructions(14, seed=0) and first != chat_data.instructions(14, seed=1)
    assert all(len(c) == 1 and c[0]["role"] == "user" for c in first)
    assert first[1][0]["content"].startswith("Translate the following text into")
    assert first[6][0]["content"].split("\n")[0].endswith(":") and "def f" in first[6][0]["content"]
    with pytest.raises(ValueError, match="unknown category 'poems'"):
        chat_data.instruction("poems", random.Random(0), *chat_data.library_texts(None))


def test_an_instruction_sharing_material_with_a_bench_prompt_is_refused():
    bench = chat_records()[0]["messages"][0]["content"]
    chat_data.check_disjoint([[{"role": "user", "content": "Summarize the following text in two sentences."}]])
    with pytest.raises(ValueError, match="overlaps a bench prompt"):
        chat_data.check_disjoint([[{"role": "user", "content": f"Please answer: {bench}"}]])
    for start in range(10):  # 60 shared characters at any offset are refused; 59 are not
        with pytest.raises(ValueError, match="overlaps a bench prompt"):
            chat_data.check_disjoint([[{"role": "user", "content": f"§{bench[start:start + 60]}§"}]])
        chat_data.check_disjoint([[{"role": "user", "content": f"§{bench[start:start + 59]}§"}]])


def test_pack_joins_conversations_with_eos_and_drops_only_the_tail():
    rows = chat_data.pack([torch.tensor([5, 6, 7]), torch.tensor([8, 9])], seq_len=3, eos=0)
    assert rows.tolist() == [[5, 6, 7], [0, 8, 9]] and rows.dtype == torch.int32
    with pytest.raises(ValueError, match="fewer than one row of 50"):
        chat_data.pack([torch.tensor([1, 2])], seq_len=50, eos=0)


def test_the_targets_answers_are_saved_batch_by_batch_and_resumed(small_library, tmp_path):
    target, tok = tiny_model("llama", layers=1, vocab=64, seed=0), chat_tokenizer()
    first = chat_data.chat_conversations(target, tok, tmp_path, n=4, max_new_tokens=6, batch=2)
    assert len(first) == 4 and all(c.dtype == torch.int32 for c in first)
    prompt = encode_chat(tok, chat_data.instructions(4)[0])
    assert torch.equal(first[0][:len(prompt)], prompt.to(torch.int32)) and len(first[0]) > len(prompt)
    more = chat_data.chat_conversations(target, tok, tmp_path, n=6, max_new_tokens=6, batch=2)
    assert all(torch.equal(a, b) for a, b in zip(first, more[:4])) and len(more) == 6
    train, held = chat_data.chat_rows(target, tok, tmp_path, n=6, seq_len=4)
    assert train.shape[1] == held.shape[1] == 4 and len(held) >= 1


def test_answer_next_marks_where_the_target_speaks_as_itself_across_packed_rows():
    tok = chat_tokenizer()
    eos = tok.eos_token_id
    answered = torch.cat([encode_chat(tok, [{"role": "user", "content": "w1 w2"}]),  # <user> w1 w2 <assistant>
                          torch.tensor(tok("w3 w4", add_special_tokens=False).input_ids + [eos])])
    unanswered = encode_chat(tok, [{"role": "user", "content": "w1"}])  # <user> w1 <assistant>, cut before a reply
    rows = chat_data.pack([answered, unanswered], seq_len=6, eos=eos)
    assert chat_data.assistant_header(tok) == tok("<assistant>", add_special_tokens=False).input_ids
    # the answer's tokens are w3, w4 and its end of turn (4, 5, 6) and the second's end (11): each is "next" to
    # the position before it; the packing EOS after a finished answer (7) and the requests are not answers
    expected = [False] * 12
    for t in (3, 4, 5, 10):
        expected[t] = True
    marks = chat_data.answer_next(rows, tok)
    assert marks.shape == rows.shape and marks.flatten().tolist() == expected
    assert torch.equal(chat_data.answer_next(rows.view(1, -1), tok).flatten(), marks.flatten())
