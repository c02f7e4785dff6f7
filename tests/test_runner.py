"""The fast path's runner (speclab.runner.StaticRunner) in the one decode loop: greedy output equal to the
eager path for every method, the static cache equal to a fresh forward after every round, padded verify
passes exact, sampling lossless (and a broken rule caught), and bad settings refused."""
import pytest
import torch
from transformers import DynamicCache

import speclab.decoding as decoding
import speclab.runner as runner_module
from speclab import generate, load_pair, speculative_generate
from speclab.measure.acceptance import chi_square_pvalue
from speclab.methods import METHODS, load_drafter
from speclab.methods.draft_model import ModelDrafter
from speclab.runner import ModelRunner, Runner, StaticRunner, disable_fast_path, enable_fast_path, fast_path_of
from tests.conftest import CACHE_TOLERANCE, DEVICE, tiny_model
from tests.test_lossless import SETTINGS, exact_joint, sampled_joint
from tests.test_tree_decoding import RandomTreeDrafter


@pytest.fixture()
def fast_pair(pair):
    """The tiny pair on the fast path for one test, back on the eager path after it."""
    target, draft = pair
    enable_fast_path(target, max_len=128), enable_fast_path(draft, max_len=128)
    yield target, draft
    disable_fast_path(target), disable_fast_path(draft)


def test_both_runners_declare_one_contract_and_share_keep_path():
    """ModelRunner and StaticRunner implement every method of speclab.runner.Runner (the decode loop is
    typed against it), and keeping a round's accepted path is written once, there."""
    assert not ModelRunner.__abstractmethods__ and not StaticRunner.__abstractmethods__
    assert ModelRunner.keep_path is Runner.keep_path and StaticRunner.keep_path is Runner.keep_path
    assert decoding.settle.__annotations__["runner"] in (Runner, "Runner")


def test_runner_for_follows_the_switch(pair):
    target, _ = pair
    assert not isinstance(runner_module.runner_for(target), StaticRunner)
    enable_fast_path(target, max_len=64)
    assert isinstance(runner_module.runner_for(target), StaticRunner)
    disable_fast_path(target)
    assert fast_path_of(target) is None


def test_greedy_chains_and_trees_equal_the_eager_path(pair, prompt):
    target, draft = pair
    eager = generate(target, prompt, max_new_tokens=40).tokens
    reference = eager.tolist()
    trees = RandomTreeDrafter(reference, len(prompt), 96, seed=4)
    eager_trees = speculative_generate(target, trees, prompt, k=5, max_new_tokens=40).tokens
    enable_fast_path(target, max_len=128), enable_fast_path(draft, max_len=128)
    try:
        assert generate(target, prompt, max_new_tokens=40).tokens.tolist() == reference
        chain = speculative_generate(target, ModelDrafter(draft), prompt, k=4, max_new_tokens=40)
        fast_trees = RandomTreeDrafter(reference, len(prompt), 96, seed=4)
        tree = speculative_generate(target, fast_trees, prompt, k=5, max_new_tokens=40)
    finally:
        disable_fast_path(target), disable_fast_path(draft)
    assert chain.tokens.tolist() == reference
    assert tree.tokens.tolist() == eager_trees.tolist() == reference
    assert tree.stats.rounds < 40  # trees were accepted, not only bonus tokens


