"""Adaptive K (speclab.adaptive): transformers' heuristic schedule and the confidence stop keep greedy
output exact and sampling lossless, draft what they say, and refuse what they cannot do."""
import numpy as np
import pytest
import torch

import tests.test_lossless as lossless
from speclab import generate, speculative_generate
from speclab.adaptive import HeuristicK, check_confidence_threshold, confidence, make_schedule
from speclab.methods.draft_model import ModelDrafter
from speclab.methods.ngram import PromptLookupDrafter
from speclab.methods.eagle import EagleDrafter
from speclab.measure.acceptance import chi_square_pvalue
from speclab.measure.lossless import replayed_passes
from tests.conftest import tiny_model
from tests.methods.test_eagle import random_head

PROMPT = torch.tensor([5, 17, 42, 8, 23, 61, 7, 30, 5, 17, 42, 9])
ADAPTIVE = [dict(k_schedule="heuristic"), dict(confidence_threshold=0.4), dict(confidence_threshold=0.9),
            dict(k_schedule="heuristic", confidence_threshold=0.4)]


def test_the_heuristic_grows_by_two_after_a_full_round_and_shrinks_by_one_otherwise():
    schedule = HeuristicK(6)
    assert schedule.k == 6                       # starts at the upper bound
    trace = []
    for drafted, accepted in [(6, 2), (5, 0), (4, 4), (6, 1), (5, 1), (4, 1), (3, 1), (2, 1), (1, 0), (1, 1), (3, 3),
                              (0, 0)]:
        schedule.update(drafted, accepted)
        trace.append(schedule.k)
    assert trace == [5, 4, 6, 5, 4, 3, 2, 1, 1, 3, 5, 5]  # capped at 6, floored at 1; no draft: unchanged
    assert make_schedule("fixed", 4).k == 4
    with pytest.raises(ValueError, match="k_schedule must be one of"):
        make_schedule("dynamic", 4)


