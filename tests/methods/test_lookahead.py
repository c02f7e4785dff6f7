"""Lookahead decoding (speclab.methods.lookahead): the pool, the window's mask, the side branch of the verify
pass, greedy exactness, losslessness when sampling, and bad input."""
import numpy as np
import pytest
import torch
from transformers import DynamicCache

import speclab.decoding as decoding
from speclab import Draft, generate, load_drafter, speculative_generate
from speclab.drafting import SideBranch
from speclab.measure.acceptance import chi_square_pvalue
from speclab.methods.lookahead import (LookaheadDrafter, NgramPool, candidate_tree, jacobi_decode, pass_visibility,
                               window_ngrams, window_positions,
                               window_sees)
from speclab.trees import tree_attention_mask, tree_position_ids
from speclab.runner import ModelRunner
from tests.conftest import tiny_model
import tests.test_lossless as lossless
from tests.test_lossless import VOCAB

REPEATING = torch.tensor([5, 17, 42, 8, 23, 61, 7, 30, 5, 17, 42, 9, 23, 61, 7])


# ---------------------------------------------------------------- the pool and the window
def test_the_pool_keeps_the_latest_g_per_key():
    pool = NgramPool(3, per_key=2)
    for gram in [(1, 2, 3), (1, 4, 5), (1, 6, 7), (2, 2, 2)]:
        pool.add(gram)
    assert pool.candidates(1) == [(6, 7), (4, 5)]  # (2, 3) was the least recent
    pool.add((1, 4, 5))  # re-adding makes it the most recent
    assert pool.candidates(1) == [(4, 5), (6, 7)] and len(pool) == 3
    assert pool.candidates(99) == []
    pool.add_text([9, 8, 7, 9, 8, 6])
    assert pool.candidates(9) == [(8, 6), (8, 7)] and pool.candidates(8) == [(7, 9)]
    with pytest.raises(ValueError, match="3-grams"):
        pool.add((1, 2))


def test_candidates_merge_into_a_trie_without_duplicate_siblings():
    tokens, parents = candidate_tree([(4, 5, 6), (4, 5, 7), (8, 9, 1), (4, 2, 2)])
    assert tokens == [4, 5, 6, 7, 8, 9, 1, 2, 2]
    assert parents == [-1, 0, 1, 1, -1, 4, 5, 0, 7]
    assert candidate_tree([]) == ([], [])


def test_the_window_mask_is_causal_on_level_0_and_diagonal_above():
    sees = window_sees(width=3, levels=2).int().tolist()
    assert sees == [
        [1, 0, 0, 0, 0, 0],  # L0[0]
        [1, 1, 0, 0, 0, 0],  # L0[1]
        [1, 1, 1, 0, 0, 0],  # L0[2]
        [1, 0, 0, 1, 0, 0],  # L1[0]: L0[0] and itself
        [1, 1, 0, 0, 1, 0],  # L1[1]: L0[0..1] and itself
        [1, 1, 1, 0, 0, 1],  # L1[2]: L0[0..2] and itself
    ]
    assert window_positions(3, 2) == [1, 2, 3, 2, 3, 4]
    # each row sees exactly one token per position below its own: a consecutive causal sequence
    for level in range(2):
        for i in range(3):
            row = level * 3 + i
            seen = [window_positions(3, 2)[c] for c in range(6) if sees[row][c]]
            assert sorted(seen) == list(range(1, 2 + i + level))


def test_a_full_window_yields_columns_plus_the_output_as_ngrams():
    assert window_ngrams([[1, 2], [3, 4], [5, 6]], [7, 8]) == [(1, 3, 5, 7), (2, 4, 6, 8)]


def test_side_rows_and_nodes_never_see_each_other():
    sees = torch.tensor([[True, False], [True, True]])
    mask = tree_attention_mask([-1, 0], 4, torch.float32, side_sees=sees)[0, 0] == 0  # (5, 4 + 5)
    rows = mask[:, 4:].int().tolist()
    assert rows == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 0, 0, 1, 0], [1, 0, 0, 1, 1]]
    assert bool(mask[:, :4].all())  # everyone sees the cached prefix
    assert tree_position_ids([-1, 0], 4, side_depths=[1, 2]).tolist() == [[4, 5, 6, 5, 6]]


