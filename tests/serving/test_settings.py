"""One source for engine settings: each engine's names and counts, refusals instead of dropped settings, and
(in the serving environment, where vLLM is installed) vLLM's own config object built from them."""
from __future__ import annotations

import importlib.util
import inspect

import pytest

from speclab.methods import REGISTRY, _load_lookup_first
from speclab.methods.ngram import PromptLookupDrafter
from speclab.serving.settings import (ENGINES, Options, Unsupported, engine_settings, k_by_batch, writers,
                                      mapping_table)


def test_every_registered_method_has_its_settings_written():
    assert set(writers()) == set(REGISTRY)


def test_vllm_takes_speclabs_names_for_methods_and_its_own_for_knobs():
    ngram = engine_settings("ngram", "vllm", k=4, max_ngram=3, min_ngram=2)
    assert ngram.settings == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3,
                              "prompt_lookup_min": 2}
    assert ngram.text() == ('{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, '
                            '"prompt_lookup_min": 2}')
    eagle3 = engine_settings("eagle3", "vllm", k=3, path="/heads/e3")
    assert eagle3.settings == {"method": "eagle3", "model": "/heads/e3", "num_speculative_tokens": 3}
    with pytest.raises(Unsupported, match="chains only in 0.32"):  # the pinned vLLM has no tree setting
        engine_settings("eagle3", "vllm", k=2, tree=[(0,), (1,), (0, 0)])


def test_sglangs_verify_budget_counts_the_pending_token():
    chain = engine_settings("eagle3", "sglang", k=4, path="H")
    assert chain.settings["--speculative-num-steps"] == 4 and chain.settings["--speculative-eagle-topk"] == 1
    assert chain.settings["--speculative-num-draft-tokens"] == 5
    tree = engine_settings("eagle", "sglang", k=5, tree="dynamic", top_k=4, total_tokens=7, path="H")
    assert (tree.settings["--speculative-algorithm"], tree.settings["--speculative-eagle-topk"],
            tree.settings["--speculative-num-draft-tokens"]) == ("EAGLE", 4, 8)
    assert tree.text().startswith("--speculative-algorithm EAGLE --speculative-draft-model-path H")


def test_k_by_batch_size_in_each_engine_that_has_it():
    schedule = ((1, 4, 4), (5, 16, 2), (17, 32, 1), (33, 256, 0))
    vllm = engine_settings("draft_model", "vllm", k=4, path="D", k_by_batch=schedule).settings
    assert vllm["num_speculative_tokens_per_batch_size"] == [[1, 4, 4], [5, 16, 2], [17, 32, 1], [33, 256, 0]]
    trt = engine_settings("draft_model", "tensorrt-llm", k=4, path="D", k_by_batch=schedule).settings
    assert trt["draft_len_schedule"] == {4: 4, 16: 2, 32: 1}  # past 32: no speculation
    # off in the middle and on again: each range's last batch size keyed, the 0 written
    gap = engine_settings("draft_model", "tensorrt-llm", k=4, k_by_batch=((1, 7, 4), (8, 15, 0), (16, 64, 1)))
    assert gap.settings["draft_len_schedule"] == {7: 4, 15: 0, 64: 1}
    with pytest.raises(Unsupported, match="smallest batch size"):  # the validator's rule
        engine_settings("draft_model", "tensorrt-llm", k=4, k_by_batch=((1, 4, 2), (5, 8, 4)))
    for engine in ("sglang", "llama.cpp", "transformers"):
        with pytest.raises(Unsupported, match=engine):
            engine_settings("ngram", engine, k=4, k_by_batch=schedule)
    with pytest.raises(ValueError, match="without gaps"):
        engine_settings("ngram", "vllm", k=4, k_by_batch=((1, 4, 4), (6, 8, 2)))


def test_chapter_11s_policy_becomes_ranges_of_batch_sizes():
    assert k_by_batch({"1": 4, "2": 2, "4": 2, "8": 1, "16": 1}, 64) == ((1, 1, 4), (2, 7, 2), (8, 64, 1))
    assert k_by_batch({1: 8, 2: 4, 8: 0, 16: 1, 32: 0}, 64) == ((1, 1, 8), (2, 7, 4), (8, 15, 0), (16, 31, 1),
                                                                  (32, 64, 0))
    with pytest.raises(ValueError, match="start at batch size 1"):
        k_by_batch({2: 4}, 64)


