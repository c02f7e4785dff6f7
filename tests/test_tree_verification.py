"""verify_tree: multi-candidate rejection sampling on explicit distributions is lossless for every way
of drawing siblings, reduces to the chain rule and to greedy path matching, and has teeth: the
chi-square checks fail when the rule is broken."""
import bisect
import itertools

import numpy as np
import pytest
import torch

import speclab.verification as verification
from speclab import verify_tree
from speclab.measure.acceptance import chi_square_pvalue
from speclab.sampling import sample
from speclab.verification import verify

V = 5
# Rounds per check: at 3000 the broken rules below score chi-square 300 to 4200 on 21 degrees of freedom
# (p < 1e-50), all but one (an unnormalised residual with siblings drawn with replacement: 20000 rounds).
TRIALS = 3000
SIBLINGS = ("with replacement", "without replacement", "top-k")


def draw(row: torch.Tensor, g: torch.Generator) -> int:
    """int(speclab.sampling.sample(row, g)) for one row, in Python: the same uniform number from g against
    the same cumulative sums, so the same token, at a third of the cost (the draws that build the rounds
    cost more than the rule they test)."""
    cdf = list(itertools.accumulate(row.tolist()))  # float64 running sums, as sample's cumsum
    u = torch.rand(1, generator=g, dtype=torch.float64).item() * cdf[-1]
    return min(bisect.bisect_right(cdf, u), len(cdf) - 1)  # the first sum above u (searchsorted, right=True)


def random_dist(g, sharp=2.0):
    return torch.softmax(torch.randn(V, generator=g) * sharp, -1)


class World:
    """Target rows that depend on the tokens so far (as a model's would), and draft rows that differ."""

    def __init__(self, seed):
        g = torch.Generator().manual_seed(seed)
        self.p = {prefix: random_dist(g) for d in range(4) for prefix in itertools.product(range(V), repeat=d)}
        self.q = {prefix: random_dist(g) for d in range(4) for prefix in itertools.product(range(V), repeat=d)}

    def draw_tree(self, width, depth, siblings, g):
        """A full tree of the given width and depth: (tokens, draft_probs or None, parents, target_probs)."""
        tokens, probs, parents, prefixes = [], [], [], []
        frontier = [(-1, ())]
        for _ in range(depth):
            next_frontier = []
            for node, prefix in frontier:
                q = self.q[prefix]
                if siblings == "top-k":
                    drawn = torch.topk(q, width).indices.tolist()
                    reported = [None] * width
                else:
                    drawn, reported, left = [], [], q.clone()
                    for _ in range(width):
                        row = q if siblings == "with replacement" else left / left.sum()
                        x = draw(row, g)
                        drawn.append(x)
                        reported.append(row)
                        left[x] = 0
                for x, row in zip(drawn, reported):
                    parents.append(node)
                    tokens.append(x)
                    probs.append(row)
                    prefixes.append(prefix + (x,))
                    next_frontier.append((len(tokens) - 1, prefix + (x,)))
            frontier = next_frontier
        target = torch.stack([self.p[()]] + [self.p[pr] for pr in prefixes])
        draft = None if siblings == "top-k" else torch.stack(probs)
        return torch.tensor(tokens), draft, parents, target


def emitted_pairs(world, width, depth, siblings, trials, seed=0):
    """Counts of the first two emitted tokens over many rounds (the second from a fresh round when the
    first round emitted only one token, as the decode loop would)."""
    g = torch.Generator().manual_seed(seed)
    counts = np.zeros((V, V))
    for _ in range(trials):
        tokens, draft, parents, target = world.draw_tree(width, depth, siblings, g)
        path, nxt = verify_tree(target, draft, tokens, parents, g)
        out = tokens[path].tolist() + [nxt]
        if len(out) < 2:  # nothing accepted: the next round starts after the first token
            out.append(draw(world.p[(out[0],)], g))
        counts[out[0], out[1]] += 1
    return counts


def test_draw_is_samples_token_for_the_same_random_numbers():
    rows, g, h = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
    for i in range(2000):
        row = random_dist(rows, sharp=4.0 if i % 2 else 1.0)
        if i % 3 == 0:
            row[int(row.argmax())] = 0  # a zero (never drawn), as draws without replacement leave
        assert draw(row, g) == int(sample(row, h))


