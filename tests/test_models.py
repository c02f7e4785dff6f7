"""Loading pairs: local save_pretrained directories (the hub path, offline), tokenizer checks."""
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

import speclab
from speclab.models import HUB_PAIRS, check_same_tokenizer, load_model, load_pair
from tests.conftest import tiny_model


def word_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    vocab = {w: i for i, w in enumerate(["<eos>"] + words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<eos>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>")


WORDS = [f"w{i}" for i in range(60)]


@pytest.fixture(scope="module")
def saved_pair(tmp_path_factory):
    """A target and a draft written with save_pretrained, as a learner would download them."""
    root = tmp_path_factory.mktemp("pair")
    tok = word_tokenizer(WORDS)
    for name, layers, seed in [("target", 2, 0), ("draft", 1, 1)]:
        model = tiny_model("llama", layers=layers, seed=seed, vocab=64)
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
    return root


def test_load_pair_from_local_directories_and_generate(saved_pair):
    target, draft, tok, device = load_pair(str(saved_pair / "target"), draft=saved_pair / "draft", device="cpu")
    assert device.type == "cpu" and target.dtype == torch.float32 and not target.training
    assert draft.dtype == torch.float16  # a CPU draft defaults to half precision: acceptance changes, output cannot
    ids = tok("w1 w2 w3 w4", return_tensors="pt").input_ids[0]
    ref = speclab.generate(target, ids, max_new_tokens=12)
    out = speclab.speculative_generate(target, draft, ids, k=3, max_new_tokens=12)
    assert out.tokens.tolist() == ref.tokens.tolist()
    sampled = [speclab.speculative_generate(target, draft, ids, k=3, max_new_tokens=12, temperature=1.0, seed=s)
               for s in range(3)]
    assert all(len(r.tokens) == 12 for r in sampled)


def test_dtype_sets_both_models_and_draft_dtype_the_draft(saved_pair):
    both = load_pair(str(saved_pair / "target"), draft=saved_pair / "draft", device="cpu", dtype=torch.float32)
    assert both.target.dtype == both.draft.dtype == torch.float32
    own = load_pair(str(saved_pair / "target"), draft=saved_pair / "draft", device="cpu", draft_dtype=torch.bfloat16)
    assert own.target.dtype == torch.float32 and own.draft.dtype == torch.bfloat16


def test_mismatched_tokenizers_are_refused_naming_the_pieces(saved_pair, tmp_path):
    other = word_tokenizer(WORDS[:10] + ["zz"] + WORDS[11:])  # id 11 differs
    tiny_model("llama", layers=1, vocab=64).save_pretrained(tmp_path / "draft")
    other.save_pretrained(tmp_path / "draft")
    with pytest.raises(ValueError, match=r"id 11: target 'w10' vs draft 'zz'"):
        load_pair(str(saved_pair / "target"), draft=tmp_path / "draft")
    with pytest.raises(ValueError, match="share one tokenizer|tokenizers differ"):
        check_same_tokenizer(word_tokenizer(WORDS), word_tokenizer(WORDS[:30]))
    check_same_tokenizer(word_tokenizer(WORDS), word_tokenizer(WORDS))  # the same: no error


def test_model_narrower_than_its_tokenizer_is_refused(saved_pair, tmp_path):
    big_tok = word_tokenizer(WORDS + [f"x{i}" for i in range(40)])  # 101 pieces > 64 rows
    for name in ("target", "draft"):
        tiny_model("llama", layers=1, vocab=64).save_pretrained(tmp_path / name)
        big_tok.save_pretrained(tmp_path / name)
    with pytest.raises(ValueError, match="output rows"):
        load_pair(str(tmp_path / "target"), draft=tmp_path / "draft")


def test_unreachable_hub_model_fails_with_a_clear_message(monkeypatch):
    import huggingface_hub.constants
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # the hub library reads the variable when it is imported; without this the test waits out ~20 s of retries
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(OSError, match="save_pretrained|not a local"):
        load_model("no-such-org/no-such-model-speclab", device="cpu")


def test_a_pair_name_given_as_a_model_directory_says_how_to_load_it():
    # before the hub is asked: no retries, and the message names load_pair, not the network
    for load in (load_model, speclab.models.load_tokenizer):
        with pytest.raises(ValueError, match=r"load_pair\('smollm2'\)"):
            load("smollm2")


def test_unknown_pair_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="qwen2.5-1.5b"):
        load_pair("no-such-pair")


def test_hub_pairs_share_a_family_and_say_whether_they_fit_a_t4():
    for name, pair in HUB_PAIRS.items():
        assert pair.target.split("/")[0] == pair.draft.split("/")[0], name
        assert pair.weights_gb == pytest.approx(2 * (pair.target_params_b + pair.draft_params_b))
    assert HUB_PAIRS["qwen2.5-1.5b"].fits_t4 and not HUB_PAIRS["qwen2.5-7b"].fits_t4


def test_tiny_model_builds_each_kind_offline_and_refuses_an_unknown_one():
    import pytest

    from speclab.models import tiny_model
    for arch in ("llama", "qwen2", "qwen3", "mistral"):
        m = tiny_model(arch, layers=1, vocab=40, head_dim=16)
        assert m.config.num_hidden_layers == 1 and m.get_output_embeddings().weight.shape[0] == 40
    assert tiny_model("qwen3").config.head_dim == 8  # hidden 32 / 4 heads, not Qwen3's default 128
    with pytest.raises(ValueError, match="unknown architecture"):
        tiny_model("gpt2")