def test_what_an_engine_cannot_express_is_refused_with_the_reason():
    cases = [("eagle", "vllm", dict(tree="dynamic", top_k=2, k=3), "no dynamic"),
             ("eagle3", "tensorrt-llm", dict(tree="dynamic", top_k=2, k=3, total_tokens=4), None),
             ("eagle", "tensorrt-llm", {}, "EAGLE-3 heads only"),
             ("medusa", "sglang", {}, "no Medusa"),
             ("medusa", "tensorrt-llm", dict(tree="dynamic", top_k=2), "static"),
             ("medusa", "vllm", dict(tree=[(0,), (1,)]), "top-1"),
             ("ngram", "transformers", dict(min_ngram=2), "no minimum"),
             ("eagle3", "transformers", {}, "no EAGLE"),
             ("layer_skip", "vllm", dict(exit_layer=4), "assistant_early_exit"),
             ("lookahead", "sglang", {}, "no lookahead"),
             ("lookahead", "tensorrt-llm", dict(lookahead=(5, 3, 2)), None),
             ("draft_model", "vllm", dict(confidence_threshold=0.5), "no confidence stop")]
    for method, engine, options, reason in cases:
        if reason is None:  # where the engine has it
            written = engine_settings(method, engine, **options).settings
            assert written.get("use_dynamic_tree") is True or written.get("max_window_size") == 5, written
            continue
        with pytest.raises(Unsupported, match=reason):
            engine_settings(method, engine, **options)


def test_tensorrt_llm_mtp_takes_k_in_max_draft_len():
    """Since TensorRT-LLM PR #12341 MTPDecodingConfig's draft length is max_draft_len, and num_nextn_predict_layers
    is read from the checkpoint (before it, the validator copied num_nextn_predict_layers into max_draft_len)."""
    for k in (1, 3):
        s = engine_settings("mtp", "tensorrt-llm", k=k).settings
        assert s == {"decoding_type": "MTP", "max_draft_len": k}


def test_a_schedule_above_k_is_refused_not_clamped():
    """vLLM takes a range's K only up to num_speculative_tokens; TensorRT-LLM's validator refuses a K above it."""
    schedule = ((1, 1, 8), (2, 64, 2))
    for engine in ("vllm", "tensorrt-llm", "speclab"):
        with pytest.raises(ValueError, match=r"more draft tokens than k = 4.*largest K \(8\)"):
            engine_settings("draft_model", engine, k=4, path="D", k_by_batch=schedule)
    ok = engine_settings("draft_model", "vllm", k=8, path="D", k_by_batch=schedule).settings
    assert ok["num_speculative_tokens"] == 8 and ok["num_speculative_tokens_per_batch_size"][0] == [1, 1, 8]


def test_llama_cpp_flags_are_one_generations_names():
    """llama-server's --spec-* flags (docs/speculative.md after the rename), none of the older names."""
    written = [engine_settings("ngram", "llama.cpp", k=5, min_ngram=3, max_ngram=3).settings,
               engine_settings("draft_model", "llama.cpp", k=5, path="D.gguf").settings,
               engine_settings("eagle3", "llama.cpp", k=2, path="E.gguf").settings]
    assert written[0] == {"--spec-type": "ngram-simple", "--spec-ngram-simple-size-n": 3,
                          "--spec-ngram-simple-size-m": 5}
    assert written[1]["--spec-draft-model"] == "D.gguf" and written[1]["--spec-draft-n-max"] == 5
    for flags in written:
        assert all(flag.startswith("--spec-") for flag in flags), flags


