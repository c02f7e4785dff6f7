"""speclab.methods.layer_step: the decoder layer written out computes what the model's forward computes."""
import pytest
import torch

from speclab.methods.eagle import EagleHead
from speclab.methods.layer_step import LayerStep
from speclab.models import tiny_model

ARCHS = ["llama", "qwen2", "qwen3", "mistral"]


def head_and_caches(arch, version=1, prefix_rows=7):
    target = tiny_model(arch, layers=4, seed=0)
    head = EagleHead.for_target(target, version).eval()
    torch.manual_seed(0)
    prefix = torch.randn(prefix_rows, head.fc.out_features)
    fast, slow = head.new_cache(), head.new_cache()
    with torch.no_grad():
        for cache in (fast, slow):
            head.model(inputs_embeds=prefix[None], past_key_values=cache, use_cache=True)
    return head, fast, slow


def slow_forward(head, x, cache, positions=None, visible=None):
    """The model's own forward (what the head ran before LayerStep), with a float mask."""
    extra = {}
    if positions is not None:
        extra["position_ids"] = positions[None]
    if visible is not None:
        mask = torch.zeros(visible.shape).masked_fill_(~visible, torch.finfo(torch.float32).min)
        extra["attention_mask"] = mask[None, None]
    return head.model(inputs_embeds=x[None], past_key_values=cache, use_cache=True, **extra).last_hidden_state[0]


