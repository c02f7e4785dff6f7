"""Heads written in vLLM's and SGLang's layouts, read back by load_drafter: the same drafts, the keys and
configs each engine reads, the layer-id trap, and clear refusals."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from speclab import speculative_generate
from speclab.methods import load_drafter
from speclab.methods.eagle import Eagle3Head, EagleHead, draft_vocabulary
from speclab.methods.medusa import MedusaHeads
from speclab.methods.mtp import MtpModule
from speclab.serving import checkpoints
from tests.conftest import tiny_model

PROMPT = torch.tensor([5, 17, 42, 8, 23, 61, 7, 30, 5, 17, 42])


@pytest.fixture(scope="module")
def target():
    return tiny_model("llama", layers=8, seed=10, init=0.2)


def eagle3_head(target, draft_vocab: int | None = 64):
    torch.manual_seed(0)
    head = Eagle3Head.for_target(target, draft_vocab_size=draft_vocab)
    if draft_vocab is not None:
        rows = torch.randint(0, target.config.vocab_size, (400,))
        head.set_vocabulary(*draft_vocabulary(rows, draft_vocab, target.config.vocab_size),
                            target.get_output_embeddings())
    attn = head.midlayer.self_attn
    for layer in (head.fc, attn.q_proj, attn.k_proj, attn.v_proj):
        torch.nn.init.normal_(layer.weight, 0, 0.5 / layer.weight.shape[1] ** 0.5)
    return head.eval()


def eagle1_head(target):
    torch.manual_seed(1)
    head = EagleHead.for_target(target)
    torch.nn.init.normal_(head.fc.weight, 0, 0.5 / head.fc.weight.shape[1] ** 0.5)
    torch.nn.init.normal_(head.fc.bias, 0, 0.3)
    return head.eval()


def medusa_heads(target):
    torch.manual_seed(2)
    heads = MedusaHeads.for_target(target, num_heads=3)
    for p in heads.parameters():
        p.data.add_(0.05 * torch.randn_like(p))
    return heads.eval()


def decode(target, drafter):
    out = speculative_generate(target, drafter, PROMPT, k=3, max_new_tokens=24)
    return out.tokens.tolist(), out.stats.accepted_lengths


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("draft_vocab", [None, 64])
def test_an_eagle3_head_exported_for_an_engine_loads_back_and_drafts_the_same(target, engine, draft_vocab, tmp_path):
    head = eagle3_head(target, draft_vocab)
    checkpoints.write_head(head, target, tmp_path, engine)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["num_hidden_layers"] == 1
    assert config["draft_vocab_size"] == (draft_vocab or target.config.vocab_size)
    assert config["target_hidden_size"] == target.config.hidden_size
    keys = set(load_file(tmp_path / "model.safetensors"))
    assert {"fc.weight", "norm.weight", "lm_head.weight", "midlayer.self_attn.q_proj.weight",
            "midlayer.hidden_norm.weight"} <= keys
    assert ("d2t" in keys) == (engine == "sglang" or draft_vocab is not None)
    assert not any("embed" in k for k in keys)  # embeddings are the target's
    original = load_drafter("eagle3", target, head=head, tree="chain", depth=3)
    loaded = load_drafter("eagle3", target, head=tmp_path, tree="chain", depth=3)
    assert loaded.head.feature_layers == head.feature_layers
    for name, value in head.state_dict().items():
        assert torch.equal(loaded.head.state_dict()[name], value), name
    assert decode(target, loaded) == decode(target, original)


def test_the_engines_record_the_fused_layers_differently(target, tmp_path):
    head = eagle3_head(target)
    assert head.feature_layers == (2, 4, 5)  # inputs of layers 2, L/2, L-3 of 8
    checkpoints.write_head(head, target, tmp_path / "vllm", "vllm")
    checkpoints.write_head(head, target, tmp_path / "sglang", "sglang")
    vllm = json.loads((tmp_path / "vllm" / "config.json").read_text())
    sglang = json.loads((tmp_path / "sglang" / "config.json").read_text())
    assert vllm["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]           # read as they are
    assert sglang["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]  # SGLang adds 1
    assert "eagle_aux_hidden_state_layer_ids" not in sglang


def test_an_sglang_head_read_as_vllm_reads_it_fuses_the_wrong_layers(target, tmp_path):
    """The trap: the output stays right (verification sees to it), the drafts change."""
    head = eagle3_head(target, None)
    checkpoints.write_head(head, target, tmp_path, "sglang")
    right = load_drafter("eagle3", target, head=tmp_path, tree="chain", depth=3)
    wrong = load_drafter("eagle3", target, head=tmp_path, engine="vllm", tree="chain", depth=3)
    assert right.head.feature_layers == (2, 4, 5) and wrong.head.feature_layers == (1, 3, 4)
    assert decode(target, right)[0] == decode(target, wrong)[0]  # lossless either way
    with torch.no_grad():
        hidden = target(PROMPT[None], output_hidden_states=True).hidden_states

        def first_step_logits(drafter):  # what the head drafts after each prompt token
            head = drafter.head
            features = head.fuse(torch.cat([hidden[i][0] for i in head.feature_layers], -1))
            h = head(target.get_input_embeddings()(PROMPT[1:]), features[:-1])
            return head.logits(h, target.get_output_embeddings())
        assert (first_step_logits(right).argmax(-1) != first_step_logits(wrong).argmax(-1)).any()


def test_an_eagle1_head_for_vllm_folds_its_bias_into_its_own_embeddings(target, tmp_path):
    head = eagle1_head(target)
    checkpoints.write_head(head, target, tmp_path, "vllm")
    config = json.loads((tmp_path / "config.json").read_text())
    state = load_file(tmp_path / "model.safetensors")
    assert config["architectures"] == ["LlamaForCausalLM"]  # vLLM renames it EagleLlamaForCausalLM
    assert "fc.bias" not in state and "layers.0.input_layernorm.weight" not in state
    assert "layers.0.self_attn.q_proj.weight" in state and "lm_head.weight" not in state
    tokens, features = torch.tensor([3, 9, 27, 81 % 96]), torch.randn(4, target.config.hidden_size)
    embed = target.get_input_embeddings()
    ours = head.fc(torch.cat([embed(tokens), features], -1))
    theirs = torch.cat([state["embed_tokens.weight"][tokens], features], -1) @ state["fc.weight"].T  # no bias
    torch.testing.assert_close(theirs, ours, atol=1e-4, rtol=1e-4)
    loaded = load_drafter("eagle", target, head=tmp_path, tree="chain", depth=3)  # drafts in half here
    torch.testing.assert_close(loaded.head.fc.bias.float(), head.fc.bias, atol=1e-3, rtol=1e-3)
    assert decode(target, loaded)[0] == decode(target, load_drafter("eagle", target, head=head, tree="chain",
                                                                   depth=3))[0]


def test_an_eagle1_head_for_sglang_keeps_its_bias_and_sglangs_name(target, tmp_path):
    head = eagle1_head(target)
    checkpoints.write_head(head, target, tmp_path, "sglang")
    config = json.loads((tmp_path / "config.json").read_text())
    state = load_file(tmp_path / "model.safetensors")
    assert config["architectures"] == ["LlamaForCausalLMEagle"]
    assert torch.equal(state["fc.bias"], head.fc.bias) and "embed_tokens.weight" not in state
    loaded = load_drafter("eagle", target, head=tmp_path, tree="chain", depth=3)
    for name, value in head.state_dict().items():  # every weight, in the precision the head drafts in
        assert torch.equal(loaded.head.state_dict()[name], value.to(loaded.head.dtype)), name


def test_medusa_heads_for_vllm_keep_their_biases(target, tmp_path):
    heads = medusa_heads(target)
    checkpoints.write_head(heads, target, tmp_path, "vllm")
    config = json.loads((tmp_path / "config.json").read_text())
    state = load_file(tmp_path / "model.safetensors")
    assert config["model_type"] == "medusa" and config["num_heads"] == 3 and config["medusa_fc_bias"] is True
    assert set(state) == {f"{kind}.{h}{rest}" for h in range(3) for kind, rest in
                          (("blocks", ".layers.0.weight"), ("blocks", ".layers.0.bias"), ("lm_heads", ".weight"))}
    loaded = load_drafter("medusa", target, heads=tmp_path, tree="chain")
    h = torch.randn(2, target.config.hidden_size)
    torch.testing.assert_close(loaded.heads(h).float(), heads(h), atol=2e-2, rtol=2e-2)  # heads run in half here
    with pytest.raises(ValueError, match="SGLang serves no Medusa"):
        checkpoints.write_head(heads, target, tmp_path / "s", "sglang")


def test_a_renamed_key_is_refused_not_loaded_as_random_weights(target, tmp_path):
    checkpoints.write_head(eagle3_head(target), target, tmp_path, "vllm")
    state = load_file(tmp_path / "model.safetensors")
    state["fc.weights"] = state.pop("fc.weight")
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match=r"missing \['fc.weight'\].*unexpected \['fc.weights'\]"):
        load_drafter("eagle3", target, head=tmp_path)


def test_heads_for_another_target_or_method_are_refused(target, tmp_path):
    checkpoints.write_head(eagle3_head(target), target, tmp_path, "vllm")
    with pytest.raises(ValueError, match="hidden size"):
        load_drafter("eagle3", tiny_model("llama", layers=8, hidden=48), head=tmp_path)
    with pytest.raises(ValueError, match="holds a eagle3 head"):
        load_drafter("eagle", target, head=tmp_path)
    with pytest.raises(ValueError, match="engine= says how to read"):
        load_drafter("eagle3", target, head=eagle3_head(target), engine="vllm")
    with pytest.raises(ValueError, match="engine must be one of"):
        checkpoints.write_head(eagle3_head(target), target, tmp_path / "x", "tensorrt")
    with pytest.raises(ValueError, match="inside the target's checkpoint"):
        checkpoints.write_head(MtpModule.for_target(target), target, tmp_path / "m", "vllm")
    config = json.loads((tmp_path / "config.json").read_text())
    config["eagle_aux_hidden_state_layer_ids"] = [2, 4, 9]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"fuses target layers \[2, 4, 9\]"):
        load_drafter("eagle3", target, head=tmp_path)
