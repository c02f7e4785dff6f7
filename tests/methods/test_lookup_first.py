"""Prompt lookup first, a trained drafter otherwise (speclab.methods.lookup_first): greedy output equals
the target's, sampling keeps its distribution (and a broken rule is caught), each round is drafted by the
one it should be, the drafter keeps up through the rounds lookup drafted, batches, and bad input."""
import numpy as np
import pytest
import torch

import tests.test_lossless as lossless
from speclab import generate, load_drafter, speculative_generate
from speclab.measure.acceptance import chi_square_pvalue
from speclab.measure.lossless import replayed_passes
from speclab.measure.bench import drafter_for
from speclab.methods import REGISTRY
from speclab.methods.draft_model import ModelDrafter
from speclab.methods.eagle import EagleDrafter
from speclab.methods.lookup_first import NAME, LookupFirstDrafter
from speclab.methods.ngram import PromptLookupDrafter, lookup_continuation
from speclab.runner import disable_fast_path, enable_fast_path
from tests.conftest import tiny_model
from tests.methods.test_eagle import random_head3

# repeats "5 17 42", so lookup matches in some rounds and not in others
PROMPT = torch.tensor([5, 17, 42, 8, 23, 61, 7, 30, 5, 17, 42, 9, 11, 5, 17])


def drafters(target, draft):
    return {"draft_model": lambda: ModelDrafter(draft),
            "eagle3 chain": lambda: EagleDrafter(random_head3(target), target, tree="chain"),
            "eagle3 tree": lambda: EagleDrafter(random_head3(target), target, top_k=2, depth=3, total_tokens=6)}


@pytest.fixture(scope="module")
def models():
    return tiny_model("llama", layers=4, seed=0), tiny_model("llama", layers=1, seed=1)


@pytest.mark.parametrize("inner", ["draft_model", "eagle3 chain", "eagle3 tree"])
@pytest.mark.parametrize("min_ngram", [1, 2])
def test_greedy_output_equals_target_only(models, inner, min_ngram):
    target, draft = models
    reference = generate(target, PROMPT, max_new_tokens=30).tokens.tolist()
    for k in (1, 3):
        drafter = LookupFirstDrafter(drafters(target, draft)[inner](), min_ngram=min_ngram)
        assert speculative_generate(target, drafter, PROMPT, k=k, max_new_tokens=30).tokens.tolist() == reference
        assert drafter.lookup_rounds > 0 and drafter.drafter_rounds > 0


def prefixes(prompt: torch.Tensor, trace) -> list[torch.Tensor]:
    """The sequence at the start of each round of `trace`."""
    out, ids = [], prompt.tolist()
    for r in trace:
        out.append(torch.tensor(ids))
        ids = ids + r.new_tokens
    return out


@pytest.mark.parametrize("inner", ["draft_model", "eagle3 chain"])
def test_lookup_drafts_where_the_tail_repeats_and_the_drafter_keeps_up_elsewhere(models, inner):
    """Each round is lookup's proposal where the sequence's last 2-3 tokens occurred before; every other
    round is what the drafter proposes for that sequence when started afresh on it: the rounds lookup
    drafted left the drafter's state (its cache, or the head's features) where it should be."""
    target, draft = models
    make, k = drafters(target, draft)[inner], 2
    drafter = LookupFirstDrafter(make())
    result = speculative_generate(target, drafter, PROMPT, k=k, max_new_tokens=24)
    # the rounds that drafted: not one a token short of the budget
    rounds = [(ids, r) for ids, r in zip(prefixes(PROMPT, result.trace), result.trace)
              if len(ids) - len(PROMPT) < 24 - 1]
    looked_up = [(ids, r) for ids, r in rounds if lookup_continuation(ids.tolist(), k, 3, 2, "frequent")]
    assert len(looked_up) == drafter.lookup_rounds > 0 and len(rounds) - len(looked_up) == drafter.drafter_rounds > 0
    for ids, r in rounds:
        follow = lookup_continuation(ids.tolist(), k, 3, 2, "frequent")
        if follow:
            assert r.drafted == follow[:len(r.drafted)]
        else:
            alone = speculative_generate(target, make(), ids, k=k, max_new_tokens=k + 1).trace[0].drafted
            assert r.drafted == alone[:len(r.drafted)]


def sampled_joint(target, make, prompt, settings, samples) -> tuple[np.ndarray, dict]:
    counts, by = np.zeros((lossless.VOCAB, lossless.VOCAB)), {"lookup": 0, "drafter": 0}
    with replayed_passes():  # each model's passes computed once per history: the same samples, for less
        for seed in range(samples):
            drafter = make()
            t1, t2 = speculative_generate(target, drafter, prompt, k=2, max_new_tokens=2, seed=seed,
                                          **settings).tokens.tolist()
            counts[t1, t2] += 1
            by["lookup"] += drafter.lookup_rounds
            by["drafter"] += drafter.drafter_rounds
    return counts, by


