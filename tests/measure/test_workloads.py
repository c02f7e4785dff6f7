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
    for name in workloads.COPYING:
        records = [r for r in data["prompts"] if r["workload"] == name]
        assert len(records) == 8 and len(workloads.load_prompts(name, 8)) == 8
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
    assert workloads.build(per_workload=8, seed=shipped()["seed"]) == shipped()


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
