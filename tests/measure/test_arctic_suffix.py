"""Arctic Inference's suffix decoding behind speclab's Drafter interface (the bench's arctic rows): exact
where it is installed (`bash .ci/install-arctic-suffix.sh .venv`), and drafting what speclab's suffix
drafter drafts on a history where the two agree by construction."""
import importlib.util

import pytest
import torch

from speclab import generate, speculative_generate
from speclab.measure.arctic_suffix import ArcticSuffixDrafter
from speclab.methods.suffix import SuffixDrafter
from speclab.sampling import SamplingParams
from tests.conftest import tiny_model

pytestmark = pytest.mark.skipif(importlib.util.find_spec("arctic_inference") is None,
                                reason="Arctic Inference not built here: bash .ci/install-arctic-suffix.sh .venv")


@pytest.mark.parametrize("tree", [False, True])
def test_greedy_output_equals_target_only_over_a_series_of_requests(tree):
    target = tiny_model("llama", layers=2, seed=0)
    drafter = ArcticSuffixDrafter(tree=tree)
    for prompt in (torch.tensor([5, 17, 42, 8, 23, 61, 7, 30, 5, 17, 42]), torch.tensor([3, 5, 17, 42])):
        result = speculative_generate(target, drafter, prompt, k=6, max_new_tokens=30)
        assert result.tokens.tolist() == generate(target, prompt, max_new_tokens=30).tokens.tolist()


def test_an_earlier_requests_output_is_drafted_by_both_implementations():
    greedy = SamplingParams()
    for drafter in (ArcticSuffixDrafter(), SuffixDrafter()):
        drafter.start(torch.tensor([9]))
        drafter.propose(torch.tensor([9, 40, 41, 42, 43, 44]), 4, greedy)
        drafter.start(torch.tensor([6, 40, 41]))
        assert drafter.propose(torch.tensor([6, 40, 41]), 4, greedy).tokens.tolist() == [42, 43]
