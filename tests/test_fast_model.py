"""The fast path's network (speclab.fast_model): the same logits and hidden states as transformers' model
on the same weights, the static cache written by position, and models it cannot take refused by name."""
import pytest
import torch

from speclab import shared_draft
from speclab.fast_model import FastLlama
from tests.conftest import tiny_model

IDS = torch.tensor([5, 17, 42, 8, 23, 61, 7, 30])


def causal(n: int, cached: int = 0) -> torch.Tensor:
    return torch.cat([torch.ones(n, cached, dtype=torch.bool), torch.ones(n, n, dtype=torch.bool).tril()], 1)


@pytest.mark.parametrize("kv_heads", [4, 2, 1])  # multi-head, grouped and multi-query attention
def test_logits_and_hidden_states_equal_transformers(kv_heads):
    model = tiny_model("llama", layers=2, kv_heads=kv_heads)
    fast = FastLlama(model, max_len=32)
    n = len(IDS)
    with torch.no_grad():
        theirs = model(IDS.view(1, -1), output_hidden_states=True)
        logits, features = fast(IDS, torch.arange(n), torch.arange(n), causal(n), n, feature_layers=(0, 1, 2, -1))
    torch.testing.assert_close(logits, theirs.logits[0], atol=1e-5, rtol=1e-5)
    hidden = features.view(n, 4, -1)
    for i, layer in enumerate((0, 1, 2, -1)):  # -1 and 2 (the last): after the final norm, as transformers'
        torch.testing.assert_close(hidden[:, i], theirs.hidden_states[layer][0], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_products_and_attention_as_generated_loops_give_the_same_logits(kv_heads):
    """What the compiled CPU path runs for a few rows: FastLlama.linear as a multiply-and-sum and
    looped_attention, against x @ W.T and torch's attention, on a cached tree pass (a mask that is
    not causal), for multi-head, grouped and multi-query attention."""
    model = tiny_model("llama", layers=2, kv_heads=kv_heads)
    fast = FastLlama(model, max_len=32)
    prefix, tree = IDS[:4], IDS[4:]
    sees = causal(4, cached=4)
    sees[2, 5], sees[3, 6] = False, False  # nodes 2 and 3 are siblings of 1 and 2: a tree, not a chain
    outputs = []
    with torch.no_grad():
        for rows in (0, 8):
            fast.gemv_rows = rows
            fast(prefix, torch.arange(4), torch.arange(4), causal(4), 4)
            logits, _ = fast(tree, torch.arange(4, 8), torch.tensor([4, 5, 5, 6]), sees, 8)
            outputs.append(logits)
    torch.testing.assert_close(outputs[1], outputs[0], atol=1e-5, rtol=1e-5)


def test_a_cached_step_reads_what_earlier_steps_wrote():
    model = tiny_model("llama", layers=2)
    fast = FastLlama(model, max_len=32)
    with torch.no_grad():
        fast(IDS[:5], torch.arange(5), torch.arange(5), causal(5), 5)
        for i in range(5, len(IDS)):  # one token at a time, each at its slot
            step, _ = fast(IDS[i:i + 1], torch.tensor([i]), torch.tensor([i]), causal(1, i), i + 1)
        whole = model(IDS.view(1, -1)).logits[0, -1]
    torch.testing.assert_close(step[0], whole, atol=1e-5, rtol=1e-5)


def test_stale_slots_past_the_mask_are_never_read():
    """Rolling back is a length: slots written by rejected tokens stay in the buffer, and a pass whose
    mask stops before them gives the logits of a cache that never held them."""
    model = tiny_model("llama", layers=2)
    fast = FastLlama(model, max_len=32)
    with torch.no_grad():
        fast(IDS, torch.arange(8), torch.arange(8), causal(8), 8)  # slots 5..7 now hold tokens we reject
        again, _ = fast(torch.tensor([9]), torch.tensor([5]), torch.tensor([5]), causal(1, 5), 6)
        truth = model(torch.cat([IDS[:5], torch.tensor([9])]).view(1, -1)).logits[0, -1]
    torch.testing.assert_close(again[0], truth, atol=1e-5, rtol=1e-5)


def test_a_shared_draft_keeps_its_reduced_vocabulary_head():
    target = tiny_model("llama", layers=2, vocab=96)
    draft = tiny_model("llama", layers=1, vocab=96, seed=3)
    draft.lm_head = shared_draft.DraftVocabHead(32, torch.arange(0, 96, 3), 96)
    torch.nn.init.normal_(draft.lm_head.weight)
    shared_draft.share_embeddings(draft, target)
    fast = FastLlama(draft, max_len=16)
    with torch.no_grad():
        logits, _ = fast(IDS, torch.arange(8), torch.arange(8), causal(8), 8)
        theirs = draft(IDS.view(1, -1)).logits[0]
    torch.testing.assert_close(logits, theirs)
    assert torch.isinf(logits[:, 1]).all() or (logits[:, 1] == torch.finfo(logits.dtype).min).all()


@pytest.mark.parametrize("arch", ["qwen2", "mistral"])
def test_other_architectures_are_refused_by_name(arch):
    model = tiny_model(arch, layers=1)
    with pytest.raises(TypeError, match=rf"model_type '{arch}'.*eager path"):
        FastLlama(model, max_len=16)


def test_a_llama_with_biases_is_refused():
    model = tiny_model("llama", layers=1)
    model.config.attention_bias = True
    with pytest.raises(TypeError, match="attention_bias"):
        FastLlama(model, max_len=16)