def exact_pairs(world):
    return np.array([[float(world.p[()][a] * world.p[(a,)][b]) for b in range(V)] for a in range(V)])


@pytest.mark.parametrize("siblings", SIBLINGS)
@pytest.mark.parametrize("width, depth", [(2, 2), (3, 2), (2, 3)])
def test_the_first_two_emitted_tokens_follow_the_target(siblings, width, depth):
    world = World(seed=width * 10 + depth)
    counts = emitted_pairs(world, width, depth, siblings, trials=TRIALS)
    assert chi_square_pvalue(counts.ravel(), exact_pairs(world).ravel()) > 1e-3


@pytest.mark.parametrize("broken", ["siblings tested against an unchanged p", "residual left unnormalised"])
@pytest.mark.parametrize("siblings", SIBLINGS)
def test_a_broken_rule_fails_the_check(monkeypatch, broken, siblings):
    if broken == "siblings tested against an unchanged p":
        monkeypatch.setattr(verification, "residual_distribution", lambda p, q: p)
    else:
        monkeypatch.setattr(verification, "residual_distribution", lambda p, q: torch.clamp(p - q, min=0))
    world = World(seed=3)
    # With replacement an unnormalised residual only lowers the later siblings' acceptance a little:
    # it takes more rounds to see.
    trials = 20000 if siblings == "with replacement" and "unnormalised" in broken else TRIALS
    counts = emitted_pairs(world, 3, 2, siblings, trials=trials)
    assert chi_square_pvalue(counts.ravel(), exact_pairs(world).ravel()) < 1e-6


def test_a_chain_gives_what_verify_gives_with_the_same_random_numbers():
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        target = torch.stack([random_dist(g) for _ in range(4)])
        draft = torch.stack([random_dist(g) for _ in range(3)])
        tokens = torch.stack([sample(r, g) for r in draft])
        seed = int(torch.randint(0, 2**31, (), generator=g))
        n, nxt = verify(target, draft, tokens, torch.Generator().manual_seed(seed))
        path, nxt2 = verify_tree(target, draft, tokens, [-1, 0, 1], torch.Generator().manual_seed(seed))
        assert path == list(range(n)) and nxt2 == nxt


def test_greedy_follows_the_children_that_match_the_argmax():
    parents = [-1, -1, -1, 1, 1, 3, 2]
    tokens = torch.tensor([4, 2, 3, 0, 1, 3, 3])
    rows = [2, 4, 1, 4, 1, 4, 4, 0]  # argmax after the root, then after each node
    target = torch.nn.functional.one_hot(torch.tensor(rows), V).float()
    path, nxt = verify_tree(target, None, tokens, parents)
    assert path == [1, 4] and nxt == rows[1 + 4]
    draft = torch.nn.functional.one_hot(tokens, V).float()  # a greedy draft's one-hot q: the same answer
    assert verify_tree(target, draft, tokens, parents) == (path, nxt)


def test_an_empty_tree_draws_from_the_first_row():
    target = torch.nn.functional.one_hot(torch.tensor([3]), V).float()
    assert verify_tree(target, None, torch.tensor([], dtype=torch.long), []) == ([], 3)


@pytest.mark.parametrize("target, draft, tokens, parents, message", [
    (torch.ones(3, V) / V, None, torch.tensor([0, 1]), [-1, 1], "earlier node"),
    (torch.ones(3, V) / V, None, torch.tensor([0, 1]), [-1], "one entry per draft node"),
    (torch.ones(2, V) / V, None, torch.tensor([0, 1]), [-1, 0], "N \\+ 1"),
    (torch.ones(3, V) / V, torch.ones(2, V + 1), torch.tensor([0, 1]), [-1, 0], "draft_probs"),
    (torch.ones(3, V) / V, None, torch.tensor([0, V]), [-1, 0], "token ids"),
])
def test_bad_input_is_refused(target, draft, tokens, parents, message):
    with pytest.raises(ValueError, match=message):
        verify_tree(target, draft, tokens, parents)


