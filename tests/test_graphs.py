"""speclab.graphs: CUDA graphs recorded on the fast path's fixed buffers. On a CPU the graphs' bookkeeping
runs as its dry run (a replay calls the function again on the static buffers); with SPECLAB_TEST_DEVICE=cuda
(.ci/gpu-check) the same tests record and replay real graphs."""
import pytest
import torch

from speclab import generate, load_pair, speculative_generate
from speclab.graphs import GraphedCall
from speclab.methods import load_drafter
from speclab.runner import disable_fast_path, enable_fast_path, fast_path_of
from tests.conftest import DEVICE, tiny_model

DRY = DEVICE.type != "cuda"


@pytest.fixture()
def graphs_mode(monkeypatch):
    """The 'graphs' fast path: its dry run on a CPU, real CUDA graphs on a GPU."""
    if DRY:
        monkeypatch.setenv("SPECLAB_GRAPHS_DRY_RUN", "1")


def test_one_graph_per_key_fed_through_its_static_inputs():
    calls = []

    def scaled(x, factor):
        calls.append(factor)
        return x * factor, None

    graphed = GraphedCall(scaled, dry_run=DRY)
    a, b = torch.arange(4.0, device=DEVICE), torch.ones(4, device=DEVICE)
    out, none = graphed(a, 2.0)
    assert torch.equal(out, a * 2) and none is None
    out[0] = 100.0  # the caller's copy: the next replay's output is not it
    assert torch.equal(graphed(b, 2.0)[0], b * 2) and torch.equal(out[1:], a[1:] * 2)
    graphed(b, 3.0), graphed(b[:2], 3.0)
    assert len(graphed.graphs) == 3  # factor and shape are part of the key; values are not


def test_a_pass_that_writes_a_buffer_in_place_writes_it_on_every_replay():
    """The static cache's case: the function writes a buffer that never moves at slots given as input."""
    cache = torch.zeros(6, device=DEVICE)

    def write(values, slots):
        cache.index_copy_(0, slots, values)
        return cache.sum()

    graphed = GraphedCall(write, dry_run=DRY)
    graphed(torch.tensor([1.0, 2.0], device=DEVICE), torch.tensor([0, 1], device=DEVICE))
    total = graphed(torch.tensor([3.0, 4.0], device=DEVICE), torch.tensor([2, 3], device=DEVICE))
    assert cache.tolist() == [1, 2, 3, 4, 0, 0] and total.item() == 10


@pytest.mark.skipif(not DRY, reason="a CPU's refusal")
def test_real_graphs_on_a_cpu_are_refused_with_what_to_do(monkeypatch):
    monkeypatch.delenv("SPECLAB_GRAPHS_DRY_RUN", raising=False)
    with pytest.raises(ValueError, match="CUDA device.*'static' or 'compiled'.*SPECLAB_GRAPHS_DRY_RUN"):
        enable_fast_path(tiny_model("llama", layers=1), "graphs")
    with pytest.raises(ValueError, match="CUDA device"):
        GraphedCall(torch.neg)(torch.ones(2))


@pytest.fixture(scope="module")
def bundled():
    return load_pair(device=DEVICE, dtype=torch.float32)  # float32 on a GPU too: eager and graphed, same sums


@pytest.mark.parametrize("method", ["draft_model", "ngram", "eagle", "eagle3", "medusa"])
def test_every_method_of_the_gpu_check_is_greedy_exact_on_the_graphs_path(bundled, method, graphs_mode):
    """.ci/gpu-check's methods: the target, the draft and the heads replayed from graphs, tokens and
    rounds as on the eager path."""
    target, draft, tokenizer, _ = bundled
    prompt = torch.tensor(tokenizer.encode("def read_lines(path):\n    with open(path) as f:\n"), device=DEVICE)
    reference = generate(target, prompt, max_new_tokens=16).tokens.tolist()
    drafter = load_drafter(method, target, **({"draft": draft} if method == "draft_model" else {}))
    k = None if drafter.own_depth is not None else 4
    eager = speculative_generate(target, drafter, prompt, k=k, max_new_tokens=16)
    enable_fast_path(target, "graphs", max_len=256), enable_fast_path(draft, "graphs", max_len=256)
    try:
        graphed = speculative_generate(target, drafter, prompt, k=k, max_new_tokens=16)
        assert fast_path_of(target).step.graphs  # the passes were recorded and replayed
        head = getattr(drafter, "compiled_head", None)  # the heads' steps and logits too
        assert head is None or (head.mode == "graphs" and head.forward.graphs and head.vocab_logits.graphs)
    finally:
        disable_fast_path(target), disable_fast_path(draft)
    assert eager.tokens.tolist() == graphed.tokens.tolist() == reference
    assert graphed.stats.rounds == eager.stats.rounds