@torch.inference_mode()
def test_one_pass_gives_each_window_token_the_logits_of_its_own_sequence():
    """The side rows' logits equal a plain forward over [prompt, L0[0..i], L1[i], ..., Ll[i]]: the mask
    and positions make the single pass compute every Jacobi guess exactly."""
    target = tiny_model("llama", layers=2, seed=0)
    prompt = REPEATING
    levels = [[3, 9, 11], [40, 41, 42], [50, 51, 52]]
    width, n_levels = 3, 3
    flat = torch.tensor([t for level in levels for t in level])
    side = SideBranch(flat, window_positions(width, n_levels), window_sees(width, n_levels))
    runner = ModelRunner(target)
    runner.forward(prompt[:-1])
    draft = torch.tensor([17, 42])  # a chain the window must not see
    logits, _ = runner.verify_pass(torch.cat([prompt[-1:], draft, flat]), None, (), side)
    for level in range(n_levels):
        for i in range(width):
            sequence = torch.cat([prompt, torch.tensor(levels[0][:i + 1] + [levels[m][i] for m in range(1, level + 1)])])
            plain = target(sequence.view(1, -1)).logits[0, -1]
            torch.testing.assert_close(logits[3 + level * width + i], plain, atol=1e-4, rtol=1e-4)
    chain = target(torch.cat([prompt, draft]).view(1, -1)).logits[0, -3:]
    torch.testing.assert_close(logits[:3], chain, atol=1e-4, rtol=1e-4)


def test_side_rows_leave_no_trace_in_the_cache(prompt):
    """After every round the cache equals a fresh forward over the accepted text (the window's rows
    were appended in the pass and must be gone)."""

    class Checked(LookaheadDrafter):
        rounds = 0

        def update(self, ids, num_accepted):
            super().update(ids, num_accepted)
            fresh = DynamicCache(config=target.config)
            with torch.inference_mode():
                target(input_ids=ids[:-1].view(1, -1), past_key_values=fresh, use_cache=True)
            runner = self.runner_for_test
            assert runner.length == len(ids) - 1
            for mine, theirs in zip(runner.cache.layers, fresh.layers):
                torch.testing.assert_close(mine.keys, theirs.keys, atol=1e-5, rtol=1e-4)
            Checked.rounds += 1

    target = tiny_model("llama", layers=2, seed=0)
    drafter = Checked(window=3, ngram=3, pool=3)
    original = decoding.runner_for

    def spy(model, who="model"):  # the loop's runner, kept for the checks
        drafter.runner_for_test = ModelRunner(model, who)
        return drafter.runner_for_test

    decoding.runner_for = spy
    try:
        result = speculative_generate(target, drafter, REPEATING, k=3, max_new_tokens=30)
    finally:
        decoding.runner_for = original
    assert Checked.rounds == result.stats.rounds > 0


# ---------------------------------------------------------------- greedy exactness
SETTINGS_WNG = [(4, 4, 4), (1, 2, 1), (3, 2, 2), (5, 5, 3), (2, 3, 1)]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_greedy_lookahead_equals_target_only(arch):
    target = tiny_model(arch, layers=2, seed=0)
    reference = generate(target, REPEATING, max_new_tokens=40).tokens.tolist()
    accepted = 0
    for window, ngram, pool in SETTINGS_WNG:
        for from_context in (True, False):
            drafter = load_drafter("lookahead", window=window, ngram=ngram, pool=pool, from_context=from_context)
            result = speculative_generate(target, drafter, REPEATING, k=6, max_new_tokens=40)
            assert result.tokens.tolist() == reference, (arch, window, ngram, pool, from_context)
            assert result.stats.verified_positions >= result.stats.rounds * (1 + window * (ngram - 1))
            accepted += result.stats.accepted
    assert accepted > 0  # the checks above tested accepted candidates, not only empty drafts


def test_candidates_deeper_than_k_are_cut_not_refused():
    target = tiny_model("llama", layers=2, seed=0)
    reference = generate(target, REPEATING, max_new_tokens=30).tokens.tolist()
    result = speculative_generate(target, load_drafter("lookahead", window=3, ngram=6, pool=4), REPEATING, k=2,
                                  max_new_tokens=30)
    assert result.tokens.tolist() == reference
    assert all(r.accepted <= 2 for r in result.trace) and max(len(r.drafted) for r in result.trace) > 0


def test_the_bundled_target_decodes_exactly_with_lookahead():
    import speclab
    from speclab.corpus import heldout_prompts
    target, _, tok, _ = speclab.load_pair(device="cpu")
    prompt = tok(heldout_prompts("code", 1)[0], return_tensors="pt").input_ids[0]
    reference = generate(target, prompt, max_new_tokens=48).tokens.tolist()
    for window, ngram, pool in [(4, 4, 4), (2, 2, 1)]:
        drafter = load_drafter("lookahead", window=window, ngram=ngram, pool=pool)
        result = speculative_generate(target, drafter, prompt, k=4, max_new_tokens=48)
        assert result.tokens.tolist() == reference
        assert result.stats.mean_tokens_per_round > 1.2  # the pool's n-grams are accepted on real code


