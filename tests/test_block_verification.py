"""Block verification (Sun et al. 2025): lossless by chi-square on explicit Markov chains and end to end, a
broken variant caught, never fewer drafts kept than the token-wise rule, greedy unchanged, trees refused."""
import numpy as np
import pytest
import torch

import speclab.verification as verification
from speclab import speculative_generate
from speclab.measure.acceptance import chi_square_pvalue
from speclab.verification import verify, verify_block
from tests.conftest import tiny_model
from tests.test_lossless import PROMPT, SETTINGS, exact_joint, sampled_joint
from tests.test_tree_verification import draw

V, K = 4, 3


def chain(seed, sharp):
    """A Markov chain over V tokens: a start row and a row for each previous token."""
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(V, generator=g) * sharp, -1), torch.softmax(torch.randn(V, V, generator=g) * sharp, -1)


def first_two(target, draft, trials, seed, acceptance="block"):
    """Counts of the first two tokens rounds of K drafts emit: drafts from the draft chain, checked against
    the target chain's rows after each prefix, rounds repeated until two tokens are out."""
    (p0, P), (q0, Q) = target, draft
    g = torch.Generator().manual_seed(seed)
    counts = np.zeros((V, V))
    kept_total = 0
    for _ in range(trials):
        out = []
        while len(out) < 2:
            last = out[-1] if out else None
            rows_q, drafts = [], []
            for _ in range(K):
                row = q0 if last is None and not drafts else Q[drafts[-1] if drafts else last]
                rows_q.append(row)
                drafts.append(draw(row, g))  # sample's token, drawn in Python
            prev = [last] + drafts
            rows_p = [p0 if prev[0] is None else P[prev[0]]] + [P[t] for t in drafts]
            kept, nxt = verify(torch.stack(rows_p), torch.stack(rows_q), torch.tensor(drafts), g, acceptance=acceptance)
            if not out:
                kept_total += kept
            out += drafts[:kept] + [nxt]
        counts[out[0], out[1]] += 1
    return counts, kept_total / trials


def joint(target):
    p0, P = target
    return (p0[:, None] * P).numpy()


CASES = {"mild": (chain(1, 1.0), chain(2, 1.0)), "sharp": (chain(3, 3.0), chain(4, 3.0)),
         "close": (chain(5, 2.0), (chain(5, 2.0)[0] * 0.7 + 0.3 / V, chain(5, 2.0)[1] * 0.7 + 0.3 / V))}


@pytest.mark.parametrize("case", list(CASES))
def test_block_verification_emits_the_targets_distribution(case):
    target, draft = CASES[case]
    counts, _ = first_two(target, draft, 6000, seed=10)
    assert chi_square_pvalue(counts.ravel(), joint(target).ravel()) > 1e-3


def test_the_check_catches_block_verification_with_the_token_wise_residual(monkeypatch):
    """The broken variant: the residual taken as max(0, p - q), as the token-wise rule has it, instead of
    max(0, w p - q): the weight the block has used up is forgotten."""
    monkeypatch.setattr(verification, "block_residual", lambda w, p, q: torch.clamp(p - q, min=0))
    target, draft = CASES["sharp"]
    counts, _ = first_two(target, draft, 6000, seed=11)
    assert chi_square_pvalue(counts.ravel(), joint(target).ravel()) < 1e-6


@pytest.mark.parametrize("case", list(CASES))
def test_block_verification_keeps_at_least_as_many_drafts_as_the_token_wise_rule(case):
    target, draft = CASES[case]
    _, block = first_two(target, draft, 4000, seed=12, acceptance="block")
    _, token = first_two(target, draft, 4000, seed=12, acceptance="rejection")
    assert block >= token - 0.03, (block, token)  # the paper's Theorem 2, within sampling noise


def test_greedy_block_verification_is_the_longest_match():
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        p = torch.nn.functional.one_hot(torch.randint(0, V, (K + 1,), generator=g), V).float()
        drafts = torch.where(torch.rand(K, generator=g) < 0.7, p[:K].argmax(-1), torch.randint(0, V, (K,), generator=g))
        q = torch.nn.functional.one_hot(drafts, V).float()
        assert verify_block(p, q, drafts, g) == verify(p, q, drafts, g)
        assert verify_block(p, None, drafts, g) == verify(p, q, drafts, g)  # a point mass by default


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="acceptance must be one of \\('rejection', 'block'\\)"):
        verify(torch.ones(2, V) / V, torch.ones(1, V) / V, torch.tensor([0]), acceptance="blocks")
    with pytest.raises(ValueError, match="K \\+ 1|N \\+ 1"):
        verify_block(torch.ones(2, V) / V, torch.ones(2, V) / V, torch.tensor([0, 1]))


@pytest.fixture(scope="module")
def small_pair():
    return (tiny_model("llama", layers=2, vocab=8, seed=10, init=0.2),
            tiny_model("llama", layers=1, vocab=8, seed=11, init=0.2))


def test_block_verification_in_the_decode_loop_is_lossless_and_said(small_pair):
    target, draft = small_pair
    settings = SETTINGS["temperature 1"]
    counts = sampled_joint(target, draft, settings, k=3, acceptance="block")
    assert chi_square_pvalue(counts, exact_joint(target, settings)) > 1e-3
    out = speculative_generate(target, draft, PROMPT, k=3, max_new_tokens=8, acceptance="block", temperature=1.0,
                               seed=0)
    assert out.stats.lossless and "block verification" in out.stats.method
    greedy = [speculative_generate(target, draft, PROMPT, k=3, max_new_tokens=16, acceptance=rule).tokens.tolist()
              for rule in ("rejection", "block")]
    assert greedy[0] == greedy[1]


def test_a_tree_is_refused_by_block_verification(small_pair):
    from speclab.methods.medusa import MedusaDrafter, MedusaHeads
    target, _ = small_pair
    drafter = MedusaDrafter(MedusaHeads.for_target(target, num_heads=2), tree=[(0,), (1,), (0, 0)])
    with pytest.raises(ValueError, match="judges a chain"):
        speculative_generate(target, drafter, PROMPT, k=2, max_new_tokens=4, acceptance="block")
