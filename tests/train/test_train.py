"""The training command: a micro pair trains for a few steps and loads back like a hub model."""
import json

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import speclab
from speclab import corpus
from speclab.cli.train import main as train_main
from speclab.methods import shipped
from speclab.artifacts import fingerprint


def test_micro_pair_trains_resumes_and_loads_with_from_pretrained(tmp_path):
    out = tmp_path / "micro"
    train_main(["pair", "--out", str(out), "--preset", "micro", "--device", "cpu", "--target-steps", "3", "--draft-steps", "2"])
    report = json.loads((out / "training.json").read_text())
    assert report["target"]["steps"] == 3 and report["draft"]["evals"]
    target = AutoModelForCausalLM.from_pretrained(out / "target")
    tok = AutoTokenizer.from_pretrained(out / "target")
    assert target.config.num_hidden_layers == 2 and len(tok) == 512
    # resuming with more steps continues from the checkpoint instead of starting over
    train_main(["pair", "--out", str(out), "--preset", "micro", "--device", "cpu", "--target-steps", "5", "--draft-steps", "2"])
    report = json.loads((out / "training.json").read_text())
    assert [e["step"] for e in report["target"]["evals"]][-1] == 5
    pair = speclab.load_pair(str(out / "target"), draft=out / "draft", device="cpu")
    ids = pair.tokenizer("def f(x):\n", return_tensors="pt").input_ids[0]
    assert speclab.speculative_generate(pair.target, pair.draft, ids, k=3, max_new_tokens=8).tokens.tolist() == \
        speclab.generate(pair.target, ids, max_new_tokens=8).tokens.tolist()


def test_split_is_by_file_and_stable():
    files = corpus.stdlib_files()
    held = [f for f in files if corpus.is_heldout(f)]
    assert 0.02 < len(held) / len(files) < 0.09
    assert held == [f for f in corpus.stdlib_files() if corpus.is_heldout(f)]


def test_heldout_prompts_are_from_heldout_files():
    code = corpus.heldout_prompts("code", 3)
    prose = corpus.heldout_prompts("prose", 3)
    assert len(code) == 3 and len(prose) == 3 and all(len(p) > 50 for p in code + prose)
    _, heldout = corpus.split_texts()
    joined = "\n".join(heldout)
    assert all(p in joined for p in code)
    assert torch.is_tensor(torch.tensor([1]))


def test_draft_command_trains_a_draft_for_an_existing_target_and_install_keeps_the_target_record(tmp_path):
    from speclab.train import install_pair
    pair_out, draft_out, package = tmp_path / "pair", tmp_path / "draft", tmp_path / "package"
    train_main(["pair", "--out", str(pair_out), "--preset", "micro", "--device", "cpu", "--no-plain-draft"])
    generated = torch.load(pair_out / "generated.pt")
    assert generated.shape == (8, 33)  # preset micro: 8 continuations of seq_len + 1 tokens
    package.mkdir()
    install_pair(pair_out, package)
    train_main(["draft", "--target", str(pair_out / "target"), "--out", str(draft_out), "--preset", "micro",
                "--device", "cpu", "--draft-steps", "3"])
    report = json.loads((draft_out / "training.json").read_text())
    assert report["target_from"] == str(pair_out / "target") and report["draft"]["steps"] == 3
    assert (draft_out / "draft-plain" / "config.json").exists()
    # the draft records its target, so load_drafter("draft_model", target) finds it once installed
    trained_for = shipped.recorded_fingerprint(draft_out / "draft")
    target = speclab.load_pair(str(pair_out / "target"), draft=draft_out / "draft").target
    assert trained_for["layers"] == 2 and shipped.fits(trained_for, fingerprint(target))
    install_pair(draft_out, package)
    merged = json.loads((package / "training.json").read_text())
    assert merged["target"]["steps"] == 6 and merged["draft"]["steps"] == 3 and merged["target_from"]
    pair = speclab.load_pair(str(package / "target"), draft=package / "draft", device="cpu")
    ids = pair.tokenizer("import sys\n", return_tensors="pt").input_ids[0]
    assert speclab.speculative_generate(pair.target, pair.draft, ids, k=2, max_new_tokens=6).tokens.tolist() == \
        speclab.generate(pair.target, ids, max_new_tokens=6).tokens.tolist()


def test_draft_from_target_copies_the_first_layers_of_other_architectures():
    from speclab.train.pair import draft_from_target
    from tests.conftest import tiny_model
    target = tiny_model("qwen3", layers=3)
    draft = draft_from_target(target, 1)
    assert type(draft) is type(target) and draft.config.num_hidden_layers == 1
    assert torch.equal(draft.model.layers[0].self_attn.q_proj.weight, target.model.layers[0].self_attn.q_proj.weight)
    assert torch.equal(draft.lm_head.weight, target.lm_head.weight)
    import pytest
    with pytest.raises(ValueError, match="fewer layers"):
        draft_from_target(target, 3)