# ---------------------------------------------------------------- losslessness when sampling
# The pending 7 has two n-grams in the prompt, (7, 1, 0) and (7, 7, 1): sibling candidates 1 and 7, which
# this target gives most of its mass to, so the rule both accepts and rejects them often.
LOOKAHEAD_PROMPT = torch.tensor([7, 7, 1, 0, 6, 4, 7])


def exact_joint(target, settings) -> np.ndarray:
    return lossless.exact_joint(target, settings, LOOKAHEAD_PROMPT)


def sampled_joint(target, settings, samples=1000) -> tuple[np.ndarray, int]:
    counts, accepted = np.zeros((VOCAB, VOCAB)), 0
    drafter = LookaheadDrafter(window=3, ngram=3, pool=2)
    for seed in range(samples):
        result = speculative_generate(target, drafter, LOOKAHEAD_PROMPT, k=2, max_new_tokens=2, seed=seed, **settings)
        t1, t2 = result.tokens.tolist()
        counts[t1, t2] += 1
        accepted += result.stats.accepted
    return counts, accepted


LOSSLESS_SETTINGS = {"temperature 1": dict(temperature=1.0), "top-k 3": dict(temperature=1.0, top_k=3),
                     "temperature 0.8, top-p 0.8": dict(temperature=0.8, top_p=0.8)}


@pytest.mark.parametrize("name", list(LOSSLESS_SETTINGS))
def test_sampled_lookahead_follows_the_target(name):
    target = tiny_model("llama", layers=2, vocab=VOCAB, seed=10, init=0.2)
    settings = LOSSLESS_SETTINGS[name]
    counts, accepted = sampled_joint(target, settings)
    assert 200 < accepted  # candidates were verified and kept (and, the mass being < 1, refused too)
    assert chi_square_pvalue(counts, exact_joint(target, settings)) > 1e-3


def test_the_check_catches_candidates_treated_as_sampled(monkeypatch):
    """A deliberately broken rule: verifying the deterministic candidates as if drawn from a uniform q
    (accept with min(1, p / q)) over-accepts them; the same chi-square test must fail."""
    target = tiny_model("llama", layers=2, vocab=VOCAB, seed=10, init=0.2)
    monkeypatch.setattr(Draft, "proposal_probs", lambda self, v: torch.full((len(self), v), 1.0 / v))
    counts, _ = sampled_joint(target, LOSSLESS_SETTINGS["temperature 1"])
    assert chi_square_pvalue(counts, exact_joint(target, LOSSLESS_SETTINGS["temperature 1"])) < 1e-3


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("options, message", [
    (dict(window=0), "window"), (dict(ngram=1), "ngram"), (dict(pool=0), "pool"), (dict(window=2.5), "window")])
def test_bad_lookahead_settings_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        load_drafter("lookahead", **options)


def test_a_one_token_prompt_works():
    target = tiny_model("llama", layers=2, seed=0)
    prompt = torch.tensor([7])
    reference = generate(target, prompt, max_new_tokens=20).tokens.tolist()
    assert speculative_generate(target, load_drafter("lookahead"), prompt, k=3, max_new_tokens=20).tokens.tolist() \
        == reference


def test_bad_side_branches_are_refused():
    with pytest.raises(ValueError, match="offset >= 1"):
        SideBranch(torch.tensor([1, 2]), [0, 1], torch.eye(2, dtype=torch.bool))
    with pytest.raises(ValueError, match="diagonal"):
        SideBranch(torch.tensor([1, 2]), [1, 2], torch.zeros(2, 2, dtype=torch.bool))


# ---------------------------------------------------------------- the teaching helpers
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_jacobi_iteration_converges_to_greedy_within_width_iterations(arch):
    target = tiny_model(arch, layers=2, seed=0)
    history = jacobi_decode(target, REPEATING, width=6)
    assert history[-1] == generate(target, REPEATING, max_new_tokens=6).tokens.tolist()
    assert 2 <= len(history) <= 7
    # after iteration t at least the first t positions are final
    for t, block in enumerate(history[1:], start=1):
        assert block[:t] == history[-1][:t]


def test_the_pass_layout_shows_candidates_and_window_apart():
    drafter = LookaheadDrafter(window=2, ngram=3, pool=2)
    drafter.start(torch.tensor([4, 5, 6, 4, 5, 7, 4]))
    draft = drafter.propose(torch.tensor([4, 5, 6, 4, 5, 7, 4]), 4, None)
    assert draft.tokens.tolist() == [5, 7, 6] and draft.parents == [-1, 0, 0]  # (5, 7) and (5, 6) merged
    sees = pass_visibility(draft)
    assert sees.shape == (1 + 3 + 2, 1 + 3 + 2)
    assert not sees[4:, 1:4].any() and not sees[1:4, 4:].any() and sees[:, 0].all()
