"""A draft that reads its target's embeddings and drafts over a draft vocabulary: zero probability
outside it, greedy-exact, lossless when sampling (chi-square, and the check fails a broken rule), saved
without embeddings and refused beside another target."""
import numpy as np
import pytest
import torch

import tests.test_lossless as lossless
from speclab import generate, shared_draft, speculative_generate
from speclab.measure.acceptance import chi_square_pvalue
from speclab.models import assemble_pair
from speclab.train.shared_draft import build
from tests.conftest import tiny_model


def small_draft(target, kept: list[int], layers: int = 1) -> torch.nn.Module:
    return build(target, layers, torch.tensor(kept)).eval()


def test_outside_the_draft_vocabulary_the_draft_puts_no_probability():
    target = tiny_model("llama", layers=2, vocab=16, seed=3)
    draft = small_draft(target, [2, 5, 7, 11])
    with torch.no_grad():
        logits = draft(torch.tensor([[1, 2, 3]])).logits[0, -1]
    probs = torch.softmax(logits, -1)
    assert logits.shape == (16,) and torch.isfinite(logits).all()
    assert probs[[2, 5, 7, 11]].sum() == pytest.approx(1.0) and probs[[0, 1, 3]].max() == 0
    assert draft.get_input_embeddings() is target.get_input_embeddings()  # borrowed, not copied


def test_it_starts_as_the_targets_first_layers_and_lm_head_rows():
    target = tiny_model("llama", layers=3, vocab=16, seed=4)
    kept = list(range(16))
    draft = small_draft(target, kept, layers=3)  # all layers, all rows: the target itself
    ids = torch.tensor([[1, 4, 9, 2]])
    with torch.no_grad():
        assert torch.allclose(draft(ids).logits, target(ids).logits, atol=1e-5)


def test_saved_without_embeddings_loaded_beside_its_target_and_refused_beside_another(tmp_path):
    target = tiny_model("llama", layers=2, vocab=32, seed=5)
    draft = small_draft(target, list(range(0, 32, 2)))
    shared_draft.save(draft, target, tmp_path / "draft", dtype=torch.float32)
    saved = shared_draft.load_file(tmp_path / "draft" / "model.safetensors")
    assert not any("embed_tokens" in k for k in saved) and "lm_head.draft_ids" in saved
    loaded = shared_draft.load(tmp_path / "draft", target)
    ids = torch.tensor([[3, 4, 5]])
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, draft(ids).logits)
    half = shared_draft.load(tmp_path / "draft", target, torch.float16)
    assert half.get_input_embeddings().weight.dtype == torch.float16  # a cast copy for a half-precision draft
    with pytest.raises(ValueError, match="trained for another target.*train shared-draft"):
        shared_draft.load(tmp_path / "draft", tiny_model("llama", layers=2, vocab=32, seed=6))


def test_a_pair_loads_it_without_a_tokenizer_of_its_own(tmp_path):
    from tests.test_packaged import chat_tokenizer  # 64 pieces
    target = tiny_model("llama", layers=2, vocab=64, seed=7)
    target.save_pretrained(tmp_path / "target")
    chat_tokenizer().save_pretrained(tmp_path / "target")
    shared_draft.save(small_draft(target, list(range(40))), target, tmp_path / "draft")
    pair = assemble_pair(tmp_path / "target", tmp_path / "draft", "cpu", None, None)
    assert isinstance(pair.draft.lm_head, shared_draft.DraftVocabHead)


@pytest.mark.parametrize("kept", [[0, 1, 2, 3, 4, 5, 6, 7], [1, 2, 4, 6]])
def test_greedy_speculative_decoding_with_it_equals_target_only(kept):
    target = tiny_model("llama", layers=2, vocab=8, seed=10, init=0.2)
    draft = small_draft(target, kept)
    prompt = torch.tensor([3, 1, 4, 1, 5])
    expected = generate(target, prompt, max_new_tokens=24).tokens
    assert torch.equal(speculative_generate(target, draft, prompt, k=3, max_new_tokens=24).tokens, expected)


def sampled(target, draft) -> np.ndarray:
    return lossless.sampled_joint(target, draft, dict(temperature=1.0))


def test_sampling_with_a_draft_vocabulary_follows_the_target():
    """Tokens the draft can never propose (0, 3, 5, 7) still come out at the target's rate: the residual."""
    target = tiny_model("llama", layers=2, vocab=lossless.VOCAB, seed=10, init=0.2)
    counts = sampled(target, small_draft(target, [1, 2, 4, 6]))
    assert counts[[0, 3, 5, 7]].sum() > 100
    assert chi_square_pvalue(counts, lossless.exact_joint(target, dict(temperature=1.0))) > 1e-3


def test_the_check_catches_a_rule_without_residual_with_this_draft(monkeypatch):
    import speclab.verification as verification
    target = tiny_model("llama", layers=2, vocab=lossless.VOCAB, seed=10, init=0.2)
    monkeypatch.setattr(verification, "residual_distribution", lambda p, q: p)
    counts = sampled(target, small_draft(target, [1, 2, 4, 6]))
    assert chi_square_pvalue(counts, lossless.exact_joint(target, dict(temperature=1.0))) < 1e-6
