"""Batched decoding (chapter 11): a list of prompts decoded together on the fast path's static cache, each
sequence in its own cache row at its own length. Greedy rows equal the target's own decoding, sampled rows
keep the target's distribution, rows never see each other, finished rows leave the batch, bad input is
refused with what to change."""
import numpy as np
import pytest
import torch

from speclab import generate, speculative_generate
from speclab.drafting import Draft
from speclab.measure.acceptance import chi_square_pvalue
from speclab.methods.draft_model import ModelDrafter
from speclab.methods.ngram import PromptLookupDrafter
from speclab.runner import disable_fast_path, enable_fast_path, fast_path_of, runner_for
from tests.conftest import tiny_model
from tests.test_lossless import SAMPLES, exact_joint

PROMPTS = [torch.tensor([5, 17, 42, 8, 23, 61, 7, 30]), torch.tensor([3, 9, 4]),
           torch.tensor([11, 2, 33, 44, 5, 6, 70, 8, 9, 10, 12, 13]), torch.tensor([7])]


def on_fast_path(mode: str, *models, max_len: int = 64, max_batch: int = 4):
    for model in models:
        enable_fast_path(model, mode, max_len=max_len, max_batch=max_batch)


def off_fast_path(*models):
    for model in models:
        disable_fast_path(model)


@pytest.fixture(scope="module")
def alone():
    """Each prompt decoded by itself on the eager path (transformers' model): the reference."""
    target = tiny_model("llama", layers=2, seed=0)
    return [generate(target, p, max_new_tokens=20).tokens.tolist() for p in PROMPTS]


@pytest.fixture()
def batch_pair(pair):
    target, draft = pair
    on_fast_path("static", target, draft)
    yield target, draft
    off_fast_path(target, draft)


def drafters(draft):
    return {"draft model": ModelDrafter(draft), "prompt lookup": PromptLookupDrafter()}


def test_batched_target_only_equals_each_prompt_decoded_alone(batch_pair, alone):
    target, _ = batch_pair
    rows = generate(target, PROMPTS, max_new_tokens=20)
    assert [r.tokens.tolist() for r in rows] == alone
    assert all(r.stats.batch == len(PROMPTS) for r in rows)


@pytest.mark.parametrize("method", ["draft model", "prompt lookup"])
@pytest.mark.parametrize("k", [1, 3])
def test_every_batched_chain_drafter_equals_target_only(batch_pair, alone, method, k):
    target, draft = batch_pair
    rows = speculative_generate(target, drafters(draft)[method], PROMPTS, k=k, max_new_tokens=20)
    assert [r.tokens.tolist() for r in rows] == alone
    if method == "draft model":  # the draft agrees with the target sometimes: drafts are really accepted
        assert sum(r.stats.accepted for r in rows) > 0


def test_a_batch_of_one_is_the_single_sequence_path(batch_pair):
    target, draft = batch_pair
    one = speculative_generate(target, ModelDrafter(draft), PROMPTS[0], k=3, max_new_tokens=20)
    listed = speculative_generate(target, ModelDrafter(draft), [PROMPTS[0]], k=3, max_new_tokens=20)
    assert isinstance(listed, list) and len(listed) == 1
    assert listed[0].tokens.tolist() == one.tokens.tolist()
    assert [r.drafted for r in listed[0].trace] == [r.drafted for r in one.trace]


def test_rows_of_a_batch_never_see_each_other(batch_pair):
    """Change one sequence's prompt: the other sequences' logits do not move, in the prefill and after."""
    target, _ = batch_pair
    runner = runner_for(target)
    prompts = [PROMPTS[0], PROMPTS[1], PROMPTS[2]]
    logits = []
    for middle in (PROMPTS[1], torch.tensor([90, 91, 92, 93, 94, 95, 96 - 1])):
        runner.reset()
        first = runner.forward_rows([0, 1, 2], [prompts[0], middle, prompts[2]])
        step = runner.forward_rows([0, 1, 2], [torch.tensor([4]), torch.tensor([6]), torch.tensor([8])])
        logits.append([first[0], first[2], step[0], step[2]])
    for before, after in zip(*logits):
        torch.testing.assert_close(after, before, rtol=0, atol=1e-6)
    assert not torch.allclose(step[1], runner.forward_rows([1], [torch.tensor([6])])[0])  # row 1 did move on