def test_the_static_cache_equals_a_fresh_forward_after_every_round(fast_pair, prompt, monkeypatch):
    target, _ = fast_pair
    runners = []
    monkeypatch.setattr(decoding, "runner_for", lambda *a, **k: runners.append(runner_module.runner_for(*a, **k))
                        or runners[-1])
    reference = generate(target, prompt, max_new_tokens=30).tokens.tolist()
    checked = []

    class Checking(RandomTreeDrafter):
        def update(self, ids, num_accepted):
            runner = runners[-1]
            assert runner.length == len(ids) - 1
            fresh = DynamicCache(config=target.config)
            with torch.no_grad():
                target(input_ids=ids[:-1].view(1, -1), past_key_values=fresh, use_cache=True)
            for layer, theirs in zip(runner.path.network.layers, fresh.layers):
                torch.testing.assert_close(layer.keys[:, :, :runner.length], theirs.keys, **CACHE_TOLERANCE)
                torch.testing.assert_close(layer.values[:, :, :runner.length], theirs.values, **CACHE_TOLERANCE)
            checked.append(num_accepted)

    out = speculative_generate(target, Checking(reference, len(prompt), 96, seed=1), prompt, k=5, max_new_tokens=30)
    assert out.tokens.tolist() == reference
    assert len(checked) == out.stats.rounds and any(0 < a for a in checked) and 0 in checked


def test_padded_verify_passes_are_exact_and_padded(fast_pair, prompt, monkeypatch):
    """Widths 2 and 3 measured dearer than 4: those passes run 4 rows wide, and nothing changes."""
    target, draft = fast_pair
    reference = generate(target, prompt, max_new_tokens=30).tokens.tolist()
    path = fast_path_of(target)
    path.set_width_costs({1: 1.0, 2: 3.0, 3: 3.0, 4: 2.0, 5: 4.0})
    assert path.pad_to == {1: 1, 2: 4, 3: 4, 4: 4, 5: 5}
    widths = []
    step = path.step
    monkeypatch.setattr(path, "step", lambda ids, *a: widths.append(len(ids)) or step(ids, *a))
    out = speculative_generate(target, ModelDrafter(draft), prompt, k=2, max_new_tokens=30)
    assert out.tokens.tolist() == reference
    assert 4 in widths and 3 not in widths  # a K = 2 round verifies 3 rows, padded to 4


def test_reading_the_cache_in_buckets_changes_nothing(fast_pair, prompt):
    """The compiled path reads whole buckets of the cache (fixed shapes), the slots past the length masked."""
    target, draft = fast_pair
    reference = generate(target, prompt, max_new_tokens=30).tokens.tolist()
    fast_path_of(target).bucket = fast_path_of(draft).bucket = 16
    try:
        out = speculative_generate(target, ModelDrafter(draft), prompt, k=3, max_new_tokens=30)
    finally:
        fast_path_of(target).bucket = fast_path_of(draft).bucket = 1
    assert out.tokens.tolist() == reference


def test_a_pass_past_the_static_cache_is_refused(pair, prompt):
    target, _ = pair
    enable_fast_path(target, max_len=16)
    try:
        with pytest.raises(ValueError, match="holds 16 positions.*max_len"):
            generate(target, prompt, max_new_tokens=20)
    finally:
        disable_fast_path(target)


def test_an_unknown_mode_is_refused(pair):
    with pytest.raises(ValueError, match="static.*compiled.*graphs"):
        enable_fast_path(pair[0], mode="fast")


@pytest.fixture(scope="module", params=["static", "compiled", "graphs"])
def small_fast_pair(request):
    """test_lossless's small pair on each fast path: compiled, the products and attention of a few rows
    are the generated loops the bench runs (a handful of graphs, compiled once for the module); "graphs",
    CUDA graphs on a GPU and their dry run on a CPU (speclab.graphs)."""
    target = tiny_model("llama", layers=2, vocab=8, seed=10, init=0.2)
    draft = tiny_model("llama", layers=1, vocab=8, seed=11, init=0.2)
    with pytest.MonkeyPatch.context() as env:
        if DEVICE.type != "cuda":
            env.setenv("SPECLAB_GRAPHS_DRY_RUN", "1")
        enable_fast_path(target, request.param, max_len=16), enable_fast_path(draft, request.param, max_len=16)
    yield target, draft
    disable_fast_path(target), disable_fast_path(draft)


def test_sampling_on_the_fast_path_is_lossless(small_fast_pair):
    target, draft = small_fast_pair
    settings = SETTINGS["temperature 1"]
    assert chi_square_pvalue(sampled_joint(target, draft, settings), exact_joint(target, settings)) > 1e-3


