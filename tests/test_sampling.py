import pytest
import torch

from speclab.sampling import SamplingParams, check_finite, logits_to_probs, pad_vocab, pick, sample

LOGITS = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0])


def test_greedy_is_one_hot_argmax():
    probs = logits_to_probs(LOGITS, temperature=0)
    assert probs.tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]


def test_temperature_one_is_softmax():
    torch.testing.assert_close(logits_to_probs(LOGITS, 1.0), torch.softmax(LOGITS, -1))


def test_temperature_sharpens_and_flattens():
    hot, cold = logits_to_probs(LOGITS, 2.0), logits_to_probs(LOGITS, 0.5)
    assert cold[0] > logits_to_probs(LOGITS, 1.0)[0] > hot[0]


def test_top_k_keeps_k_largest_renormalised():
    probs = logits_to_probs(LOGITS, 1.0, top_k=2)
    expected = torch.softmax(torch.tensor([2.0, 1.0]), -1)
    torch.testing.assert_close(probs[:2], expected)
    assert probs[2:].sum() == 0


def test_top_p_keeps_the_token_that_crosses_the_threshold():
    probs_full = torch.softmax(LOGITS, -1)  # ~[0.53, 0.20, 0.12, 0.07, 0.03]
    probs = logits_to_probs(LOGITS, 1.0, top_p=0.6)
    assert (probs > 0).tolist() == [True, True, False, False, False]
    torch.testing.assert_close(probs[:2], probs_full[:2] / probs_full[:2].sum())
    # just below the top token's mass: only it survives
    assert (logits_to_probs(LOGITS, 1.0, top_p=float(probs_full[0]) - 1e-4) > 0).sum() == 1


def test_top_p_one_and_top_k_vocab_change_nothing():
    torch.testing.assert_close(logits_to_probs(LOGITS, 1.0, top_k=5, top_p=1.0), torch.softmax(LOGITS, -1))


def test_batched_rows_are_independent():
    batch = torch.stack([LOGITS, LOGITS.flip(0)])
    probs = logits_to_probs(batch, 0.8, top_k=3, top_p=0.9)
    torch.testing.assert_close(probs[0], logits_to_probs(LOGITS, 0.8, top_k=3, top_p=0.9))
    torch.testing.assert_close(probs.sum(-1), torch.ones(2))


@pytest.mark.parametrize("kwargs, message", [
    (dict(temperature=-0.1), "temperature"),
    (dict(temperature=float("nan")), "temperature"),
    (dict(top_k=0), "top_k"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
])
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**{"temperature": 1.0, **kwargs})


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_logits_are_refused(bad):
    logits = LOGITS.clone()
    logits[2] = bad
    with pytest.raises(FloatingPointError, match="NaN or inf"):
        check_finite(logits, "target model")


def test_finite_logits_pass_even_where_their_sum_would_overflow():
    check_finite(torch.full((49152,), 30.0, dtype=torch.float16))  # sums to 1.5e6, past float16's 65504
    masked = torch.full((4096,), torch.finfo(torch.float32).min)  # a reduced vocabulary's masked logits
    masked[:len(LOGITS)] = LOGITS
    check_finite(masked)
    both = LOGITS.clone()
    both[1], both[2] = float("inf"), float("-inf")  # their sum is NaN: refused too
    with pytest.raises(FloatingPointError, match="NaN or inf"):
        check_finite(both)


def test_greedy_pick_is_the_argmax_without_a_distribution():
    token, q = pick(LOGITS, SamplingParams())
    assert int(token) == int(LOGITS.argmax()) and q is None
    token, q = pick(LOGITS, SamplingParams(temperature=1.0), torch.Generator().manual_seed(0))
    assert q is not None and torch.allclose(q, torch.softmax(LOGITS, -1)) and q[token] > 0


def test_pad_vocab_adds_zero_mass():
    padded = pad_vocab(torch.softmax(LOGITS, -1), 8)
    assert padded.shape == (8,) and padded[5:].sum() == 0


def test_sample_follows_probs():
    g = torch.Generator().manual_seed(0)
    probs = torch.tensor([0.1, 0.6, 0.3])
    draws = sample(probs.expand(20000, 3), g)
    freq = torch.bincount(draws, minlength=3) / 20000
    torch.testing.assert_close(freq, probs, atol=0.015, rtol=0)


def test_sample_never_picks_a_zero_probability_token_and_is_argmax_on_one_hot():
    g = torch.Generator().manual_seed(1)
    probs = torch.tensor([0.0, 0.5, 0.0, 0.0, 0.5, 0.0])
    draws = sample(probs.expand(5000, 6), g)
    assert set(draws.tolist()) == {1, 4}
    one_hot = torch.nn.functional.one_hot(torch.tensor([3, 0, 5]), 6).float()
    for _ in range(50):
        assert sample(one_hot, g).tolist() == [3, 0, 5]
    unnormalised = torch.tensor([2.0, 0.0, 6.0])  # rows need not sum to one, as with torch.multinomial
    freq = torch.bincount(sample(unnormalised.expand(20000, 3), g), minlength=3) / 20000
    torch.testing.assert_close(freq, torch.tensor([0.25, 0.0, 0.75]), atol=0.015, rtol=0)