def same_cache(a, b):
    return a.get_seq_length() == b.get_seq_length() and torch.allclose(a.layers[0].keys, b.layers[0].keys, atol=1e-5) \
        and torch.allclose(a.layers[0].values, b.layers[0].values, atol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("version", [1, 3])
def test_one_row_and_causal_rows_match_the_models_forward(arch, version):
    head, fast, slow = head_and_caches(arch, version)
    assert head.layer_step is not None
    step = head.layer_step
    with torch.no_grad():
        for n in (1, 4):  # a chain step, then a catch-up on several accepted rows
            x = torch.randn(n, head.fc.out_features)
            start = fast.get_seq_length()
            ours = step(x, fast, torch.arange(start, start + n))
            ref = slow_forward(head, x, slow)
            assert torch.allclose(ours, ref, atol=1e-5), (arch, n, (ours - ref).abs().max())
            assert same_cache(fast, slow)


@pytest.mark.parametrize("arch", ARCHS)
def test_tree_rows_with_a_mask_and_positions_match_the_models_forward(arch):
    """Three frontier nodes of a tree level: each sees the prefix, one earlier drafted row (its
    ancestor) and itself, at a position that is not its row."""
    head, fast, slow = head_and_caches(arch, prefix_rows=6)
    with torch.no_grad():  # two drafted rows first, a level of one node each
        for _ in range(2):
            x = torch.randn(1, head.fc.out_features)
            head.layer_step(x, fast, torch.tensor([fast.get_seq_length()]))
            slow_forward(head, x, slow)
        visible = torch.zeros(3, 11, dtype=torch.bool)
        visible[:, :6] = True
        visible[0, 6], visible[1, 6], visible[2, 7] = True, True, True
        visible[[0, 1, 2], [8, 9, 10]] = True
        positions = torch.tensor([7, 7, 8])
        x = torch.randn(3, head.fc.out_features)
        ours = head.layer_step(x, fast, positions, visible)
        ref = slow_forward(head, x, slow, positions, visible)
    assert torch.allclose(ours, ref, atol=1e-5) and same_cache(fast, slow)


def test_the_head_uses_the_step_when_drafting_and_the_model_otherwise():
    """The head's forward with a cache and 2-D rows goes through LayerStep; a batched training pass
    does not; both give the same numbers."""
    head, fast, slow = head_and_caches("llama")
    embeds, features = torch.randn(2, head.fc.out_features), torch.randn(2, head.fc.out_features)
    calls = []
    real = head.layer_step.__call__
    head.__dict__["_layer_step"] = type("Spy", (), {"__call__": lambda self, *a: calls.append(1) or real(*a)})()
    with torch.no_grad():
        ours = head(embeds, features, fast)
        ref = head(embeds[None], features[None], slow)[0]
    assert calls == [1] and torch.allclose(ours, ref, atol=1e-5)


def test_a_layer_it_does_not_cover_is_refused_and_the_head_falls_back():
    target = tiny_model("qwen2", layers=2, seed=0)
    target.config.use_sliding_window, target.config.sliding_window = True, 4
    target.config.layer_types = ["sliding_attention"] * 2
    head = EagleHead.for_target(target, 1).eval()
    assert head.layer_step is None  # a sliding window: the model's forward, which applies it
    with pytest.raises(ValueError, match="call the model's forward"):
        LayerStep(head.model.layers[0], head.model.rotary_emb)
    cache = head.new_cache()
    with torch.no_grad():
        out = head(torch.randn(3, 32), torch.randn(3, 32), cache)
    assert out.shape == (3, 32) and cache.get_seq_length() == 3


def test_a_weight_changed_in_place_is_used_at_the_next_step():
    """The stacked q/k/v and gate/up weights follow the layer's own: an optimizer step (an in-place
    update) after the step was built changes what it computes, as it changes the model's forward."""
    head, fast, slow = head_and_caches("qwen2")
    x = torch.randn(1, head.fc.out_features)
    with torch.no_grad():
        head.layer_step(x, fast, torch.tensor([7]))
        fast.crop(-1)
        layer = head.model.layers[0]
        layer.self_attn.k_proj.weight.mul_(1.5)
        layer.mlp.up_proj.weight.add_(0.1)
        ours = head.layer_step(x, fast, torch.tensor([7]))
        ref = slow_forward(head, x, slow)
    assert torch.allclose(ours, ref, atol=1e-5) and same_cache(fast, slow)


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_a_row_cache_gives_what_a_dynamic_cache_gives_through_growth_and_roll_backs(arch):
    """RowCache, the drafter's cache written by position: rows appended past its first buffer (so it
    grows), rolled back twice, then a tree level with a mask: every output and every kept row equals
    the same steps on transformers' DynamicCache."""
    from speclab.methods.layer_step import RowCache
    head, _, _ = head_and_caches(arch)
    rows, dynamic = RowCache(capacity=4), head.new_cache()
    step = head.layer_step
    with torch.no_grad():
        for n, crop in ((3, 0), (5, -2), (1, 0), (4, -6)):  # 3, 8 cut to 6, 7, then 11 cut to 5 rows
            x = torch.randn(n, head.fc.out_features)
            start = rows.get_seq_length()
            ours = step(x, rows, torch.arange(start, start + n))
            ref = step(x, dynamic, torch.arange(start, start + n))
            assert torch.allclose(ours, ref, atol=1e-5) and rows.get_seq_length() == dynamic.get_seq_length()
            if crop:
                rows.crop(crop)
                dynamic.crop(crop)
        assert rows.get_seq_length() == dynamic.get_seq_length() == 5 and rows.keys[0].shape[-2] >= 11
        visible = torch.ones(2, 7, dtype=torch.bool)
        visible[0, 6] = visible[1, 5] = False  # two siblings: each sees the prefix and itself
        x, positions = torch.randn(2, head.fc.out_features), torch.tensor([5, 5])
        ours, ref = step(x, rows, positions, visible), step(x, dynamic, positions, visible)
    assert torch.allclose(ours, ref, atol=1e-5)
    assert torch.equal(rows.keys[0][..., :7, :], dynamic.layers[0].keys)
    assert torch.equal(rows.values[0][..., :7, :], dynamic.layers[0].values)
    with pytest.raises(ValueError, match="negative count"):
        rows.crop(3)


def test_the_drafter_keeps_a_row_cache_where_the_step_runs_and_a_dynamic_cache_otherwise():
    from transformers import DynamicCache

    from speclab.methods.layer_step import RowCache
    head, _, _ = head_and_caches("llama")
    assert isinstance(head.drafting_cache(), RowCache)
    target = tiny_model("qwen2", layers=2, seed=0)
    target.config.use_sliding_window, target.config.sliding_window = True, 4
    target.config.layer_types = ["sliding_attention"] * 2
    assert isinstance(EagleHead.for_target(target, 1).drafting_cache(), DynamicCache)
