"""Layer-skip self-drafting (speclab.methods.layer_skip): the early-exit draft is the target cut short, decodes
exactly, trains its exit adapters, and refuses exit layers it cannot have."""
import pytest
import torch

from speclab import generate, speculative_generate
from speclab.methods import load_drafter
from speclab.methods.layer_skip import ExitAdapter, early_exit_model, load_adapter, save_adapters
from speclab.train.data import target_features
from speclab.train.eagle import soft_cross_entropy
from speclab.train.exit import exit_agreement, exit_logits
from tests.conftest import tiny_model

PROMPT = torch.tensor([5, 17, 42, 8, 23, 61, 7, 30, 5, 17, 42, 9])


@torch.no_grad()
def test_the_early_exit_model_is_the_target_cut_short_and_shares_its_weights():
    target = tiny_model("llama", layers=4, seed=0)
    view = early_exit_model(target, 2)
    hidden = target(PROMPT.view(1, -1), output_hidden_states=True).hidden_states[2]
    expected = target.lm_head(target.model.norm(hidden))
    assert torch.allclose(view(PROMPT.view(1, -1)).logits, expected, atol=1e-5)
    assert view.model.layers[0].self_attn.q_proj.weight is target.model.layers[0].self_attn.q_proj.weight
    assert view.config.num_hidden_layers == 2 and target.config.num_hidden_layers == 4
    assert sum(p.numel() for p in view.parameters()) < sum(p.numel() for p in target.parameters())


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_greedy_layer_skip_equals_target_only_for_every_exit_layer(arch):
    target = tiny_model(arch, layers=4, seed=0)
    reference = generate(target, PROMPT, max_new_tokens=24).tokens.tolist()
    for exit_layer in (1, 2, 3):
        for adapter in (None, random_adapter(target)):
            drafter = load_drafter("layer_skip", target, exit_layer=exit_layer, adapter=adapter or False)
            for k in (1, 4):
                out = speculative_generate(target, drafter, PROMPT, k=k, max_new_tokens=24)
                assert out.tokens.tolist() == reference, (exit_layer, adapter is not None, k)


def random_adapter(target, seed=0):
    torch.manual_seed(seed)
    adapter = ExitAdapter(target.config.hidden_size)
    torch.nn.init.normal_(adapter.linear.weight, 0, 0.1)
    return adapter.eval()


@torch.no_grad()
def test_training_measures_the_exit_the_drafter_runs():
    """exit_logits (what train exit fits and exit_agreement scores) on hidden_states[E] gives the logits
    of the early-exit model the drafter runs, with and without an adapter: training and drafting read
    the same layer, not one off."""
    target = tiny_model("llama", layers=4, seed=0)
    rows = torch.randint(0, 96, (2, 16), generator=torch.Generator().manual_seed(0))
    adapter = random_adapter(target)
    hidden = target(rows, output_hidden_states=True).hidden_states  # float32 (target_features stores float16)
    for exit_layer in (1, 3):
        h = hidden[exit_layer]
        for a in (None, adapter):
            drafted = early_exit_model(target, exit_layer, a)(rows).logits
            assert torch.allclose(exit_logits(target, h, a), drafted, atol=1e-4)
    final, h = hidden[-1], hidden[3]
    agree = (early_exit_model(target, 3)(rows).logits.argmax(-1) == target(rows).logits.argmax(-1)).float().mean()
    assert exit_agreement(target, h, final) == pytest.approx(float(agree), abs=1e-4)


def test_an_exit_adapter_learns_to_agree_with_the_final_layer():
    target = tiny_model("llama", layers=4, seed=0).requires_grad_(False)
    rows = torch.randint(0, 96, (8, 24), generator=torch.Generator().manual_seed(0))
    h = target_features(target, rows, torch.device("cpu"), layers=(1,)).float()
    teacher = target.lm_head(target_features(target, rows, torch.device("cpu")).float())
    adapter = ExitAdapter(target.config.hidden_size)
    assert torch.allclose(exit_logits(target, h, adapter), exit_logits(target, h))  # the identity at the start
    opt = torch.optim.AdamW(adapter.parameters(), lr=3e-3)
    losses = []
    for _ in range(40):
        loss = soft_cross_entropy(exit_logits(target, h, adapter), teacher)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.9 * losses[0]
    final = target_features(target, rows, torch.device("cpu")).float()
    assert exit_agreement(target, h, final, adapter) > exit_agreement(target, h, final)