# The first round of a 2-token run drafts one token: by lookup after a prompt whose last two tokens
# occurred before ("1 4" is followed by "1"), by the draft model after one whose did not.
PROMPTS = {"lookup drafts": torch.tensor([3, 1, 4, 1, 5, 2, 1, 4]), "the draft model drafts": lossless.PROMPT}
# The broken rule on lookup rounds is a subtle bias (chi-square ~100 on 39 degrees of freedom at 2500 samples,
# p ~ 2e-7): those runs keep 2500; the draft model's rounds fail far past the threshold at the shared size.
SAMPLES = {"lookup drafts": 2500, "the draft model drafts": lossless.SAMPLES}


@pytest.mark.parametrize("which", list(PROMPTS))
@pytest.mark.parametrize("settings", [dict(temperature=1.0), dict(temperature=0.7, top_k=4)], ids=["T=1", "T=0.7 top-k 4"])
def test_sampling_keeps_the_targets_distribution(lossless_pair, which, settings):
    target, draft = lossless_pair
    prompt = PROMPTS[which]
    counts, by = sampled_joint(target, lambda: LookupFirstDrafter(ModelDrafter(draft)), prompt, settings,
                               SAMPLES[which])
    assert by["lookup" if which == "lookup drafts" else "drafter"] >= SAMPLES[which]
    assert chi_square_pvalue(counts, lossless.exact_joint(target, settings, prompt)) > 1e-3


@pytest.mark.parametrize("which", list(PROMPTS))
def test_the_check_catches_a_rule_without_residual(lossless_pair, which, monkeypatch):
    """The same test fails with the residual replaced by p, on the rounds of either drafter."""
    import speclab.verification as verification
    monkeypatch.setattr(verification, "residual_distribution", lambda p, q: p)
    target, draft = lossless_pair
    settings = dict(temperature=1.0)
    counts, _ = sampled_joint(target, lambda: LookupFirstDrafter(ModelDrafter(draft)), PROMPTS[which], settings,
                              SAMPLES[which])
    assert chi_square_pvalue(counts, lossless.exact_joint(target, settings, PROMPTS[which])) < 1e-6


@pytest.fixture(scope="module")
def lossless_pair():
    return (tiny_model("llama", layers=2, vocab=lossless.VOCAB, seed=10, init=0.2),
            tiny_model("llama", layers=1, vocab=lossless.VOCAB, seed=11, init=0.2))


def test_a_batch_decodes_each_row_as_target_only(models):
    target, draft = models
    prompts = [PROMPT, torch.tensor([3, 9, 4, 3, 9]), torch.tensor([11, 2, 33, 44])]
    alone = [generate(target, p, max_new_tokens=16).tokens.tolist() for p in prompts]
    for model in (target, draft):
        enable_fast_path(model, "static", max_len=64, max_batch=4)
    try:
        drafter = LookupFirstDrafter(ModelDrafter(draft))
        assert drafter.batched
        out = speculative_generate(target, drafter, prompts, k=2, max_new_tokens=16)
        assert [r.tokens.tolist() for r in out] == alone
        assert drafter.lookup_rounds > 0 and drafter.drafter_rounds > 0
    finally:
        for model in (target, draft):
            disable_fast_path(model)


def test_load_drafter_and_the_bench_rows_build_it(models):
    target, draft = models
    drafter = load_drafter(NAME, target, drafter="draft_model", draft=draft, min_ngram=1)
    assert isinstance(drafter, LookupFirstDrafter) and drafter.drafter.model is draft
    assert drafter.lookup.min_ngram == 1 and drafter.name == "lookup_first draft_model"
    rows = REGISTRY[NAME].bench_rows
    assert rows["speclab lookup_first draft_model"] == {"drafter": "draft_model"}
    assert drafter_for("speclab lookup_first draft_model", {}, target, draft).drafter.model is draft  # the pair's draft


def test_bad_input_is_refused_with_what_to_do(models):
    target, draft = models
    with pytest.raises(ValueError, match="trained drafter"):
        load_drafter(NAME, target, drafter="ngram")
    for draftless in ("ngram", "suffix", "lookahead"):
        with pytest.raises(ValueError, match="trained drafter"):
            load_drafter(NAME, target, drafter=draftless)
    with pytest.raises(ValueError, match="trained drafter"):
        LookupFirstDrafter(PromptLookupDrafter())
    with pytest.raises(ValueError, match="min_ngram"):
        LookupFirstDrafter(ModelDrafter(draft), min_ngram=0)
    with pytest.raises(ValueError, match="unknown drafting method"):
        load_drafter(NAME, target, drafter="nonesuch")