def test_typical_acceptance_takes_the_first_plausible_child_and_is_biased():
    from speclab.verification import typical_accept_tree, typical_emitted_distribution
    p = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0])
    target = torch.stack([p, p, p])
    # children of the root: token 3 (below the threshold), then token 1 (above it)
    assert typical_accept_tree(target, torch.tensor([3, 1]), [-1, -1])[0] == [1]
    emitted = typical_emitted_distribution(p, [3, 1])
    assert emitted[1] == 1 and 0.5 * (emitted - p).abs().sum() == pytest.approx(0.7)  # total variation 0.7
    assert torch.equal(typical_emitted_distribution(p, [3, 4]), p)  # none passes: p itself


def test_the_medusa_reference_rule_keeps_the_longest_passing_path_then_the_likeliest():
    """evaluate_posterior's decision: the deepest node whose whole path passes (not the first child
    that passes, as speclab's variant takes), ties by the path's likelihood; when nothing passes, the
    row's argmax (fast) or a token at or above the threshold (not fast)."""
    from speclab.verification import medusa_typical_accept_tree, typical_accept_tree
    p = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0])
    target = torch.stack([p, p, p, p])
    # root children: 1 (passes, no passing child), 0 (passes), then 0's child 2 (passes)
    tokens, parents = torch.tensor([1, 0, 2]), [-1, -1, 1]
    assert typical_accept_tree(target, tokens, parents)[0] == [0]       # speclab: the first that passes
    assert medusa_typical_accept_tree(target, tokens, parents) == ([1, 2], 0)  # the longest path; argmax next
    # two passing root children, no deeper path: the likelier one (0.5 beats 0.3)
    assert medusa_typical_accept_tree(target[:3], torch.tensor([1, 0]), [-1, -1])[0] == [1]
    # nothing passes: no path; fast takes the argmax, not fast draws only tokens at or above the bar
    assert medusa_typical_accept_tree(target[:2], torch.tensor([3]), [-1]) == ([], 0)
    drawn = {medusa_typical_accept_tree(target[:2], torch.tensor([3]), [-1], fast=False,
                                        generator=torch.Generator().manual_seed(s))[1] for s in range(200)}
    assert drawn == {0, 1, 2}  # 0.05 is under the bar min(0.09, 0.3 exp(-H(p)))


def test_the_two_typical_rules_emit_different_biased_distributions():
    from speclab.verification import typical_emitted_distribution
    p = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0])
    speclab_rule = typical_emitted_distribution(p, [1, 0])
    medusa_rule = typical_emitted_distribution(p, [1, 0], rule="reference")
    assert speclab_rule[1] == 1 and medusa_rule[0] == 1   # the first that passes; the likeliest that passes
    assert typical_emitted_distribution(p, [3], rule="reference")[0] == 1  # none passes: the argmax
    cut = typical_emitted_distribution(p, [3], rule="reference", fast=False)
    torch.testing.assert_close(cut, torch.tensor([0.5, 0.3, 0.15, 0.0, 0.0]) / 0.95)
    with pytest.raises(ValueError, match="rule must be"):
        typical_emitted_distribution(p, [3], rule="eagle")


def test_typical_runs_say_they_are_not_lossless(pair, prompt):
    from speclab import generate, speculative_generate
    target, draft = pair
    for rule in ("typical", "typical-medusa"):
        result = speculative_generate(target, draft, prompt, k=3, max_new_tokens=20, acceptance=rule)
        assert not result.stats.lossless and "NOT LOSSLESS" in str(result.stats) and rule in result.stats.method
        assert result.tokens.tolist() == generate(target, prompt, max_new_tokens=20).tokens.tolist()  # greedy: exact
    with pytest.raises(ValueError, match="acceptance must be"):
        speculative_generate(target, draft, prompt, k=3, max_new_tokens=5, acceptance="lenient")


def test_the_exact_sibling_distribution_is_the_target_row():
    from speclab.verification import sibling_emitted_distribution
    p = random_dist(torch.Generator().manual_seed(4))
    for candidates in ([], [2], [3, 0], [4, 1, 2, 0]):
        torch.testing.assert_close(sibling_emitted_distribution(p, candidates), p)