def test_a_row_reading_another_rows_cache_is_caught(batch_pair):
    """The same check fails when the cache rows are crossed: feeding row 1's step into row 2's cache."""
    target, _ = batch_pair
    runner = runner_for(target)
    runner.forward_rows([0, 1, 2], [PROMPTS[0], PROMPTS[1], PROMPTS[2]])
    right = runner.forward_rows([1], [torch.tensor([6])])[0]
    runner.rollback(runner.lengths[1] - 1, 1)
    runner.lengths[2] = runner.lengths[1]  # the off-by-row bug: row 1's token, row 2's cache
    crossed = runner.forward_rows([2], [torch.tensor([6])])[0]
    assert not torch.allclose(right, crossed, atol=1e-3)


def test_finished_sequences_leave_the_batch(batch_pair, alone, monkeypatch):
    """A sequence that stops (here: at an EOS only it produces) costs no more passes; the others go on
    in their own rows (gathered from the cache: no longer rows 0..B-1) to the same tokens."""
    target, draft = batch_pair
    stop = next(t for t in alone[0][2:] if t not in sum(alone[1:], []))
    path = fast_path_of(target)
    batches = []
    forward = path.network.forward
    monkeypatch.setattr(path, "step", lambda ids, *a: batches.append(ids.shape[0] if ids.dim() == 2 else 1)
                        or forward(ids, *a))
    rows = speculative_generate(target, ModelDrafter(draft), PROMPTS, k=2, max_new_tokens=20, eos_token_id=stop)
    cut = alone[0].index(stop) + 1
    assert rows[0].tokens.tolist() == alone[0][:cut]
    assert [r.tokens.tolist() for r in rows[1:]] == [a[:a.index(stop) + 1] if stop in a else a for a in alone[1:]]
    rounds = batches[batches.index(4):]  # after the prefill (the one-token prompt needs none)
    assert 3 in rounds and rounds[-1] < 4


@pytest.mark.parametrize("mode", ["compiled"])
def test_the_compiled_path_pads_the_batch_and_decodes_the_same_tokens(pair, alone, mode):
    """Compiled, three sequences run as a batch of four (the scratch row pads it), then fewer as they
    finish: the same tokens."""
    target, draft = pair
    on_fast_path(mode, target, draft)
    try:
        rows = speculative_generate(target, ModelDrafter(draft), PROMPTS[:3], k=2, max_new_tokens=20)
        assert [r.tokens.tolist() for r in rows] == alone[:3]
    finally:
        off_fast_path(target, draft)


def feature_drafters(target):
    """EAGLE-1's and EAGLE-3's heads drafting chains, and an MTP module chained twice: random weights, the
    target's own shapes."""
    from speclab.methods.eagle import EagleDrafter
    from speclab.methods.mtp import MtpDrafter
    from tests.methods.test_eagle import random_head, random_head3
    from tests.methods.test_mtp import random_module
    return {"eagle chain": lambda: EagleDrafter(random_head(target), target, tree="chain"),
            "eagle-3 chain": lambda: EagleDrafter(random_head3(target), target, tree="chain"),
            "mtp x2": lambda: MtpDrafter(random_module(target), target, num_tokens=2)}


@pytest.mark.parametrize("method", ["eagle chain", "eagle-3 chain", "mtp x2"])
def test_feature_drafters_draft_each_row_as_they_draft_it_alone(batch_pair, alone, method):
    """A batch of chains from a head on the target's features: every row's drafts, round by round, are
    the ones the same head drafts for that prompt alone, and the tokens are target-only's."""
    target, _ = batch_pair
    make = feature_drafters(target)[method]
    assert make().batched
    rows = speculative_generate(target, make(), PROMPTS, k=3, max_new_tokens=20)
    assert [r.tokens.tolist() for r in rows] == alone
    for prompt, row in zip(PROMPTS, rows):
        single = speculative_generate(target, make(), prompt, k=3, max_new_tokens=20)
        assert [r.drafted for r in row.trace] == [r.drafted for r in single.trace]


def test_eagle2s_dynamic_tree_drafts_one_sequence_at_a_time(batch_pair):
    from speclab.methods.eagle import EagleDrafter
    from tests.methods.test_eagle import random_head
    target, _ = batch_pair
    with pytest.raises(ValueError, match="one sequence at a time.*decode the prompts one at a time"):
        speculative_generate(target, EagleDrafter(random_head(target), target), PROMPTS, k=3, max_new_tokens=4)


# ---------------------------------------------------------------- sampling: lossless per row
SMALL_PROMPTS = [torch.tensor([3, 1, 4, 1, 5]), torch.tensor([2, 7]), torch.tensor([6, 0, 6, 0, 6, 0])]


