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


def test_speclab_drafts_as_vllm_does_for_each_method_vllm_loads(monkeypatch):
    """Method.vllm_drafts: a head drafts a chain, prompt lookup takes the export's n-gram sizes, each with the
    exported weights under the method's own option."""
    loaded = {}
    monkeypatch.setattr(vllm_engine, "load_drafter", lambda name, target, **options: loaded.setdefault(name, options))
    assert set(vllm_engine.METHODS) == {"ngram", "draft_model", "eagle", "eagle3", "medusa"}
    for name in vllm_engine.METHODS:
        weights = None if name == "ngram" else f"/exports/{name}"
        settings = {"method": name, "prompt_lookup_max": 4, "prompt_lookup_min": 2} if name == "ngram" else {}
        vllm_engine.speclab_drafter(name, {"weights": weights, "settings": settings}, target=None)
    assert loaded == {"ngram": {"max_ngram": 4, "min_ngram": 2}, "draft_model": {"draft": "/exports/draft_model"},
                      "eagle": {"tree": "chain", "head": "/exports/eagle"},
                      "eagle3": {"tree": "chain", "head": "/exports/eagle3"},
                      "medusa": {"tree": "chain", "heads": "/exports/medusa"}}


def test_the_load_test_serves_its_methods_from_the_registry(monkeypatch, tmp_path):
    """Method.load_test: speculation off, prompt lookup, the EAGLE-3 head, and the head with K 0 above a batch
    size; only a method with weights is exported."""
    from speclab.serving import load_test
    from speclab.serving.settings import engine_settings
    assert load_test.CONFIGS == ("off", "ngram", "eagle3", "eagle3-fallback")
    exported = []
    monkeypatch.setattr(load_test, "exported", lambda name, exports, k: exported.append(name) or {"weights": "/h"})
    configs = {name: load_test.speculative_config(name, tmp_path, 3, 4) for name in load_test.CONFIGS}
    assert exported == ["eagle3", "eagle3"]
    assert configs == {"off": None, "ngram": engine_settings("ngram", "vllm", k=3).settings,
                       "eagle3": engine_settings("eagle3", "vllm", k=3, path="/h").settings,
                       "eagle3-fallback": engine_settings("eagle3", "vllm", k=3, path="/h",
                                                          k_by_batch=((1, 4, 3), (5, 1024, 0))).settings}


def test_an_eagle1_export_for_an_old_vllm_is_refused_before_anything_loads(monkeypatch, tmp_path):
    """Method.export_check: EAGLE-1's vLLM export folds fc's bias into embeddings an old vLLM replaces."""
    from speclab.methods import checkpoints
    from speclab.serving.export import export
    monkeypatch.setattr(checkpoints, "installed_vllm", lambda: "0.11.0")
    monkeypatch.setattr("speclab.serving.export.load_pair", lambda *a, **k: pytest.fail("loaded the pair"))
    with pytest.raises(ValueError, match="drops the fc bias"):
        export("eagle", "vllm", tmp_path)


vllm_installed = importlib.util.find_spec("vllm") is not None


@pytest.mark.skipif(not vllm_installed, reason="vLLM lives in the serving environment (requirements-serving.txt)")
def test_chapter_12s_short_run_of_eagle3_agrees_in_both_engines(tmp_path):
    """Chapter 12.3's live run (where SPECLAB_REQUIRE_SERVING=1 is set), made here: the exported EAGLE-3 head in
    vLLM drafts as in speclab. Loading is not the check (a wrong key loads and drafts badly): the acceptance is,
    within 5%, and every output equals speclab's target-only."""
    record = vllm_engine.main([*vllm_engine.short_run("eagle3"), "--exports", str(tmp_path)])
    assert record["prompts"] == 2 and record["max_new_tokens"] == 48 and record["k"] == 3
    vllm_engine.check_agreement(record, "eagle3")


@pytest.mark.skipif(not vllm_installed, reason="vLLM lives in the serving environment (requirements-serving.txt)")
@pytest.mark.parametrize("name", ["eagle"])
def test_an_exported_head_drafts_in_vllm_as_it_does_in_speclab(name, tmp_path):
    """Loading is not the check (a wrong key loads and drafts badly): the acceptance is, within 5%. (EAGLE-3's
    head: the test above, chapter 12.3's run.)"""
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
