"""Speculative sampling is lossless, end to end: the joint distribution of the first two generated
tokens matches the target's served distribution, checked with a chi-square test."""
import numpy as np
import pytest
import torch

from speclab import speculative_generate
from speclab.methods.draft_model import ModelDrafter
from speclab.sampling import logits_to_probs
from tests.conftest import tiny_model
from speclab.measure.acceptance import chi_square_pvalue
from speclab.measure.lossless import replayed_passes

# 1250 samples of the first two tokens (64 outcomes): the sound rules' p-values are what chance gives at any
# size, and the broken rules of this file and the ones that share SAMPLES still fail far past their thresholds
# at this size (the rule without the residual: chi-square ~220 on 54 degrees of freedom, p ~ 1e-21; it was
# ~390 at 2500). Lookup-first's lookup rounds need more (tests/methods/test_lookup_first.py).
VOCAB, SAMPLES = 8, 1250
PROMPT = torch.tensor([3, 1, 4, 1, 5])
SETTINGS = {"temperature 1": dict(temperature=1.0), "temperature 0.7, top-k 4": dict(temperature=0.7, top_k=4),
            "top-p 0.8": dict(temperature=1.0, top_p=0.8)}


@pytest.fixture(scope="module")
def small_pair():
    # Different seeds and depths: the draft disagrees with the target often, so a wrong residual shows.
    return (tiny_model("llama", layers=2, vocab=VOCAB, seed=10, init=0.2),
            tiny_model("llama", layers=1, vocab=VOCAB, seed=11, init=0.2))


@torch.no_grad()
def exact_joint(target, settings, prompt: torch.Tensor = PROMPT) -> np.ndarray:
    """P(t1, t2) under target-only sampling with these settings, by enumerating t1."""
    prompt = prompt.to(target.device)
    first = logits_to_probs(target(prompt.view(1, -1)).logits[0, -1], **settings)
    rows = [first[t1] * logits_to_probs(target(torch.cat([prompt, prompt.new_tensor([t1])]).view(1, -1)).logits[0, -1],
                                        **settings) for t1 in range(VOCAB)]
    return torch.stack(rows).cpu().numpy()


def sampled_joint(target, draft, settings, k=2, **options) -> np.ndarray:
    counts = np.zeros((VOCAB, VOCAB))
    # k + 1 new tokens, so that the first round drafts all k (a round never drafts past the budget); the
    # first two are counted. Each model's passes are computed once per history: the same samples, for less.
    with replayed_passes():
        for seed in range(SAMPLES):
            t1, t2 = speculative_generate(target, draft, PROMPT, k=k, max_new_tokens=k + 1, seed=seed,
                                          **settings, **options).tokens.tolist()[:2]
            counts[t1, t2] += 1
    return counts


@pytest.mark.parametrize("name", list(SETTINGS))
def test_speculative_sampling_matches_the_target(small_pair, name):
    target, draft = small_pair
    settings = SETTINGS[name]
    p_value = chi_square_pvalue(sampled_joint(target, draft, settings), exact_joint(target, settings))
    assert p_value > 1e-3, f"{name}: p = {p_value:.2e}"


def test_a_half_precision_draft_keeps_sampling_lossless(small_pair):
    """The CPU default runs the draft in float16: its rounding moves q, and the rule corrects for any q."""
    import copy
    target, draft = small_pair
    settings = SETTINGS["temperature 1"]
    half = copy.deepcopy(draft).half()
    assert chi_square_pvalue(sampled_joint(target, half, settings), exact_joint(target, settings)) > 1e-3


def test_the_check_catches_a_rule_without_residual(small_pair, monkeypatch):
    """Shown once: with the residual replaced by p, the same test fails decisively."""
    import speclab.verification as verification
    monkeypatch.setattr(verification, "residual_distribution", lambda p, q: p)
    target, draft = small_pair
    settings = SETTINGS["temperature 1"]
    assert chi_square_pvalue(sampled_joint(target, draft, settings), exact_joint(target, settings)) < 1e-6


def test_the_check_catches_raw_instead_of_served_draft_probabilities(small_pair):
    """Shown once: a draft that samples from its served distribution (temperature 0.5) but hands the
    rule its raw softmax as q biases the output, and the same test sees it."""
    target, draft = small_pair
    settings = dict(temperature=0.5)

    raw_of = {}  # the draft's raw softmax (no temperature) after each sequence, computed once

    class RawQ(ModelDrafter):
        def propose(self, ids, k, sampling, generator=None):
            served = super().propose(ids, k, sampling, generator)
            seq = torch.cat([ids, served.tokens[:-1]])
            key = (tuple(seq.tolist()), k)
            if key not in raw_of:
                with torch.no_grad():
                    raw_of[key] = torch.softmax(self.model(seq.view(1, -1)).logits[0, -k:].float(), -1)  # the bug
            return type(served)(served.tokens, raw_of[key].clone())

    counts = sampled_joint(target, RawQ(draft), settings)
    assert chi_square_pvalue(counts, exact_joint(target, settings)) < 1e-6


def test_the_check_reaches_the_second_draft_of_a_round(small_pair, monkeypatch):
    """A rule broken only at a round's second draft (accepted whenever the first is) fails the same test:
    the first round drafts both (k + 1 new tokens), so the counted second token is judged there."""
    import speclab.decoding as decoding
    sound = decoding.verify_tree

    def second_draft_always_kept(target_probs, draft_probs, draft_tokens, parents, generator=None):
        path, next_token = sound(target_probs, draft_probs, draft_tokens, parents, generator)
        if path == [0] and len(draft_tokens) > 1 and list(parents)[1] == 0:  # the bug: keep node 1 unjudged
            return [0, 1], int(target_probs[2].argmax())
        return path, next_token

    target, draft = small_pair
    settings = SETTINGS["temperature 1"]
    assert chi_square_pvalue(sampled_joint(target, draft, settings), exact_joint(target, settings)) > 1e-3
    monkeypatch.setattr(decoding, "verify_tree", second_draft_always_kept)
    assert chi_square_pvalue(sampled_joint(target, draft, settings), exact_joint(target, settings)) < 1e-6
