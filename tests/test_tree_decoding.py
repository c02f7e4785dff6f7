"""Tree drafts in the decode loop: greedy output equals target-only decoding for chains and random
trees, the cache holds exactly the accepted text after every round, sampled trees are lossless end to
end, and models that cannot take a tree mask are refused by name."""
import random

import numpy as np
import pytest
import torch
from transformers import DynamicCache, LlamaForCausalLM

import speclab.decoding as decoding
from speclab import Draft, Drafter, generate, speculative_generate
from speclab.measure.acceptance import chi_square_pvalue
from speclab.measure.lossless import replayed_passes
from speclab.methods.draft_model import ModelDrafter
from speclab.runner import ModelRunner
from speclab.sampling import sample
from tests.conftest import CACHE_TOLERANCE, tiny_model
from tests.test_lossless import PROMPT, VOCAB, exact_joint


class RandomTreeDrafter(Drafter):
    """Random trees (depth 1-5, width 1-4) that hold the target's true continuation on a random
    sibling at each level, or not at all (then a random sibling carries a wrong token)."""

    name = "random tree"

    def __init__(self, reference, prompt_len, vocab, seed):
        self.reference, self.prompt_len, self.vocab = reference, prompt_len, vocab
        self.rng = random.Random(seed)

    def propose(self, ids, k, sampling, generator=None):
        truth = self.reference[len(ids) - self.prompt_len:]
        depth, width = self.rng.randint(1, 5), self.rng.randint(1, 4)
        true_levels = self.rng.randint(0, depth) if self.rng.random() < 0.8 else 0  # how deep the truth goes
        tokens, parents, frontier = [], [], [(-1, True)]
        for level in range(depth):
            next_frontier = []
            for node, on_truth in frontier[:3]:
                n_kids = self.rng.randint(1, width)
                truth_at = self.rng.randrange(n_kids) if on_truth and level < min(true_levels, len(truth)) else -1
                for j in range(n_kids):
                    token = truth[level] if j == truth_at else self.rng.randrange(self.vocab)
                    tokens.append(token)
                    parents.append(node)
                    next_frontier.append((len(tokens) - 1, j == truth_at))
            self.rng.shuffle(next_frontier)
            frontier = sorted(next_frontier, key=lambda f: not f[1])  # keep the true node among the expanded
        return Draft(torch.tensor(tokens, dtype=torch.long), parents=parents)


class CheckedRunner(ModelRunner):
    instances: list = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        CheckedRunner.instances.append(self)


class CacheCheckingDrafter(RandomTreeDrafter):
    """After every round, compares the target's cache with a fresh forward over the accepted text."""

    def __init__(self, target, *args):
        super().__init__(*args)
        self.target, self.rounds_checked = target, 0

    def update(self, ids, num_accepted):
        runner = CheckedRunner.instances[-1]
        fresh = DynamicCache(config=self.target.config)
        with torch.inference_mode():
            self.target(input_ids=ids[:-1].view(1, -1), past_key_values=fresh, use_cache=True)
        assert runner.length == len(ids) - 1
        for mine, theirs in zip(runner.cache.layers, fresh.layers):
            torch.testing.assert_close(mine.keys, theirs.keys, **CACHE_TOLERANCE)
            torch.testing.assert_close(mine.values, theirs.values, **CACHE_TOLERANCE)
        self.rounds_checked += 1


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_greedy_random_trees_equal_target_only(arch, prompt):
    target = tiny_model(arch, layers=2, seed=0)
    reference = generate(target, prompt, max_new_tokens=60).tokens.tolist()
    for seed in range(4):
        drafter = RandomTreeDrafter(reference, len(prompt), 96, seed)
        result = speculative_generate(target, drafter, prompt, k=5, max_new_tokens=60)
        assert result.tokens.tolist() == reference, f"{arch}, seed {seed}"
        assert result.stats.accepted > 0 and result.stats.rejections > 0


def test_the_cache_equals_a_fresh_forward_after_every_round(monkeypatch, prompt):
    monkeypatch.setattr(decoding, "runner_for", lambda model, who="model": CheckedRunner(model, who))
    target = tiny_model("llama", layers=2, seed=0)
    reference = generate(target, prompt, max_new_tokens=40).tokens.tolist()
    drafter = CacheCheckingDrafter(target, reference, len(prompt), 96, 7)
    result = speculative_generate(target, drafter, prompt, k=4, max_new_tokens=40)
    assert result.tokens.tolist() == reference and drafter.rounds_checked == result.stats.rounds


def test_a_chain_written_as_a_tree_is_a_chain(pair, prompt):
    """parents [-1, 0, 1, ...] go through the chain's path: same output, same statistics."""
    target, draft_model = pair

    class ExplicitChain(Drafter):
        def __init__(self):
            self.inner = ModelDrafter(draft_model)

        def start(self, p):
            self.inner.start(p)

        def propose(self, ids, k, sampling, generator=None):
            d = self.inner.propose(ids, k, sampling, generator)
            return Draft(d.tokens, d.probs, parents=list(range(-1, len(d) - 1)))

        def update(self, ids, n):
            self.inner.update(ids, n)

    plain = speculative_generate(target, draft_model, prompt, k=4, max_new_tokens=30, temperature=1.0, seed=3)
    tree = speculative_generate(target, ExplicitChain(), prompt, k=4, max_new_tokens=30, temperature=1.0, seed=3)
    assert tree.tokens.tolist() == plain.tokens.tolist()
    assert tree.stats.accepted_lengths == plain.stats.accepted_lengths


