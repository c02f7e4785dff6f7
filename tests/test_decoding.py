"""The decode loop: exact greedy equality, stopping rules, statistics and input checks."""
import pytest
import torch

from speclab import PromptLookupDrafter, generate, speculative_generate
from speclab.drafting import Draft, Drafter, SideBranch
from tests.conftest import tiny_model


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "mistral"])
def test_greedy_speculative_equals_target_only_for_every_k(arch, prompt):
    target = tiny_model(arch, layers=2, seed=0)
    draft = tiny_model(arch, layers=1, seed=1)
    reference = generate(target, prompt, max_new_tokens=40).tokens.tolist()
    assert len(reference) == 40
    for k in range(1, 9):
        result = speculative_generate(target, draft, prompt, k=k, max_new_tokens=40)
        assert result.tokens.tolist() == reference, f"{arch}, k={k}"


def test_self_drafting_accepts_everything(pair, prompt):
    target, _ = pair
    result = speculative_generate(target, target, prompt, k=4, max_new_tokens=30)
    assert result.stats.acceptance_rate == 1.0
    assert result.stats.accepted_lengths[-1] == result.stats.rounds - 1 or result.stats.accepted_lengths[-1] >= 5
    assert result.tokens.tolist() == generate(target, prompt, max_new_tokens=30).tokens.tolist()


def test_prompt_lookup_is_exact_and_drafts_from_repetition(pair):
    target, _ = pair
    repetitive = torch.tensor([3, 4, 5, 6, 7, 3, 4, 5, 6, 7, 3, 4, 5, 6, 7, 3, 4])
    reference = generate(target, repetitive, max_new_tokens=30).tokens.tolist()
    result = speculative_generate(target, PromptLookupDrafter(max_ngram=3), repetitive, k=4, max_new_tokens=30)
    assert result.tokens.tolist() == reference
    assert result.stats.drafted > 0 and result.stats.draft_calls == 0


def test_prompt_lookup_proposes_what_followed_the_latest_match():
    drafter = PromptLookupDrafter(max_ngram=2, choose="latest")
    ids = torch.tensor([1, 2, 3, 9, 1, 2, 4, 5, 1, 2])
    draft = drafter.propose(ids, 3, None)
    assert draft.tokens.tolist() == [4, 5, 1] and draft.probs is None
    assert len(drafter.propose(torch.tensor([1, 2, 3]), 3, None)) == 0  # nothing repeats


@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize("max_new", [1, 2, 5, 17])
def test_never_more_tokens_than_asked(pair, prompt, k, max_new):
    target, draft = pair
    result = speculative_generate(target, target, prompt, k=k, max_new_tokens=max_new)  # all accepted: worst case
    assert len(result.tokens) == max_new
    result = speculative_generate(target, draft, prompt, k=k, max_new_tokens=max_new)
    assert len(result.tokens) == max_new


def test_stops_at_eos_and_never_emits_after_it(pair, prompt):
    target, draft = pair
    free = generate(target, prompt, max_new_tokens=40).tokens.tolist()
    eos = free[12]  # pretend a token in the middle is EOS
    cut = free[:free.index(eos) + 1]
    assert generate(target, prompt, max_new_tokens=40, eos_token_id=eos).tokens.tolist() == cut
    for k in (1, 4, 8):
        for d in (draft, target):  # the self-draft accepts EOS as a draft token mid-round
            got = speculative_generate(target, d, prompt, k=k, max_new_tokens=40, eos_token_id=[999, eos])
            assert got.tokens.tolist() == cut


def test_statistics_are_consistent(pair, prompt):
    target, draft = pair
    result = speculative_generate(target, draft, prompt, k=4, max_new_tokens=50)
    s = result.stats
    assert s.new_tokens == len(result.tokens) == 50
    assert s.target_calls == s.rounds + 1  # prefill + one pass per round
    assert sum(s.accepted_lengths) == s.rounds
    assert s.accepted == sum(i * n for i, n in enumerate(s.accepted_lengths))
    assert s.drafted >= s.accepted and s.draft_calls == s.drafted
    assert 0 <= s.acceptance_rate <= 1 and s.wall_s > 0 and s.ms_per_token > 0
    assert sum(len(r.new_tokens) for r in result.trace) == 50
    assert s.mean_tokens_per_round == pytest.approx(50 / s.rounds)
    assert "acceptance rate" in str(result)


def test_sampling_is_reproducible_with_a_seed(pair, prompt):
    target, draft = pair
    a = speculative_generate(target, draft, prompt, k=3, max_new_tokens=20, temperature=1.0, seed=7)
    b = speculative_generate(target, draft, prompt, k=3, max_new_tokens=20, temperature=1.0, seed=7)
    assert a.tokens.tolist() == b.tokens.tolist()
    c = generate(target, prompt, max_new_tokens=20, temperature=1.0, seed=7)
    assert c.tokens.tolist() == generate(target, prompt, max_new_tokens=20, temperature=1.0, seed=7).tokens.tolist()