def test_the_block_rule_is_written_where_an_engine_has_it():
    vllm = engine_settings("eagle3", "vllm", k=3, path="H", acceptance="block").settings
    assert vllm["rejection_sample_method"] == "block"
    assert vllm["draft_sample_method"] == "probabilistic"  # greedy drafts are one-hot: nothing for block to gain
    assert engine_settings("draft_model", "speclab", k=3, acceptance="block").settings["acceptance"] == "block"
    assert "rejection_sample_method" not in engine_settings("eagle3", "vllm", k=3).settings
    for method in ("ngram", "suffix"):
        with pytest.raises(Unsupported, match="no probabilities"):
            engine_settings(method, "vllm", acceptance="block")
    for engine in ("sglang", "tensorrt-llm", "llama.cpp", "transformers"):
        with pytest.raises(Unsupported, match="no block verification"):
            engine_settings("draft_model", engine, path="D", acceptance="block")
    with pytest.raises(ValueError, match="'rejection' or 'block'"):
        engine_settings("draft_model", "vllm", acceptance="typical")


def test_medusa_in_tensorrt_llm_s_engine_backend():
    chain = engine_settings("medusa", "tensorrt-llm", k=3, path="M").settings
    assert chain["decoding_type"] == "Medusa" and chain["medusa_choices"] == [[0], [0, 0], [0, 0, 0]]
    assert (chain["max_draft_len"], chain["num_medusa_heads"]) == (3, 3)
    tree = engine_settings("medusa", "tensorrt-llm", k=2, path="M", tree=[(0,), (1,), (0, 0)]).settings
    assert tree["medusa_choices"] == [[0], [1], [0, 0]] and tree["max_draft_len"] == 3


def test_transformers_defaults_are_overridden_to_speclabs():
    s = engine_settings("draft_model", "transformers", k=5, path="D").settings
    assert s == {"assistant_model": "D", "num_assistant_tokens": 5, "num_assistant_tokens_schedule": "constant",
                 "assistant_confidence_threshold": 0.0}
    assert engine_settings("layer_skip", "transformers", k=3, exit_layer=6).settings["assistant_early_exit"] == 6


def test_suffix_decoding_and_parallel_drafting_under_vllm_s_names():
    vllm = engine_settings("suffix", "vllm", k=8, suffix=(16, 100, 2.0, 0.2)).settings
    assert vllm == {"method": "suffix", "num_speculative_tokens": 8, "suffix_decoding_max_tree_depth": 16,
                    "suffix_decoding_max_cached_requests": 100, "suffix_decoding_max_spec_factor": 2.0,
                    "suffix_decoding_min_token_prob": 0.2}
    with pytest.raises(Unsupported, match="automaton"):
        engine_settings("suffix", "tensorrt-llm")
    pard = engine_settings("pard", "vllm", k=4, path="/p").settings
    assert pard == {"method": "draft_model", "model": "/p", "num_speculative_tokens": 4, "parallel_drafting": True}
    trt = engine_settings("pard", "tensorrt-llm", mask_token_id=4096).settings
    assert trt["decoding_type"] == "PARD" and trt["mask_token_id"] == 4096
    assert engine_settings("pard", "tensorrt-llm").settings["mask_token_id"] == "MASK_TOKEN_ID"  # as DIR for paths
    with pytest.raises(Unsupported, match="token by token"):
        engine_settings("pard", "sglang")


def test_bad_settings_are_errors():
    with pytest.raises(ValueError, match="unknown engine"):
        engine_settings("ngram", "tgi")
    with pytest.raises(ValueError, match="unknown method"):
        engine_settings("dflash", "vllm")
    with pytest.raises(ValueError, match="at least 1"):
        engine_settings("ngram", "vllm", k=0)
    with pytest.raises(ValueError, match="min_ngram <= max_ngram"):
        engine_settings("ngram", "vllm", min_ngram=4, max_ngram=2)
    with pytest.raises(ValueError, match="total_tokens 9"):
        engine_settings("eagle3", "sglang", tree="dynamic", k=2, top_k=4, total_tokens=9)


