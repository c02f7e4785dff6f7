"""Parallel drafting (speclab.methods.parallel_draft): K drafts from one pass over K - 1 mask tokens, the
masks leaving the cache, exactness greedy and sampled (chi-square, with a broken rule that fails), and
models that are not parallel drafts refused."""
import pytest
import torch

import tests.test_lossless as small
from speclab import generate, load_drafter, speculative_generate
from speclab.measure.lossless import lossless_check
from speclab.methods.parallel_draft import ParallelDrafter, load_parallel_draft
from speclab.sampling import SamplingParams
from speclab.train.parallel_draft import add_mask_token
from tests.conftest import tiny_model


def parallel_draft(vocab: int = 96, seed: int = 1) -> torch.nn.Module:
    draft = tiny_model("llama", layers=1, vocab=vocab, seed=seed, init=0.2)
    add_mask_token(draft)
    return draft


def test_one_pass_drafts_k_tokens_from_the_masks_and_the_masks_leave_the_cache():
    draft = parallel_draft()
    drafter = ParallelDrafter(draft, vocab_size=96)
    ids = torch.tensor([5, 17, 42, 8, 23])
    drafter.start(ids)
    proposed = drafter.propose(ids, 4, SamplingParams())
    assert len(proposed) == 4 and drafter.forward_calls == 1 and drafter.runner.length == len(ids)
    with torch.no_grad():  # the same tokens as one plain forward over the sequence and three masks
        logits = draft(torch.cat([ids, torch.full((3,), 96)]).view(1, -1)).logits[0, -4:, :96]
    assert proposed.tokens.tolist() == logits.argmax(-1).tolist()
    assert int(proposed.tokens.max()) < 96  # never the mask token


def test_greedy_output_equals_target_only():
    target = tiny_model("llama", layers=2, seed=0)
    drafter = load_drafter("pard", target, model=parallel_draft())
    prompt = torch.tensor([5, 17, 42, 8, 23, 61, 7, 30])
    reference = generate(target, prompt, max_new_tokens=30).tokens.tolist()
    for k in (2, 5):
        result = speculative_generate(target, drafter, prompt, k=k, max_new_tokens=30)
        assert result.tokens.tolist() == reference
        drafting = sum(1 for r in result.trace if r.drafted)
        assert result.stats.draft_calls == drafting  # one draft pass a round, whatever K


def test_sampling_is_lossless_and_the_rule_without_residual_is_not():
    target = tiny_model("llama", layers=2, vocab=small.VOCAB, seed=10, init=0.2)
    draft = parallel_draft(vocab=small.VOCAB, seed=11)
    report = lossless_check(target, lambda: ParallelDrafter(draft, small.VOCAB), small.PROMPT, samples=1500, top=4,
                            k=3)
    assert report["p_value"] > 1e-3 and report["broken_p_value"] < 1e-6


def test_a_model_without_a_mask_token_is_refused(tmp_path):
    plain = tiny_model("llama", layers=1, seed=1)
    with pytest.raises(ValueError, match="pard_token"):
        ParallelDrafter(plain, 96)
    plain.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="draft_model"):
        load_parallel_draft(tiny_model("llama", layers=2, seed=0), tmp_path)
    inside = tiny_model("llama", layers=1, seed=1)
    inside.config.pard_token = 3  # a token of the target's vocabulary could be drafted
    with pytest.raises(ValueError, match="outside the target's vocabulary"):
        ParallelDrafter(inside, 96)
