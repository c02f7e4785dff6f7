"""speclab.methods.layer_step: the decoder layer written out computes what the model's forward computes."""
import pytest
import torch

from speclab.methods.eagle import Eagle3Head, EagleHead
from speclab.methods.layer_step import LayerStep
from speclab.methods.mtp import MtpModule
from speclab.models import tiny_model

ARCHS = ["llama", "qwen2", "qwen3", "mistral"]


HEADS = {"eagle": EagleHead, "mtp": MtpModule}  # EAGLE-1's layer has no input norm, MTP's has one


def head_and_caches(arch, kind="eagle", prefix_rows=7):
    target = tiny_model(arch, layers=4, seed=0)
    head = HEADS[kind].for_target(target).eval()
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
@pytest.mark.parametrize("kind", list(HEADS))
def test_one_row_and_causal_rows_match_the_models_forward(arch, kind):
    head, fast, slow = head_and_caches(arch, kind)
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


def test_a_batched_pass_with_gradients_matches_the_models_forward():
    """Training's passes, a batch of rows with gradients on, run through the same LayerStep as
    drafting: the same numbers as the model's forward, and the gradients reach the layer's weights."""
    head, _, _ = head_and_caches("llama")
    x = torch.randn(3, 5, head.fc.out_features)
    ours = head.layer_step(x, head.new_cache(), torch.arange(5))
    ref = head.model(inputs_embeds=x, use_cache=False).last_hidden_state
    assert torch.allclose(ours, ref, atol=1e-5)
    ours.square().sum().backward()
    layer = head.model.layers[0]
    assert all(w.grad is not None and w.grad.abs().sum() > 0 for w in
               (layer.self_attn.q_proj.weight, layer.self_attn.v_proj.weight, layer.mlp.up_proj.weight))


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_the_eagle3_layer_computes_the_reference_formula(arch):
    """Eagle3Head's layer (the reference's LlamaDecoderLayeremb) against the formula written with
    transformers' own attention module: the attention reads [input_layernorm(embedding);
    hidden_norm(feature)], 2H wide, the residual stream is the feature."""
    target = tiny_model(arch, layers=4, seed=0)
    head = Eagle3Head.for_target(target).eval()
    torch.manual_seed(0)
    with torch.no_grad():
        for proj in (head.midlayer.self_attn.q_proj, head.midlayer.self_attn.k_proj):
            proj.weight.normal_(0, 0.3)  # the embedding's half starts at zero: make it count
        emb, feature = torch.randn(5, head.fc.out_features), torch.randn(5, head.fc.out_features)
        ours = head(emb, feature, head.new_cache())
        layer = head.midlayer
        a = torch.cat([layer.input_layernorm(emb), layer.hidden_norm(feature)], -1)[None]
        cos, sin = head.rotary_emb(a, torch.arange(5)[None])
        causal = torch.full((5, 5), torch.finfo(torch.float32).min).triu(1)[None, None]
        attn, _ = layer.self_attn(a, position_embeddings=(cos, sin), attention_mask=causal)
        h = feature[None] + attn
        ref = (h + layer.mlp(layer.post_attention_layernorm(h)))[0]
    assert torch.allclose(ours, ref, atol=1e-4, rtol=1e-5), (ours - ref).abs().max()


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


@pytest.mark.parametrize("version", [3])  # EAGLE-1's head (version 1) passes too; left out of CI's budget
def test_heads_on_the_compiled_fast_path_draft_what_they_draft_eagerly(version):
    """FastHeadStep: the head compiled beside the compiled target, on a RowCache of fixed capacity, its
    steps padded to a few widths, gives every round the drafts the eager head gives (EAGLE-2's trees:
    masks, catch-ups, rollbacks; EAGLE-3 with a draft vocabulary), and the target-only tokens."""
    from speclab import generate, speculative_generate
    from speclab.methods.eagle import EagleDrafter
    from speclab.runner import disable_fast_path, enable_fast_path
    target = tiny_model("llama", layers=2, seed=0)
    torch.manual_seed(version)
    if version == 1:
        head = EagleHead.for_target(target)
        torch.nn.init.normal_(head.fc.weight, 0, 0.5 / head.fc.weight.shape[1] ** 0.5)
    else:  # speclab's start for EAGLE-3 already drafts (the target's last layer reading the feature)
        head = Eagle3Head.for_target(target, draft_vocab_size=48)
    drafter = EagleDrafter(head.eval(), target, tree="dynamic", top_k=3, depth=4, total_tokens=10)
    prompt = torch.tensor([5, 17, 42, 8, 23, 61, 7, 30, 5, 17, 42, 9])
    reference = generate(target, prompt, max_new_tokens=24).tokens.tolist()
    eager = speculative_generate(target, drafter, prompt, k=4, max_new_tokens=24)
    enable_fast_path(target, "compiled", max_len=64)
    try:
        fast = speculative_generate(target, drafter, prompt, k=4, max_new_tokens=24)
    finally:
        disable_fast_path(target)
    assert drafter.compiled_head is not None and drafter.compiled_head.cache.length > 0  # it really ran compiled
    assert fast.tokens.tolist() == eager.tokens.tolist() == reference
    assert [r.drafted for r in fast.trace] == [r.drafted for r in eager.trace]
    assert sum(r.accepted for r in fast.trace) > 0  # drafts were accepted, not only bonus tokens
