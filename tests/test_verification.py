"""The rejection rule on explicit distributions, including adversarial cases."""
import numpy as np
import pytest
import torch

from speclab.measure.acceptance import chi_square_pvalue
from speclab.sampling import logits_to_probs, sample
from speclab.verification import residual_distribution, verify

V = 6


def one_hot(i, v=V):
    return torch.nn.functional.one_hot(torch.tensor(i), v).float()


def first_token_distribution(p, q, trials=20000, seed=0):
    """Empirical distribution of the first token of a round with K = 1 (draft drawn from q)."""
    g = torch.Generator().manual_seed(seed)
    counts = np.zeros(V)
    target = torch.stack([p, p])  # row 1 is the bonus distribution
    for _ in range(trials):
        x = sample(q, g).view(1)
        n, nxt = verify(target, q.view(1, -1), x, g)
        counts[int(x) if n == 1 else nxt] += 1
    return counts


def test_identical_distributions_accept_everything():
    p = torch.softmax(torch.randn(V, generator=torch.Generator().manual_seed(1)), -1)
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        drafts = sample(p.expand(3, V), g)
        n, _ = verify(p.expand(4, V), p.expand(3, V), drafts, g)
        assert n == 3


def test_disjoint_supports_reject_the_first_and_sample_the_target():
    p = torch.tensor([0.5, 0.5, 0, 0, 0, 0])
    q = torch.tensor([0, 0, 0.5, 0.5, 0, 0])
    g = torch.Generator().manual_seed(0)
    seen = set()
    for _ in range(200):
        n, nxt = verify(p.expand(3, V), q.expand(2, V), torch.tensor([2, 3]), g)
        assert n == 0
        seen.add(nxt)
    assert seen == {0, 1}


def test_draft_mass_where_target_has_none_is_never_accepted():
    p = torch.tensor([0.7, 0.3, 0, 0, 0, 0])
    q = torch.tensor([0.4, 0.2, 0.4, 0, 0, 0])  # token 2 has q > 0 and p == 0
    g = torch.Generator().manual_seed(0)
    for _ in range(300):
        n, nxt = verify(p.expand(2, V), q.view(1, V), torch.tensor([2]), g)
        assert n == 0 and nxt in (0, 1)


def test_all_accepted_takes_the_bonus_from_the_last_row():
    rows = torch.stack([one_hot(1), one_hot(2), one_hot(3), one_hot(5)])
    n, nxt = verify(rows, rows[:3], torch.tensor([1, 2, 3]))
    assert (n, nxt) == (3, 5)


def test_greedy_is_longest_match_then_target_argmax():
    target = torch.stack([one_hot(1), one_hot(2), one_hot(4), one_hot(0)])
    drafts = torch.tensor([1, 2, 3])  # the third disagrees
    n, nxt = verify(target, torch.stack([one_hot(1), one_hot(2), one_hot(3)]), drafts)
    assert (n, nxt) == (2, 4)


def test_residual_is_positive_part_renormalised():
    p = torch.tensor([0.5, 0.3, 0.2, 0, 0, 0])
    q = torch.tensor([0.2, 0.5, 0.3, 0, 0, 0])
    torch.testing.assert_close(residual_distribution(p, q), torch.tensor([1.0, 0, 0, 0, 0, 0]))
    # p == q leaves no residual mass; a rejection cannot happen, and p is returned
    torch.testing.assert_close(residual_distribution(p, p), p)


@pytest.mark.parametrize("case", ["softmax", "top_k", "top_p", "near_disjoint"])
def test_first_token_follows_the_target_exactly(case):
    g = torch.Generator().manual_seed(3)
    lp, lq = torch.randn(V, generator=g) * 2, torch.randn(V, generator=g) * 2
    settings = {"softmax": {}, "top_k": {"top_k": 3}, "top_p": {"top_p": 0.8}, "near_disjoint": {}}[case]
    if case == "near_disjoint":
        lp, lq = torch.tensor([4.0, 4, -4, -4, -4, -4]), torch.tensor([-4.0, -4, 4, 4, 0, 0])
    p, q = logits_to_probs(lp, 1.0, **settings), logits_to_probs(lq, 1.0, **settings)
    counts = first_token_distribution(p, q)
    assert chi_square_pvalue(counts, p.numpy()) > 1e-3


def test_a_rule_without_the_residual_is_caught(monkeypatch):
    """The chi-square check above has teeth: replacing the residual by p (a classic bug) fails it."""
    import speclab.verification as verification
    monkeypatch.setattr(verification, "residual_distribution", lambda p, q: p)
    g = torch.Generator().manual_seed(3)
    p, q = logits_to_probs(torch.randn(V, generator=g) * 2, 1.0), logits_to_probs(torch.randn(V, generator=g) * 2, 1.0)
    assert chi_square_pvalue(first_token_distribution(p, q), p.numpy()) < 1e-6


@pytest.mark.parametrize("tp, dp, dt, message", [
    (torch.ones(3, V) / V, torch.ones(3, V) / V, torch.tensor([0, 1]), "draft_probs"),
    (torch.ones(3, V) / V, torch.ones(2, V + 1) / V, torch.tensor([0, 1]), "same V"),
    (torch.ones(3, V) / V, torch.ones(2, V) / V, torch.tensor([0, V]), "ids"),
    (torch.ones(V) / V, torch.ones(2, V) / V, torch.tensor([0, 1]), "shape"),
])
def test_bad_shapes_are_refused(tp, dp, dt, message):
    with pytest.raises(ValueError, match=message):
        verify(tp, dp, dt)


def test_emitted_distribution_is_p_when_the_draft_reports_what_it_sampled_from():
    from speclab.verification import emitted_distribution
    g = torch.Generator().manual_seed(3)
    for _ in range(20):
        p = torch.rand(12, generator=g) ** 3
        q = torch.rand(12, generator=g) ** 3
        p[:3] = 0
        q[5:7] = 0
        p, q = p / p.sum(), q / q.sum()
        assert torch.allclose(emitted_distribution(p, q), p, atol=1e-6)
    # a draft that samples from top-2 but reports its full softmax biases the output away from p
    q_full = torch.tensor([0.4, 0.3, 0.2, 0.1])
    q_top2 = torch.tensor([4 / 7, 3 / 7, 0.0, 0.0])
    p = torch.tensor([0.1, 0.2, 0.3, 0.4])
    biased = emitted_distribution(p, q_top2, reported_probs=q_full)
    assert biased.sum().item() == pytest.approx(1.0) and (biased - p).abs().max() > 0.05
