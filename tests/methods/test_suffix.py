"""Suffix decoding (speclab.methods.suffix): the trie's counts, the draft by frequency (chain and tree, the
spec factor and the probability floor), the global tree across requests and its bound, vLLM's option
names, exactness greedy and sampled (chi-square, with a broken rule that fails)."""
import pytest
import torch

import tests.test_lossless as small
from speclab import generate, load_drafter, speculative_generate
from speclab.measure.lossless import lossless_check
from speclab.methods.suffix import SuffixDrafter, SuffixTrie, draft_from
from speclab.sampling import SamplingParams
from tests.conftest import tiny_model

GREEDY = SamplingParams()


def test_the_trie_counts_every_substring_up_to_its_depth_and_removal_undoes_it():
    trie = SuffixTrie(depth=3)
    trie.extend(1, [1, 2, 3, 1, 2, 4])
    assert trie.find([1, 2])[1] == 2 and trie.find([2, 3])[1] == 1 and trie.find([1, 2, 4])[1] == 1
    assert trie.find([1, 2, 3, 1]) is None  # longer than the depth: never kept
    trie.close(1)
    trie.extend(1, [1, 2, 3, 1, 2, 4], sign=-1)
    assert trie.root == {}


def test_the_chain_follows_the_most_frequent_child_and_stops_below_the_floor():
    trie = SuffixTrie(depth=8)
    for i, seq in enumerate([[7, 1, 2, 3], [7, 1, 2, 3], [7, 1, 5, 6]]):
        trie.extend(i, seq)
        trie.close(i)
    node, _ = trie.find([7])
    assert draft_from(node, 5, 0.1, tree=False)[0] == [1, 2, 3]   # 2 of 3 continue with 2
    assert draft_from(node, 5, 0.7, tree=False)[0] == [1]         # 2/3 < 0.7: stop after 1
    tokens, parents, score = draft_from(node, 5, 0.1, tree=True)
    assert tokens[:3] == [1, 2, 3] and set(tokens) == {1, 2, 3, 5, 6} and parents[tokens.index(5)] == 0
    assert score == pytest.approx(1 + 2 / 3 + 2 / 3 + 1 / 3 + 1 / 3)


def test_a_longer_match_earns_a_longer_draft_under_the_spec_factor():
    drafter = SuffixDrafter(max_spec_factor=1.0)
    seq = torch.tensor([9, 8, 1, 2, 3, 4, 5, 6, 7, 0, 9, 8])
    drafter.start(seq)
    assert drafter.propose(seq, 10, GREEDY).tokens.tolist() == [1, 2]  # matched 2 tokens: at most 2
    assert len(SuffixDrafter(max_spec_factor=2.0).propose(seq, 10, GREEDY)) == 4


def test_earlier_requests_outputs_are_drafted_until_they_are_evicted_or_forgotten():
    drafter = SuffixDrafter(max_cached_requests=1)
    drafter.start(torch.tensor([5]))
    drafter.propose(torch.tensor([5, 40, 41, 42, 43, 44]), 4, GREEDY)  # the output so far is read
    drafter.start(torch.tensor([6]))  # the first request ends: its output joins the global tree
    assert drafter.propose(torch.tensor([6, 40, 41]), 4, GREEDY).tokens.tolist() == [42, 43]
    drafter.propose(torch.tensor([6, 40, 41, 70, 71]), 4, GREEDY)  # this request drafted 42 43; it went 70 71
    drafter.start(torch.tensor([40, 41]))  # the second ends too: the first is dropped (one cached)
    assert drafter.propose(torch.tensor([40, 41]), 4, GREEDY).tokens.tolist() == [70, 71]
    drafter.forget_requests()
    assert len(drafter.propose(torch.tensor([40, 41]), 4, GREEDY)) == 0
    drafter.propose(torch.tensor([40, 41, 90, 91]), 4, GREEDY)  # a request under way when the memory is emptied
    drafter.forget_requests()
    drafter.start(torch.tensor([5, 90]))  # ...is not cached by the next start
    assert len(drafter.propose(torch.tensor([5, 90]), 4, GREEDY)) == 0
    none_kept = SuffixDrafter(max_cached_requests=0)
    none_kept.start(torch.tensor([5]))
    none_kept.propose(torch.tensor([5, 40, 41, 42]), 4, GREEDY)
    none_kept.start(torch.tensor([40, 41]))
    assert len(none_kept.propose(torch.tensor([40, 41]), 4, GREEDY)) == 0


def test_vllm_option_names_are_accepted_and_bad_settings_refused():
    drafter = load_drafter("suffix", suffix_decoding_max_tree_depth=8, suffix_decoding_max_cached_requests=0,
                           suffix_decoding_max_spec_factor=2.0, suffix_decoding_min_token_prob=0.2)
    assert (drafter.max_tree_depth, drafter.max_cached_requests, drafter.max_spec_factor,
            drafter.min_token_prob) == (8, 0, 2.0, 0.2)
    for bad, message in [(dict(max_tree_depth=0), "depth"), (dict(max_cached_requests=-1), "max_cached_requests"),
                         (dict(min_token_prob=1.5), "min_token_prob"), (dict(max_spec_factor=0), "max_spec_factor")]:
        with pytest.raises(ValueError, match=message):
            SuffixDrafter(**bad)


@pytest.mark.parametrize("tree", [False, True])
def test_greedy_output_equals_target_only_over_a_series_of_requests(tree):
    target = tiny_model("llama", layers=2, seed=0)
    drafter = SuffixDrafter(tree=tree)
    prompts = [torch.tensor([5, 17, 42, 8, 23, 61, 7, 30, 5, 17, 42, 9, 23, 61, 7, 5, 17]),
               torch.tensor([3, 17, 42, 8, 23]), torch.tensor([5, 17, 42])]
    accepted = 0
    for prompt in prompts:
        reference = generate(target, prompt, max_new_tokens=40).tokens.tolist()
        result = speculative_generate(target, drafter, prompt, k=6, max_new_tokens=40)
        assert result.tokens.tolist() == reference
        accepted += result.stats.accepted
    assert accepted > 0  # the drafts were used, not an empty drafter passing trivially


def test_sampling_with_suffix_trees_is_lossless_and_the_rule_without_residual_is_not():
    target = tiny_model("llama", layers=2, vocab=small.VOCAB, seed=10, init=0.2)
    # "3" is followed by 3 and by 4 in the prompt: a tree whose two first tokens the target gives 0.47 and
    # 0.18 (found by search), so rejections are common and the missing residual shows
    prompt = torch.tensor([4, 4, 2, 2, 3, 3, 3, 4, 3, 3])
    report = lossless_check(target, lambda: SuffixDrafter(tree=True, min_token_prob=0.0), prompt, samples=1500,
                            top=4, k=3)
    assert report["p_value"] > 1e-3 and report["broken_p_value"] < 1e-6
