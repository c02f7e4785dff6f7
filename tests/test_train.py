"""The training command: a micro pair trains for a few steps and loads back like a hub model."""
import json

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import speclab
from speclab import corpus
from speclab.train import main as train_main


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
