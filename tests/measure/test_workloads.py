"""The workloads: shipped copying prompts built from held-out files, and the loader."""
import json
import sys

import pytest

from speclab.corpus import is_heldout, stdlib_root
from speclab.measure import workloads


def shipped() -> dict:
    return json.loads(workloads.SHIPPED.read_text())


def test_the_copying_sets_ship_eight_prompts_each_from_held_out_files():
    data = shipped()
    for name in workloads.SHIPPED_SETS:
        records = [r for r in data["prompts"] if r["workload"] == name]
        size = 16 if name == "edits" else 8  # the series: sixteen requests, all on one file
        assert len(records) == size and len(workloads.load_prompts(name, size)) == size
        if name == "edits":
            assert len({r["file"] for r in records}) == 1
        for r in records:
            assert "test" not in r["file"] and len(r["text"]) <= workloads.MAX_CHARS
            path = stdlib_root() / r["file"]
            if path.exists():  # the split is by path, so it holds on any Python that has the file
                assert is_heldout(path)


def test_an_edit_prompt_ends_with_the_revised_signature_and_a_quote_prompt_opens_the_docstring():
    edit, quote = workloads.load_prompts("edit", 1)[0], workloads.load_prompts("quote", 1)[0]
    last = edit.rstrip("\n").splitlines()[-1]
    assert last.startswith("def ") and "_revised(" in last and "# Revised:" in edit
    assert quote.startswith("# Documentation of ") and quote.rstrip().split("\n")[-1].lstrip().startswith('"""')


@pytest.mark.skipif(sys.version.split()[0] != shipped()["python"], reason="the shipped set was built on another Python")
def test_building_again_on_the_same_python_gives_the_shipped_set():
    built, data = workloads.build(per_workload=8, seed=shipped()["seed"]), shipped()
    # The edit set shipped before segment() kept a top-level function's indentation (it stripped every
    # line); it stays as shipped, so that chapters 6, 8 and 9's records keep their prompts ("note").
    assert "edit" in data["note"]
    for name in ("quote", "edits"):
        assert [r for r in built["prompts"] if r["workload"] == name] == \
            [r for r in data["prompts"] if r["workload"] == name]


def test_the_loader_says_what_to_change():
    with pytest.raises(ValueError, match="choose from"):
        workloads.load_prompts("poetry")
    with pytest.raises(ValueError, match="at most"):
        workloads.load_prompts("edit", 99)
    with pytest.raises(ValueError, match=">= 1"):
        workloads.load_prompts("code", 0)
    assert len(workloads.load_prompts("code", 2)) == 2


def test_timed_code_prompts_never_include_the_tuning_set():
    from speclab.corpus import heldout_prompts
    timed, tuning = workloads.load_prompts("code", 10), workloads.tuning_prompts()
    assert len(timed) == 10 and len(tuning) == 8 and not set(timed) & set(tuning)
    held = heldout_prompts("code", 18)
    assert timed == held[:4] + held[12:] and tuning == held[4:12]
    assert workloads.load_prompts("code", 4) == held[:4]  # the first four stay the bench's default
    assert workloads.tuning_prompts(3) == held[4:7]
    with pytest.raises(ValueError, match="1 to 8"):
        workloads.tuning_prompts(9)


# ================================================================ chat prompts by task
SPEC_BENCH = {"multi-turn conversation", "translation", "summarization", "question answering",
              "mathematical reasoning", "retrieval-augmented generation"}


def test_every_spec_bench_category_and_code_ship_four_chat_prompts_with_source_and_licence():
    data = json.loads(workloads.CHAT_SHIPPED.read_text())
    assert SPEC_BENCH <= set(data["spec_bench_categories"].values())
    assert set(data["spec_bench_categories"]) == set(workloads.CHAT_CATEGORIES)
    ids = [r["id"] for r in data["prompts"]]
    assert len(ids) == len(set(ids))
    for category in workloads.CHAT_CATEGORIES:
        records = [r for r in data["prompts"] if r["category"] == category]
        assert len(records) == 4, category
        for r in records:
            assert r["source"].strip() and r["licence"].strip()
            roles = [m["role"] for m in r["messages"]]
            assert roles[-1] == "user" and set(roles) <= {"system", "user", "assistant"}
            assert all(m["content"].strip() for m in r["messages"])
    conversations = [r for r in data["prompts"] if r["category"] == "conversation"]
    assert all(len(r["messages"]) >= 3 for r in conversations)  # earlier turns, then the one answered


def test_chat_workloads_load_expand_and_refuse_what_they_do_not_hold():
    assert workloads.expand_workloads("code, chat") == ["code", *workloads.CHAT]
    assert workloads.expand_workloads("chat-qa") == ["chat-qa"]
    with pytest.raises(ValueError, match="unknown workload 'chat-poetry'.*chat-qa"):
        workloads.expand_workloads("chat-poetry")
    with pytest.raises(ValueError, match="ships 4 prompts"):
        workloads.load_chats("chat-math", 5)
    with pytest.raises(ValueError, match="not a chat workload"):
        workloads.load_chats("code", 1)
    text = workloads.load_prompts("chat-rag", 1)[0]
    assert text.startswith("User: Answer the question using only the document") and text.endswith("Assistant:")


def test_chat_prompts_go_through_the_chat_template_where_the_tokenizer_has_one():
    from tests.test_packaged import TEMPLATE, chat_tokenizer
    tok = chat_tokenizer()
    assert tok.chat_template == TEMPLATE
    messages = workloads.load_chats("chat-conversation", 1)[0]
    rendered = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert rendered.endswith("<assistant>") and rendered.count("<user>") == 2
    ids = workloads.prompt_ids(tok, "chat-conversation", 2)
    assert len(ids) == 2 and ids[0].tolist() == tok(rendered).input_ids
    tok.chat_template = None  # the bundled pair's tokenizer has none: plain role lines instead
    plain = workloads.prompt_ids(tok, "chat-conversation", 1)[0]
    assert plain.tolist() == tok(workloads.chat_text(messages)).input_ids != ids[0].tolist()