def test_the_check_catches_a_broken_rule_on_the_fast_path(small_fast_pair, monkeypatch):
    import speclab.verification as verification
    monkeypatch.setattr(verification, "residual_distribution", lambda p, q: p)
    target, draft = small_fast_pair
    settings = SETTINGS["temperature 1"]
    assert chi_square_pvalue(sampled_joint(target, draft, settings), exact_joint(target, settings)) < 1e-6


def test_the_compiled_path_decodes_the_same_tokens(prompt):
    """torch.compile (inductor here; CUDA graphs on a GPU) over the same network: same greedy tokens. The
    model and max_len are tests/measure/test_profiling.py's compiled step's: the same two graphs, so inductor's
    cache compiles them once for both tests."""
    target = tiny_model("llama", layers=1)
    reference = generate(target, prompt, max_new_tokens=6).tokens.tolist()
    enable_fast_path(target, "compiled", max_len=64)
    try:
        assert generate(target, prompt, max_new_tokens=6).tokens.tolist() == reference
    finally:
        disable_fast_path(target)


@pytest.fixture(scope="module")
def bundled():
    return load_pair(device=DEVICE, dtype=torch.float32)  # float32 on a GPU too: eager and fast, same sums


@pytest.mark.parametrize("method", METHODS)
def test_every_method_on_the_bundled_target_is_greedy_exact_on_both_paths(bundled, method):
    target, draft, tokenizer, _ = bundled
    prompt = torch.tensor(tokenizer.encode("def read_lines(path):\n    with open(path) as f:\n"))
    reference = generate(target, prompt, max_new_tokens=16).tokens.tolist()
    options = {"draft": draft} if method == "draft_model" else {"exit_layer": 8} if method == "layer_skip" else {}
    drafter = load_drafter(method, target, **options)
    k = None if drafter.own_depth is not None else 4
    eager = speculative_generate(target, drafter, prompt, k=k, max_new_tokens=16)
    drafter.forget_requests()  # a drafter that learns across requests (suffix decoding) starts as it did
    enable_fast_path(target), enable_fast_path(draft)
    try:
        fast = speculative_generate(target, drafter, prompt, k=k, max_new_tokens=16)
    finally:
        disable_fast_path(target), disable_fast_path(draft)
    assert eager.tokens.tolist() == reference
    assert fast.tokens.tolist() == reference
    assert fast.stats.rounds == eager.stats.rounds  # the same drafts were accepted


def test_compiled_passes_run_at_a_few_widths():
    """Compiled, a pass is padded to the next of COMPILED_WIDTHS (one graph each); uncompiled, never."""
    from speclab.runner import COMPILED_MAX_WIDTH, FastPath
    compiled, static = FastPath(None, None, "compiled"), FastPath(None, None, "static")
    assert [compiled.graph_width(n) for n in (1, 5, 8, 9, 13, 33, 64)] == [1, 5, 8, 12, 16, 48, 64]
    assert compiled.graph_width(COMPILED_MAX_WIDTH + 1) == COMPILED_MAX_WIDTH + 1  # prefills: uncompiled
    assert all(static.graph_width(n) == n for n in (1, 9, 33))


def test_a_pass_at_the_end_of_the_cache_runs_unpadded(fast_pair, prompt):
    """Padding a verify pass to a cheaper width needs room past the sequence: at the static cache's end
    there is none, and the pass runs at its own width instead of failing."""
    target, draft = fast_pair
    path = fast_path_of(target)
    path.set_width_costs({1: 1.0, 2: 3.0, 3: 3.0, 4: 2.0, 5: 1.5, 9: 1.0})  # everything pads to 9 wide
    max_len = path.network.max_len
    reference = generate(target, prompt, max_new_tokens=max_len - len(prompt)).tokens.tolist()
    out = speculative_generate(target, ModelDrafter(draft), prompt, k=2, max_new_tokens=max_len - len(prompt))
    assert out.tokens.tolist() == reference