def test_the_mapping_table_has_every_engine_and_says_why_where_one_has_nothing():
    rows = mapping_table({"ngram": Options(k=4), "eagle3": Options(k=3, path="H"), "medusa": Options(k=3)})
    assert [r["method"] for r in rows] == ["ngram", "eagle3", "medusa"]
    assert all(set(r) == {"method", *ENGINES} for r in rows)
    assert rows[2]["sglang"].startswith("— no Medusa")
    assert rows[1]["tensorrt-llm"] == "speculative_config: {decoding_type: Eagle3, max_draft_len: 3, speculative_model: H}"
    comment, line = rows[2]["tensorrt-llm"].split("\n")
    assert comment == "# trtllm-serve --backend tensorrt only" and line.startswith("speculative_config: {decoding_type: Medusa")


def test_the_texts_paste_as_each_engine_reads_them():
    """YAML for trtllm-serve's options file, generate() keywords with the draft loaded for transformers."""
    trt = engine_settings("mtp", "tensorrt-llm", k=4, k_by_batch=((1, 4, 4), (5, 8, 2))).text()
    assert trt == "speculative_config: {decoding_type: MTP, max_draft_len: 4, draft_len_schedule: {4: 4, 8: 2}}"
    assert engine_settings("ngram", "tensorrt-llm", k=4).text().endswith("is_public_pool: false}")
    hf = engine_settings("draft_model", "transformers", k=3, path="my draft").text()
    assert hf.startswith("assistant_model=AutoModelForCausalLM.from_pretrained('my draft'), num_assistant_tokens=3")


vllm_installed = importlib.util.find_spec("vllm") is not None


@pytest.mark.skipif(not vllm_installed, reason="vLLM lives in the serving environment (requirements-serving.txt)")
def test_vllm_builds_its_own_config_from_the_settings():
    """vLLM's SpeculativeConfig is the judge of its names: an unknown key or value is an error there."""
    from vllm.config import SpeculativeConfig
    schedule = ((1, 8, 3), (9, 64, 0))
    config = SpeculativeConfig(**engine_settings("ngram", "vllm", k=3, max_ngram=4, min_ngram=2,
                                                 k_by_batch=schedule).settings)
    assert (config.method, config.num_speculative_tokens, config.prompt_lookup_max, config.prompt_lookup_min) == (
        "ngram", 3, 4, 2)
    with pytest.raises(Exception):
        SpeculativeConfig(method="ngram", num_speculative_tokens=3, prompt_lookup_maximum=4)


def test_unset_n_gram_minimum_is_each_methods_own_default():
    # what a user pastes from engine_settings runs what speclab's loader would have built
    loader_default = inspect.signature(_load_lookup_first).parameters["min_ngram"].default
    assert engine_settings("lookup_first", "speclab").settings["min_ngram"] == loader_default == 2
    assert engine_settings("ngram", "speclab").settings["min_ngram"] == PromptLookupDrafter().min_ngram == 1
    with pytest.raises(ValueError, match="min_ngram is 2 unless set"):
        engine_settings("lookup_first", "speclab", max_ngram=1)


def test_lookup_in_front_of_a_drafter_is_written_where_an_engine_has_that_precedence():
    mine = engine_settings("lookup_first", "speclab", k=2, min_ngram=2, then="eagle3", path="H")
    assert mine.settings == {"method": "lookup_first", "drafter": "eagle3", "max_ngram": 3, "min_ngram": 2,
                             "head": "H", "depth": 2, "tree": "chain"}
    llama = engine_settings("lookup_first", "llama.cpp", k=3, min_ngram=2, max_ngram=2, path="D.gguf")
    assert llama.settings["--spec-type"] == "ngram-simple,draft-simple"  # the draftless type takes precedence
    assert (llama.settings["--spec-ngram-simple-size-n"], llama.settings["--spec-draft-model"]) == (2, "D.gguf")
    with pytest.raises(Unsupported, match="one n-gram size"):
        engine_settings("lookup_first", "llama.cpp", min_ngram=2, max_ngram=3)
    with pytest.raises(Unsupported, match="use_sa_spec=True with sa_spec_threshold"):  # the nearest, named
        engine_settings("lookup_first", "tensorrt-llm", then="eagle3")
    for engine in ("vllm", "sglang", "transformers"):
        with pytest.raises(Unsupported):
            engine_settings("lookup_first", engine)
    with pytest.raises(ValueError, match="trained drafter"):
        engine_settings("lookup_first", "speclab", then="ngram")