def test_draft_with_a_narrower_padded_vocabulary(prompt):
    """Qwen-style: the draft's embedding matrix is narrower than the target's; extra ids get zero mass."""
    target = tiny_model("qwen2", vocab=128, seed=0)
    draft = tiny_model("qwen2", vocab=96, seed=1, layers=1)
    reference = generate(target, prompt, max_new_tokens=25).tokens.tolist()
    assert speculative_generate(target, draft, prompt, k=4, max_new_tokens=25).tokens.tolist() == reference


def test_a_draft_moves_to_the_targets_device_whole():
    """The loop moves each proposal to the target's device (Draft.to): a drafter written for the CPU drafts
    for a target on a GPU unchanged. The meta device stands in for the GPU here (.ci/gpu-check runs the
    custom drafters of this file on a real one)."""
    side = SideBranch(torch.tensor([7, 8]), [1, 2], torch.eye(2, dtype=torch.bool))
    draft = Draft(torch.tensor([3, 4]), torch.full((2, 5), 0.2), [-1, 0], side)
    assert draft.to(torch.device("cpu")) is draft
    moved = Draft(draft.tokens, draft.probs, draft.parents).to(torch.device("meta"))
    assert moved.tokens.is_meta and moved.probs.is_meta and moved.parents == [-1, 0] and len(moved) == 2
    side_moved = side.to(torch.device("cpu"))  # SideBranch checks its mask's values: no meta stand-in
    assert side_moved.tokens.tolist() == [7, 8] and side_moved.depths == [1, 2]
    assert torch.equal(side_moved.sees, side.sees)


def test_a_custom_drafter_plugs_in_unchanged(pair, prompt):
    """Any Drafter works with the loop: here one that always proposes the same token."""
    class Constant(Drafter):
        name = "constant"

        def propose(self, ids, k, sampling, generator=None):
            return Draft(torch.full((k,), 5, dtype=torch.long))

    target, _ = pair
    result = speculative_generate(target, Constant(), prompt, k=2, max_new_tokens=15, temperature=1.0, seed=0)
    assert len(result.tokens) == 15 and result.stats.method == "speculative (constant)"


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(k=0), ValueError, "k"),
    (dict(k=2.5), ValueError, "k"),
    (dict(temperature=-1.0), ValueError, "temperature"),
    (dict(top_p=0.0, temperature=1.0), ValueError, "top_p"),
    (dict(top_p=1.01, temperature=1.0), ValueError, "top_p"),
    (dict(top_k=0, temperature=1.0), ValueError, "top_k"),
    (dict(max_new_tokens=0), ValueError, "max_new_tokens"),
    (dict(max_new_tokens=300), ValueError, "context"),
    (dict(input_ids=[]), ValueError, "empty"),
    (dict(input_ids=torch.zeros(2, 4, dtype=torch.long)), ValueError, "one sequence"),
    (dict(input_ids=[1, 2, 500]), ValueError, "token ids"),
    (dict(input_ids=torch.ones(300, dtype=torch.long)), ValueError, "prompt .300 tokens. is longer"),
])
def test_bad_input_is_refused_with_a_clear_error(pair, prompt, kwargs, error, message):
    target, draft = pair
    args = {"input_ids": prompt, "k": 4, "max_new_tokens": 10, **kwargs}
    with pytest.raises(error, match=message):
        speculative_generate(target, draft, **args)
    if "k" not in kwargs:
        args.pop("k")
        with pytest.raises(error, match=message):
            generate(target, **args)


def test_models_on_different_devices_are_refused(pair, prompt):
    target, _ = pair
    draft_on_meta = tiny_model("llama", layers=1).to("meta")
    with pytest.raises(ValueError, match="same device"):
        speculative_generate(target, draft_on_meta, prompt, k=2, max_new_tokens=5)


def test_nan_logits_are_refused(prompt):
    broken = tiny_model("llama", layers=1, seed=3)
    with torch.no_grad():
        broken.lm_head.weight[7] = float("nan")
    healthy = tiny_model("llama", layers=1, seed=4)
    with pytest.raises(FloatingPointError, match="target model"):
        generate(broken, prompt, max_new_tokens=3)
    with pytest.raises(FloatingPointError, match="draft model"):
        speculative_generate(healthy, broken, prompt, k=2, max_new_tokens=3)
    with pytest.raises(FloatingPointError, match="target model"):
        speculative_generate(broken, healthy, prompt, k=2, max_new_tokens=3)