def test_bad_exit_layers_and_foreign_adapters_are_refused(tmp_path):
    target = tiny_model("llama", layers=4, seed=0)
    for bad in (0, 4, -1, 2.5, "2"):
        with pytest.raises(ValueError, match="exit_layer must be an integer from 1 to 3"):
            load_drafter("layer_skip", target, exit_layer=bad)
    with pytest.raises(ValueError, match="needs exit_layer"):
        load_drafter("layer_skip", target)
    save_adapters({2: random_adapter(target)}, target, tmp_path / "exit")
    assert isinstance(load_adapter(tmp_path / "exit", target, 2), ExitAdapter)
    with pytest.raises(ValueError, match="for layers \\[2\\], not 3"):
        load_drafter("layer_skip", target, exit_layer=3, adapter=tmp_path / "exit")
    other = tiny_model("llama", layers=4, seed=5)
    with pytest.raises(ValueError, match="trained for another target"):
        load_drafter("layer_skip", other, exit_layer=2, adapter=tmp_path / "exit")
    with pytest.raises(FileNotFoundError, match="train exit"):
        load_drafter("layer_skip", target, exit_layer=2, adapter=tmp_path)


def test_train_exit_micro_writes_adapters_that_load(tmp_path):
    from speclab.models import BUNDLED_DIR, load_model
    from speclab.train import train_exit
    report = train_exit(BUNDLED_DIR / "target", tmp_path, [3, 12], preset="micro")
    assert set(report["layers"]) == {"3", "12"}
    assert all(0 <= entry["top1_adapter"] <= 1 for entry in report["layers"].values())
    target = load_model(BUNDLED_DIR / "target", "cpu", torch.float32)
    drafter = load_drafter("layer_skip", target, exit_layer=12, adapter=tmp_path / "exit")
    assert drafter.name == "layer_skip E=12+adapter"
    again = train_exit(BUNDLED_DIR / "target", tmp_path, [3, 12], preset="micro")  # resumes: nothing retrained
    assert again["layers"] == report["layers"]


def test_the_shipped_adapters_decode_the_bundled_target_exactly():
    from speclab.models import load_pair
    pair = load_pair(device="cpu")
    ids = pair.tokenizer("def parse(text):\n    ", return_tensors="pt").input_ids[0]
    reference = generate(pair.target, ids, max_new_tokens=24).tokens.tolist()
    for exit_layer, adapter in ((6, False), (12, True)):
        drafter = load_drafter("layer_skip", pair.target, exit_layer=exit_layer, adapter=adapter)
        assert speculative_generate(pair.target, drafter, ids, k=4, max_new_tokens=24).tokens.tolist() == reference


@pytest.mark.parametrize("mode", ["static"])  # compiled: the same code under torch.compile (the bench's rows)
def test_the_view_follows_the_target_onto_its_fast_path_with_its_adapter(mode):
    """On the target's fast path the view (its first E layers, the exit adapter before the final norm)
    runs on a fast path of the same mode, built once: the same drafts round by round as eagerly, the
    target-only tokens; back on the eager path when the target is. ("compiled" passes too, in about 30 s
    of compiling: left out of CI's budget.)"""
    from speclab.methods.layer_skip import LayerSkipDrafter
    from speclab.runner import StaticRunner, disable_fast_path, enable_fast_path
    target = tiny_model("llama", layers=4, seed=0)
    torch.manual_seed(1)
    adapter = ExitAdapter(target.config.hidden_size)
    torch.nn.init.normal_(adapter.linear.weight, 0, 0.05)
    drafter = LayerSkipDrafter(target, 2, adapter)
    reference = generate(target, PROMPT, max_new_tokens=20).tokens.tolist()
    eager = speculative_generate(target, drafter, PROMPT, k=3, max_new_tokens=20)
    enable_fast_path(target, mode, max_len=64)
    try:
        fast = speculative_generate(target, drafter, PROMPT, k=3, max_new_tokens=20)
        assert isinstance(drafter.runner, StaticRunner) and [shape[0] for shape in drafter.view_paths] == [mode]
    finally:
        disable_fast_path(target)
    assert fast.tokens.tolist() == eager.tokens.tolist() == reference
    assert [r.drafted for r in fast.trace] == [r.drafted for r in eager.trace]
    assert sum(r.accepted for r in fast.trace) > 0
    drafter.start(PROMPT)
    assert not isinstance(drafter.runner, StaticRunner)