@pytest.fixture(scope="module")
def small_batch_pair():
    target = tiny_model("llama", layers=2, vocab=8, seed=10, init=0.2)
    draft = tiny_model("llama", layers=1, vocab=8, seed=11, init=0.2)
    on_fast_path("static", target, draft, max_len=16, max_batch=3)
    yield target, draft
    off_fast_path(target, draft)


def batched_joints(target, draft, settings) -> list[np.ndarray]:
    counts = [np.zeros((8, 8)) for _ in SMALL_PROMPTS]
    for seed in range(SAMPLES):
        rows = speculative_generate(target, ModelDrafter(draft), SMALL_PROMPTS, k=2, max_new_tokens=3, seed=seed,
                                    **settings)
        for c, r in zip(counts, rows):
            t1, t2 = r.tokens.tolist()[:2]
            c[t1, t2] += 1
    return counts


def test_sampled_rows_each_keep_the_targets_distribution(small_batch_pair):
    target, draft = small_batch_pair
    settings = dict(temperature=1.0)
    for counts, prompt in zip(batched_joints(target, draft, settings), SMALL_PROMPTS):
        assert chi_square_pvalue(counts, exact_joint(target, settings, prompt)) > 1e-3


def test_the_check_catches_a_broken_rule_in_a_batch(small_batch_pair, monkeypatch):
    import speclab.verification as verification
    monkeypatch.setattr(verification, "residual_distribution", lambda p, q: p)
    target, draft = small_batch_pair
    settings = dict(temperature=1.0)
    p_values = [chi_square_pvalue(c, exact_joint(target, settings, p))
                for c, p in zip(batched_joints(target, draft, settings), SMALL_PROMPTS)]
    assert min(p_values) < 1e-6


# ---------------------------------------------------------------- bad input
def test_an_empty_prompt_in_a_batch_is_named(batch_pair):
    target, _ = batch_pair
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        generate(target, [PROMPTS[0], torch.tensor([], dtype=torch.long)], max_new_tokens=4)


def test_a_prompt_longer_than_the_static_cache_is_refused(pair):
    target, draft = pair
    on_fast_path("static", target, draft, max_len=16)
    try:
        with pytest.raises(ValueError, match="max_len"):
            speculative_generate(target, draft, [PROMPTS[0], torch.arange(20)], k=2, max_new_tokens=4)
    finally:
        off_fast_path(target, draft)


def test_prompts_on_different_devices_are_refused(batch_pair):
    target, _ = batch_pair
    with pytest.raises(ValueError, match="different devices"):
        generate(target, [PROMPTS[0], PROMPTS[1].to("meta")], max_new_tokens=4)


def test_a_batch_on_the_eager_path_says_to_enable_the_fast_path(pair):
    target, _ = pair
    with pytest.raises(ValueError, match="enable_fast_path"):
        generate(target, PROMPTS, max_new_tokens=4)


def test_a_batch_larger_than_the_cache_is_refused(batch_pair):
    target, _ = batch_pair
    with pytest.raises(ValueError, match="max_batch"):
        generate(target, PROMPTS + PROMPTS[:1], max_new_tokens=4)


def test_a_drafter_that_drafts_one_sequence_refuses_a_batch(batch_pair):
    class Changed(ModelDrafter):  # overrides how one sequence is drafted: its batch would skip that
        def propose(self, ids, k, sampling, generator=None) -> Draft:
            return super().propose(ids, k, sampling, generator)

    target, draft = batch_pair
    with pytest.raises(ValueError, match="one sequence at a time"):
        speculative_generate(target, Changed(draft), PROMPTS, k=2, max_new_tokens=4)


def test_layer_skipping_drafts_a_batch_on_a_view_of_the_target(batch_pair, alone):
    """The view of the target's first layers follows it onto a fast path of the same batch size."""
    from speclab.methods.layer_skip import LayerSkipDrafter
    target, _ = batch_pair
    drafter = LayerSkipDrafter(target, 1)
    assert drafter.batched
    rows = speculative_generate(target, drafter, PROMPTS, k=3, max_new_tokens=20)
    assert [r.tokens.tolist() for r in rows] == alone
    assert [shape[2] for shape in drafter.view_paths] == [4]  # max_batch follows the target's


def test_the_eager_paths_refusal_of_a_batch_names_a_function_that_exists(batch_pair):
    import importlib
    import re
    from speclab.runner import ModelRunner
    with pytest.raises(ValueError, match="one sequence at a time") as refused:
        ModelRunner(batch_pair[0], "target").only_row([0, 1])
    dotted = re.search(r"(speclab(?:\.\w+)+)\(", str(refused.value)).group(1)
    module, name = dotted.rsplit(".", 1)
    assert callable(getattr(importlib.import_module(module), name))