def test_a_tree_deeper_than_k_is_cut_to_k(pair, prompt):
    target, _ = pair
    reference = generate(target, prompt, max_new_tokens=20).tokens.tolist()

    class Deep(Drafter):
        def propose(self, ids, k, sampling, generator=None):
            truth = reference[len(ids) - len(prompt):][:6]
            return Draft(torch.tensor(truth), parents=list(range(-1, len(truth) - 1)))

    result = speculative_generate(target, Deep(), prompt, k=2, max_new_tokens=20)
    assert result.tokens.tolist() == reference and result.stats.drafted <= 2 * result.stats.rounds


class SampledTreeDrafter(Drafter):
    """A draft model's tree: `width` children of the root drawn with replacement from q, each with one
    child drawn from q after it. Each node reports the q it was drawn from."""

    name = "sampled tree"

    def __init__(self, model, width=2):
        self.model, self.width = model, width
        self.q_of = {}  # q after each sequence, computed once (a pass over the whole sequence, no cache)

    @torch.no_grad()
    def q(self, ids, sampling):
        key = (tuple(ids.tolist()), sampling)
        if key not in self.q_of:
            self.q_of[key] = sampling.probs(self.model(input_ids=ids.view(1, -1)).logits[0, -1])
        return self.q_of[key].clone()

    def propose(self, ids, k, sampling, generator=None):
        q0 = self.q(ids, sampling)
        first = [sample(q0, generator) for _ in range(self.width)]
        tokens, probs, parents = list(first), [q0] * self.width, [-1] * self.width
        if k > 1:
            for i, x in enumerate(first):
                q1 = self.q(torch.cat([ids, x.view(1)]), sampling)
                tokens.append(sample(q1, generator))
                probs.append(q1)
                parents.append(i)
        return Draft(torch.stack(tokens), torch.stack(probs), parents)


@pytest.mark.parametrize("settings", [dict(temperature=1.0), dict(temperature=1.0, top_p=0.8)],
                         ids=["temperature 1", "top-p 0.8"])
def test_sampled_trees_match_the_target_end_to_end(settings):
    target = tiny_model("llama", layers=2, vocab=VOCAB, seed=10, init=0.2)
    drafter = SampledTreeDrafter(tiny_model("llama", layers=1, vocab=VOCAB, seed=11, init=0.2))
    counts = np.zeros((VOCAB, VOCAB))
    with replayed_passes():  # the target's passes computed once per history: the same samples, for less
        for seed in range(2000):
            t1, t2 = speculative_generate(target, drafter, PROMPT, k=2, max_new_tokens=3, seed=seed,
                                          **settings).tokens.tolist()[:2]
            counts[t1, t2] += 1
    assert chi_square_pvalue(counts, exact_joint(target, settings)) > 1e-3


class IgnoresMasks(LlamaForCausalLM):
    """A model whose attention never sees a custom mask (as with kernels that drop 4-D masks)."""

    def forward(self, *args, attention_mask=None, position_ids=None, **kwargs):
        return super().forward(*args, **kwargs)


def test_a_model_that_ignores_tree_masks_is_refused_by_name(prompt):
    model = IgnoresMasks(tiny_model("llama", layers=2, seed=0).config).eval()
    reference = generate(model, prompt, max_new_tokens=10).tokens.tolist()
    with pytest.raises(TypeError, match="IgnoresMasks"):
        speculative_generate(model, RandomTreeDrafter(reference, len(prompt), 96, 0), prompt, k=3, max_new_tokens=10)


def test_bad_drafts_are_refused():
    with pytest.raises(ValueError, match="earlier node"):
        Draft(torch.tensor([1, 2]), parents=[-1, 1])
    with pytest.raises(ValueError, match="one entry per draft node"):
        Draft(torch.tensor([1, 2]), parents=[-1])
    with pytest.raises(ValueError, match="rows"):
        Draft(torch.tensor([1, 2]), torch.ones(3, 5))


@pytest.mark.parametrize("settings", [dict(temperature=1.0), dict(temperature=0.7, top_p=0.9)],
                         ids=["temperature 1", "temperature 0.7, top-p 0.9"])
def test_medusa_top_k_trees_are_lossless_when_sampling(settings):
    """Deterministic top-k siblings (point masses) under the sampled rule: the first two tokens still
    follow the target."""
    from speclab import MedusaDrafter
    from speclab.methods.medusa import MedusaHeads
    target = tiny_model("llama", layers=2, vocab=VOCAB, seed=10, init=0.2)
    torch.manual_seed(3)
    heads = MedusaHeads.for_target(target, num_heads=2)
    for head in heads.heads:
        head[0].linear.weight.data.normal_(0, 0.5)
    drafter = MedusaDrafter(heads, [(0,), (1,), (2,), (0, 0), (0, 1), (1, 0)])
    counts = np.zeros((VOCAB, VOCAB))
    with replayed_passes():
        for seed in range(2000):
            t1, t2 = speculative_generate(target, drafter, PROMPT, k=2, max_new_tokens=3, seed=seed,
                                          **settings).tokens.tolist()[:2]
            counts[t1, t2] += 1
    assert chi_square_pvalue(counts, exact_joint(target, settings)) > 1e-3
