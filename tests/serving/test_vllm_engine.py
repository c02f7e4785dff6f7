"""vLLM beside speclab: acceptance counted as vLLM counts it, the serving environment found or named, and (in
the serving environment, where vLLM is installed) speclab's exported heads decoding in vLLM with the
acceptance speclab measures for them."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from speclab.methods.ngram import PromptLookupDrafter
from speclab.serving import vllm_engine
from tests.conftest import tiny_model


def test_speclab_counts_a_draft_only_where_one_was_proposed():
    target = tiny_model("llama", layers=2, seed=0)
    prompt = [5, 17, 42, 8, 23, 61, 7, 30, 5, 17, 42]
    row = vllm_engine.speclab_decode(target, PromptLookupDrafter(max_ngram=3), [prompt], k=3, max_new_tokens=24)
    plain = vllm_engine.speclab_decode(target, None, [prompt], k=3, max_new_tokens=24)
    assert row["outputs"] == plain["outputs"] and plain["drafts"] == 0 and plain["mean_acceptance_length"] is None
    assert 0 < row["drafts"] and row["draft_tokens"] <= 3 * row["drafts"]
    assert row["per_position"][0] >= row["per_position"][1] >= row["per_position"][2]
    assert sum(row["per_position"]) == row["accepted"]
    assert row["mean_acceptance_length"] == pytest.approx(1 + row["accepted"] / row["drafts"])


def test_a_missing_serving_environment_is_named_with_its_install_command(monkeypatch, tmp_path):
    monkeypatch.setenv(vllm_engine.SERVING_PYTHON, str(tmp_path / "nowhere" / "python"))
    with pytest.raises(FileNotFoundError, match="requirements-serving.txt"):
        vllm_engine.run_in_serving_env(["--methods", "ngram"])


vllm_installed = importlib.util.find_spec("vllm") is not None


@pytest.mark.skipif(not vllm_installed, reason="vLLM lives in the serving environment (requirements-serving.txt)")
@pytest.mark.parametrize("name", ["eagle3", "eagle"])
def test_an_exported_head_drafts_in_vllm_as_it_does_in_speclab(name, tmp_path):
    """Loading is not the check (a wrong key loads and drafts badly): the acceptance is, within 5%."""
    from speclab.models import BUNDLED_DIR, load_pair
    from speclab.measure.workloads import prompt_ids
    record = vllm_engine.exported(name, tmp_path, k=3)
    pair = load_pair(device="cpu", dtype=torch.float32, draft_dtype=torch.float32)
    prompts = [p.tolist() for p in prompt_ids(pair.tokenizer, "code", 2)]
    ours = vllm_engine.speclab_decode(pair.target, vllm_engine.speclab_drafter(name, record, pair.target), prompts,
                                      3, 48)
    reference = vllm_engine.speclab_decode(pair.target, None, prompts, 3, 48)["outputs"]
    theirs = vllm_engine.vllm_decode(BUNDLED_DIR / "target", prompts, record["settings"], 48)
    assert theirs["outputs"] == ours["outputs"] == reference
    assert theirs["drafts"] > 0
    assert theirs["mean_acceptance_length"] == pytest.approx(ours["mean_acceptance_length"], rel=0.05)
