"""Prompt lookup (drafters.lookup_continuation, PromptLookupDrafter): which match it copies, its knobs
under their speclab, transformers and vLLM names, exactness, and bad input."""
import pytest
import torch

from speclab import PromptLookupDrafter, generate, load_drafter, speculative_generate
from speclab.methods.ngram import lookup_continuation
from tests.conftest import tiny_model

#      0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15 16 17 18 19 20
SEQ = [8, 1, 2, 3, 9, 1, 2, 4, 5, 7, 1, 2, 4, 5, 0, 1, 2, 6, 9, 1, 2]  # the tail (1, 2) also at 1, 5, 10, 15


@pytest.mark.parametrize("choose, expected", [
    ("latest", [6, 9, 1]),     # after the match at 15
    ("first", [3, 9, 1]),      # after the match at 1
    ("frequent", [4, 5, 0]),   # 4 follows two of four matches, 5 both of those, then 7 or 0: the latest
    ("longest", [4, 5, 7]),    # the match at 5 is preceded by 9, like the tail: 3 tokens agree, not 2
])
def test_each_choice_picks_its_match(choose, expected):
    assert lookup_continuation(SEQ, 3, max_ngram=2, choose=choose) == expected


def test_the_longest_ngram_with_a_match_wins_and_nothing_matches_gives_nothing():
    seq = [5, 6, 7, 1, 9, 6, 7, 2, 0, 7]
    assert lookup_continuation(seq, 2, max_ngram=3) == [2, 0]   # only the 1-gram (7,) matches; latest at 6
    assert lookup_continuation(seq + [2], 2, max_ngram=3) == [0, 7]  # (7, 2) matches at 6
    assert lookup_continuation([1, 2, 3], 4) == [] and lookup_continuation([4], 4) == []
    assert lookup_continuation(seq, 2, max_ngram=3, min_ngram=2) == []  # 1-grams not allowed


def test_tokens_per_proposal_are_capped_by_the_round():
    ids = torch.tensor(SEQ)
    assert len(PromptLookupDrafter(max_ngram=2, num_tokens=2).propose(ids, 5, None)) == 2
    assert len(PromptLookupDrafter(max_ngram=2, num_tokens=9).propose(ids, 3, None)) == 3  # cut to k, no error
    assert len(PromptLookupDrafter(max_ngram=2).propose(ids, 4, None)) == 4


def test_transformers_and_vllm_option_names_are_accepted():
    vllm = load_drafter("ngram", prompt_lookup_max=4, prompt_lookup_min=2, num_speculative_tokens=5)
    hf = load_drafter("ngram", max_matching_ngram_size=2, prompt_lookup_num_tokens=7)
    assert (vllm.max_ngram, vllm.min_ngram, vllm.num_tokens) == (4, 2, 5)
    assert (hf.max_ngram, hf.num_tokens) == (2, 7)
    with pytest.raises(ValueError, match="not both"):
        load_drafter("ngram", max_ngram=3, prompt_lookup_max=4)


@pytest.mark.parametrize("options, message", [
    (dict(min_ngram=0), "min_ngram"), (dict(min_ngram=3, max_ngram=2), "min_ngram"),
    (dict(num_tokens=0), "num_tokens"), (dict(choose="best"), "choose")])
def test_bad_settings_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        PromptLookupDrafter(**options)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_every_choice_is_exact(arch):
    target = tiny_model(arch, layers=2, seed=0)
    prompt = torch.tensor([5, 17, 42, 8, 23, 61, 7, 30, 5, 17, 42, 9, 23, 61, 7, 5, 17])
    reference = generate(target, prompt, max_new_tokens=40).tokens.tolist()
    for choose in ("latest", "first", "frequent", "longest"):
        for num_tokens in (None, 2):
            drafter = PromptLookupDrafter(max_ngram=3, choose=choose, num_tokens=num_tokens)
            result = speculative_generate(target, drafter, prompt, k=5, max_new_tokens=40)
            assert result.tokens.tolist() == reference, (arch, choose, num_tokens)