def test_confidence_is_the_top_probability_of_the_raw_logits():
    logits = torch.tensor([2.0, 0.0, 0.0, -1.0])
    assert confidence(logits) == pytest.approx(float(torch.softmax(logits, -1)[0]))
    for bad in (0, 1, 1.5, -0.1, "0.4", True):
        with pytest.raises(ValueError, match="strictly between 0 and 1"):
            check_confidence_threshold(bad)
    assert check_confidence_threshold(None) is None


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("options", ADAPTIVE, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_greedy_adaptive_k_equals_target_only(arch, options):
    target, draft = tiny_model(arch, layers=2, seed=0), tiny_model(arch, layers=1, seed=1)
    reference = generate(target, PROMPT, max_new_tokens=30).tokens.tolist()
    for k in (1, 3, 6):
        result = speculative_generate(target, draft, PROMPT, k=k, max_new_tokens=30, **options)
        assert result.tokens.tolist() == reference
        assert max(i for i, n in enumerate(result.stats.accepted_lengths) if n) <= k  # k stays the upper bound
    head = EagleDrafter(random_head(target), target, tree="chain")  # an EAGLE chain stops on confidence too
    assert speculative_generate(target, head, PROMPT, k=4, max_new_tokens=30, **options).tokens.tolist() == reference


def test_the_confidence_stop_ends_a_round_after_the_first_unsure_token():
    target, draft = tiny_model("llama", layers=2, seed=0), tiny_model("llama", layers=1, seed=1)
    drafter = ModelDrafter(draft)
    drafter.set_confidence_threshold(0.999)  # a random tiny model is never this sure: one token a round
    drafter.start(PROMPT)
    from speclab.sampling import SamplingParams
    assert len(drafter.propose(PROMPT, 5, SamplingParams(0.0))) == 1
    drafter.set_confidence_threshold(None)
    drafter.start(PROMPT)
    assert len(drafter.propose(PROMPT, 5, SamplingParams(0.0))) == 5
    stopped = speculative_generate(target, draft, PROMPT, k=5, max_new_tokens=30, confidence_threshold=0.999)
    assert {len(r.drafted) for r in stopped.trace} <= {0, 1}  # one token a round (none when the last is due)
    assert stopped.stats.drafted >= stopped.stats.rounds - 1


def test_the_heuristic_drafts_fewer_after_rejections():
    target, draft = tiny_model("llama", layers=2, seed=0), tiny_model("llama", layers=1, seed=1)
    fixed = speculative_generate(target, draft, PROMPT, k=8, max_new_tokens=40)
    adaptive = speculative_generate(target, draft, PROMPT, k=8, max_new_tokens=40, k_schedule="heuristic")
    assert adaptive.stats.acceptance_rate < 0.5  # a random pair: rejections are common, so K shrinks
    assert adaptive.stats.drafted / adaptive.stats.rounds < fixed.stats.drafted / fixed.stats.rounds
    assert adaptive.stats.method.endswith("heuristic K")


def test_drafters_without_a_per_token_confidence_refuse_a_threshold():
    target = tiny_model("llama", layers=2, seed=0)
    with pytest.raises(ValueError, match="no per-token confidence"):
        speculative_generate(target, PromptLookupDrafter(), PROMPT, k=4, max_new_tokens=8, confidence_threshold=0.4)
    tree = EagleDrafter(random_head(target), target, tree="dynamic")
    with pytest.raises(ValueError, match="tree='chain'"):
        speculative_generate(target, tree, PROMPT, k=4, max_new_tokens=8, confidence_threshold=0.4)
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        speculative_generate(target, tiny_model("llama", layers=1, seed=1), PROMPT, k=4, max_new_tokens=8,
                             confidence_threshold=1.0)
    with pytest.raises(ValueError, match="k_schedule"):
        speculative_generate(target, tiny_model("llama", layers=1, seed=1), PROMPT, k=4, max_new_tokens=8,
                             k_schedule="adaptive")


# ---------------------------------------------------------------- losslessness
def adaptive_joint(target, drafter, options, samples=lossless.SAMPLES) -> tuple[np.ndarray, int]:
    """Counts of the first two tokens of 3-token runs with k=2: the first round drafts up to 2 tokens,
    and the confidence stop may end it after one, so it shapes how t1 and t2 are produced. (The
    heuristic's choices come after t2; this checks it end to end all the same.)"""
    counts, accepted = np.zeros((lossless.VOCAB, lossless.VOCAB)), 0
    with replayed_passes():  # each model's passes computed once per history: the same samples, for less
        for seed in range(samples):
            result = speculative_generate(target, drafter, lossless.PROMPT, k=2, max_new_tokens=3, seed=seed,
                                          temperature=1.0, **options)
            t1, t2 = result.tokens.tolist()[:2]
            counts[t1, t2] += 1
            accepted += result.stats.accepted
    return counts, accepted


@pytest.mark.parametrize("options", [dict(k_schedule="heuristic"), dict(confidence_threshold=0.3)],
                         ids=["heuristic", "confidence 0.3"])
def test_sampled_adaptive_k_follows_the_target(options):
    target, draft = (tiny_model("llama", layers=2, vocab=lossless.VOCAB, seed=10, init=0.2),
                     tiny_model("llama", layers=1, vocab=lossless.VOCAB, seed=11, init=0.2))
    counts, accepted = adaptive_joint(target, ModelDrafter(draft), options)
    assert accepted > 100
    assert chi_square_pvalue(counts, lossless.exact_joint(target, dict(temperature=1.0))) > 1e-3


class PlaysSafeWhenItStops(ModelDrafter):
    """A deliberately broken confidence stop: when it stops, it swaps the unsure token for the draft's
    top token ("play safe") but still reports the distribution q the token should have been sampled
    from. The rule needs the token to be a draw from q (or q a point mass on it), so the emitted
    distribution drifts. (Reporting a point mass for a sampled token would not break it: the
    point-mass rule is lossless for any proposed token, however it was chosen.)"""

    def propose(self, ids, k, sampling, generator=None):
        from speclab.drafting import Draft
        draft = super().propose(ids, k, sampling, generator)
        if len(draft) < k:  # stopped early
            tokens = draft.tokens.clone()
            tokens[-1] = draft.probs[-1].argmax()
            return Draft(tokens, draft.probs)
        return draft


def test_the_check_catches_a_stop_that_plays_safe():
    target, draft = (tiny_model("llama", layers=2, vocab=lossless.VOCAB, seed=10, init=0.2),
                     tiny_model("llama", layers=1, vocab=lossless.VOCAB, seed=11, init=0.2))
    counts, _ = adaptive_joint(target, PlaysSafeWhenItStops(draft), dict(confidence_threshold=0.6))
    assert chi_square_pvalue(counts, lossless.exact_joint(target, dict(temperature=1.0))) < 1e-3


def test_adaptive_k_decodes_the_bundled_target_exactly():
    from speclab.models import load_pair
    pair = load_pair(device="cpu")
    ids = pair.tokenizer("def parse(text):\n    ", return_tensors="pt").input_ids[0]
    reference = generate(pair.target, ids, max_new_tokens=32).tokens.tolist()
    for options in (dict(k_schedule="heuristic"), dict(confidence_threshold=0.1)):
        assert speculative_generate(pair.target, pair.draft, ids, k=8, max_new_tokens=32,
                                    **options).tokens.tolist() == reference
