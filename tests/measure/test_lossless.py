"""The two-token check for a real vocabulary: cells fixed from p alone, a sound rule passes, the rule
without its residual fails, on a draft that disagrees with the target."""
import numpy as np
import pytest

import tests.test_lossless as small
from speclab.measure.lossless import lossless_check, two_token_cells
from speclab.methods.draft_model import ModelDrafter
from tests.conftest import tiny_model


def test_the_cells_hold_the_kept_first_tokens_rows_and_the_rest_in_one():
    target = tiny_model("llama", layers=2, vocab=small.VOCAB, seed=10, init=0.2)
    kept, probs = two_token_cells(target, small.PROMPT, {"temperature": 1.0}, top=3)
    exact = small.exact_joint(target, {"temperature": 1.0})
    assert len(probs) == 3 * small.VOCAB + 1 and np.isclose(probs.sum(), 1.0)
    assert np.allclose(probs[:-1].reshape(3, -1), exact[kept.numpy()], atol=1e-6)


def test_a_sound_rule_passes_and_the_rule_without_residual_fails():
    target = tiny_model("llama", layers=2, vocab=small.VOCAB, seed=10, init=0.2)
    draft = tiny_model("llama", layers=1, vocab=small.VOCAB, seed=11, init=0.2)
    report = lossless_check(target, lambda: ModelDrafter(draft), small.PROMPT, samples=1500, top=4)
    assert report["p_value"] > 1e-3 and report["broken_p_value"] < 1e-6
    assert 0 < report["mass_of_kept_first_tokens"] <= 1


def test_the_check_takes_block_verification():
    """lossless_check(acceptance="block") decodes with block verification; its broken variant
    (block_residual_made_token_wise) only shows after a rejection at a weight below 1, which two tokens
    of a small model rarely reach, so the chi-square test that catches it is tests/test_block_verification.py's
    (Markov chains) and chapter 13.1's (the paper's example)."""
    target = tiny_model("llama", layers=2, vocab=small.VOCAB, seed=10, init=0.2)
    draft = tiny_model("llama", layers=1, vocab=small.VOCAB, seed=11, init=0.2)
    report = lossless_check(target, lambda: ModelDrafter(draft), small.PROMPT, samples=600, top=4, k=3,
                            acceptance="block", broken=False)
    assert report["acceptance"] == "block" and report["p_value"] > 1e-3
    with pytest.raises(ValueError, match="lossless rule"):
        lossless_check(target, lambda: ModelDrafter(draft), small.PROMPT, samples=1, acceptance="typical")
