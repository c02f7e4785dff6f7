"""The commands run: generate, bench, profile, theory, workloads (speclab.cli.<command>)."""
import json
from argparse import Namespace

import pytest
import torch

from speclab.cli.main import main
from speclab.cli.options import load as load_from_args
from speclab.devices import cpu_name
from speclab.measure import batching
from speclab.measure.bench import METHODS as BENCH_METHODS
from speclab.methods.eagle import EagleHead
from speclab.methods.medusa import MedusaHeads
from speclab.methods.mtp import MtpModule
from speclab.models import load_model
from tests.test_packaged import cached_smollm2  # noqa: F401  (a fixture: a stand-in SmolLM2 in the cache)


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    """A micro pair, trained once for this module by `python -m speclab train pair`."""
    out = tmp_path_factory.mktemp("pair") / "micro"
    main(["train", "pair", "--out", str(out), "--preset", "micro", "--device", "cpu", "--no-plain-draft"])
    return out


def test_theory_prints_breakeven_and_best_k(capsys):
    main(["theory", "--c", "0.1", "--alpha", "0.7", "--k-max", "4"])
    out = capsys.readouterr().out
    assert "breakeven" in out and "best K at a=0.7: 4" in out


def test_generate_and_bench_on_a_local_pair(micro, tmp_path, capsys):
    out = micro
    capsys.readouterr()
    main(["generate", "--pair", str(out / "target"), "--draft", str(out / "draft"), "--prompt", "import os\n",
          "--max-new-tokens", "8", "--device", "cpu", "--draft-dtype", "float32"])
    text = capsys.readouterr().out
    assert text.startswith("import os\n") and "acceptance rate" in text
    main(["bench", "--pair", str(out / "target"), "--draft", str(out / "draft"), "--prompt", "import os\n",
          "--max-new-tokens", "8", "--device", "cpu", "--json", str(tmp_path / "bench.json")])
    table = capsys.readouterr().out
    for method in ("target-only", "draft_model", "hf assisted", "hf prompt-lookup"):  # speclab's rows unprefixed
        assert f"\n{method} " in table
    assert "target torch.float32, draft torch.float16" in table  # the CPU default
    record = json.loads((tmp_path / "bench.json").read_text())
    assert record["cpu"] == cpu_name() and record["torch"] == torch.__version__  # which machine timed it
    assert (record["temperature"], record["max_new_tokens"]) == (0.0, 8)  # and how it decoded
    assert record["command"].startswith("python -m speclab bench --pair ") and "--max-new-tokens 8" in record["command"]
    main(["generate", "--pair", str(out / "target"), "--draft", str(out / "draft"),
          "--prompt", "import os\nimport sys\nimport os\n",
          "--max-new-tokens", "8", "--device", "cpu", "--method", "lookahead", "--lookahead", "3,3,2"])
    assert "speculative (lookahead)" in capsys.readouterr().out
    main(["bench", "--workload", "edit,quote",  # the bundled pair: the copying prompts need its 1024 positions
          "--num-prompts", "1", "--max-new-tokens", "6", "--device", "cpu", "--repeats", "1", "--lookahead", "2,2,1",
          "3,3,3", "--methods", "speclab target-only,speclab lookahead,speclab ngram", "--lookup-k", "6",
          "--json", str(tmp_path / "two.json")])
    table = capsys.readouterr().out
    assert "1 edit prompts" in table and "1 quote prompts" in table and "\nlookahead 3,3,3" in table
    two = json.loads((tmp_path / "two.json").read_text())
    assert [w["workload"] for w in two["workloads"]] == ["edit", "quote"] and "--workload edit,quote" in two["command"]
    with pytest.raises(SystemExit):
        main(["bench", "--workload", "poetry"])
    with pytest.raises(SystemExit):
        main(["bench", "--lookahead", "4,4"])


def test_bench_fast_runs_every_speclab_row_on_both_paths(micro, tmp_path, capsys):
    capsys.readouterr()
    main(["bench", "--pair", str(micro / "target"), "--draft", str(micro / "draft"), "--prompt", "import os\n",
          "--max-new-tokens", "8", "--device", "cpu", "--repeats", "1", "--fast",
          "--methods", "speclab target-only,speclab draft_model,speclab ngram,hf assisted",
          "--json", str(tmp_path / "fast.json")])
    out = capsys.readouterr().out
    assert "fast path (static) built in " in out and "verify pass ms by width 1:" in out and "on the fast path" in out
    record = json.loads((tmp_path / "fast.json").read_text())
    rows = {r["method"]: r for r in record["rows"]}
    assert set(rows) == {"speclab target-only", "speclab draft_model", "speclab ngram", "hf assisted",
                         "speclab target-only (fast)", "speclab draft_model (fast)", "speclab ngram (fast)"}
    assert all(rows[m]["matches_target_only"] for m in rows if m.endswith("(fast)") and "target-only" not in m)
    assert record["fast"] == "static" and "model_check" in record["fast_path"]
    assert "in the loop against alone: verify pass" in out
    for check in (record, record["fast_path"]):  # the loop's ms over the same passes timed alone beside it
        assert check["loop_over_alone"]["verify pass"] == pytest.approx(
            check["loop_ms"]["verify pass"] / check["alone_ms"]["verify pass"])
    assert rows["speclab draft_model (fast)"]["alone_ms"]["draft step"] > 0
    assert sorted(map(int, record["fast_path"]["width_ms"])) == list(range(1, 10))
    main(["generate", "--pair", str(micro / "target"), "--draft", str(micro / "draft"), "--prompt", "import os\n",
          "--max-new-tokens", "8", "--device", "cpu", "--fast"])
    assert "acceptance rate" in capsys.readouterr().out


def test_generate_takes_the_prompt_as_typed(micro, capsys):
    main(["generate", "import os\n", "--pair", str(micro / "target"), "--draft", str(micro / "draft"),
          "--max-new-tokens", "4", "--device", "cpu"])
    assert capsys.readouterr().out.startswith("import os\n")


@pytest.mark.parametrize("argv", [[], ["a", "--prompt", "b"]], ids=["none", "twice"])
def test_generate_asks_for_the_prompt_once(argv, capsys):
    with pytest.raises(SystemExit):
        main(["generate", *argv])
    assert "give the prompt once" in capsys.readouterr().err


def test_generate_refuses_a_bad_k(tmp_path):
    with pytest.raises(SystemExit):
        main(["generate", "--prompt", "x", "--k", "not-a-number"])


def test_profile_writes_a_measurement_file_named_with_the_device(micro, tmp_path, capsys, monkeypatch):
    import functools

    import speclab.cli.profile as profile
    monkeypatch.setattr(profile, "GEMV_SIZES_MB", (1, 4))  # small matrices: the sweep's sizes are not the point here
    # what is written, not how closely it is timed: three widths, and fewer steps timed and rounds of threads
    monkeypatch.setattr(profile, "POSITIONS", [1, 2, 4])
    monkeypatch.setattr(profile, "forward_ms_by_positions", functools.partial(profile.forward_ms_by_positions,
                                                                              repeats=3))
    monkeypatch.setattr(profile, "step_breakdown", functools.partial(profile.step_breakdown, steps=4))
    monkeypatch.setattr(profile, "thread_scaling", functools.partial(profile.thread_scaling, steps=4, rounds=1))
    out = micro
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # as --threads 2 would, but given back to the test worker after
    try:
        main(["profile", "--pair", str(out / "target"), "--draft", str(out / "draft"), "--device", "cpu", "--fast",
              "--json", str(tmp_path / "profile-{device}.json")])
    finally:
        torch.set_num_threads(threads)
    written = list(tmp_path.glob("profile-*cpu.json"))
    assert len(written) == 1
    record = json.loads(written[0].read_text())
    assert record["positions"][:2] == [1, 2] and len(record["target_ms"]) == len(record["positions"])
    assert record["command"].startswith("python -m speclab profile ")
    assert set(record["steps"]) == {"eager", "fast"} and record["fast_mode"] == "static"
    assert len(record["fast_target_ms"]) == len(record["positions"]) and record["floor_ms"] > 0
    assert record["gemv_gbs_by_mb"].keys() == {"1", "4"}  # JSON's keys are strings
    assert record["thread_scaling"].keys() == {"1", "2"} and record["threads"] == 2
    said = capsys.readouterr().out
    assert "bandwidth floor:" in said and "1 MB" in said and "4 MB" in said
    assert "1 thread: fast step" in said and "2 threads: fast step" in said


def test_bench_batch_sizes_sweeps_batches_and_records_the_crossover_and_the_policy(micro, tmp_path, capsys,
                                                                                   monkeypatch):
    capsys.readouterr()
    monkeypatch.setattr(batching, "MIN_PROMPTS", 8)  # a small sweep: 8 prompts timed, 8 calibrating
    main(["bench", "--pair", str(micro / "target"), "--draft", str(micro / "draft"), "--batch-sizes", "1,2",
          "--k-sweep", "1,2", "--max-new-tokens", "4", "--repeats", "1", "--device", "cpu",
          "--json", str(tmp_path / "batch.json")])
    out = capsys.readouterr().out
    assert "batch of one against one prompt alone" in out and "roofline:" in out
    record = json.loads((tmp_path / "batch.json").read_text())
    assert "--batch-sizes 1,2" in record["command"]
    assert "left out eagle chain: no eagle weights ship for this target" in out
    methods = ("draft_model", "ngram")
    assert {(r["method"], r["k"], r["batch"]) for r in record["rows"]} == {
        (m, k, b) for b in (1, 2) for m, k in [("target-only", 0)] + [(m, k) for m in methods for k in (1, 2)]}
    assert all(r["equal_rows"] == 8 for r in record["rows"])  # every batch size decodes the same 8 prompts
    assert set(record["summary"]) == set(methods) and record["cpu"] == cpu_name()
    assert set(record["summary"]["draft_model"]["policy_k"]) == {"1", "2"}  # JSON keys
    # the policy's prompts were timed in the same rotation, and each set's rows are its own
    assert record["calibration_side_by_side"] and {r["prompt_set"] for r in record["rows"]} == {"timed"}
    assert {r["prompt_set"] for r in record["calibration_rows"]} == {"calibration"}
    assert len(record["calibration_rows"]) == len(record["rows"])


def test_bench_stop_at_eos_stops_at_the_tokenizers_eos_and_says_so(micro, tmp_path, capsys):
    capsys.readouterr()
    common = ["bench", "--pair", str(micro / "target"), "--draft", str(micro / "draft"), "--prompt", "import os\n",
              "--max-new-tokens", "8", "--device", "cpu", "--repeats", "1",
              "--methods", "speclab target-only,speclab draft_model"]
    main(common + ["--stop-at-eos", "--json", str(tmp_path / "eos.json")])
    out = capsys.readouterr().out
    assert "at most 8 new tokens (stops at EOS)" in out
    record = json.loads((tmp_path / "eos.json").read_text())
    assert record["stop_at_eos"] is True
    assert all(r["new_tokens"] <= 8 and r["matches_target_only"] in (None, True) for r in record["rows"])
    with pytest.raises(SystemExit, match="--stop-at-eos times single prompts"):
        main(common + ["--stop-at-eos", "--batch-sizes", "1,2"])


def test_the_bench_help_lists_the_bench_methods(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    out = "".join(capsys.readouterr().out.split())  # as wrapped (at a space or after a hyphen), rejoined
    assert all(m.replace(" ", "") in out for m in BENCH_METHODS)


def test_generate_and_bench_run_medusa_and_eagle_with_a_heads_directory(micro, tmp_path, capsys):
    out = micro
    MedusaHeads.for_target(load_model(out / "target", "cpu", None), num_heads=2).save(tmp_path / "heads")
    EagleHead.for_target(load_model(out / "target", "cpu", None)).save(tmp_path / "eagle")
    EagleHead.for_target(load_model(out / "target", "cpu", None), version=3).save(tmp_path / "eagle3")
    MtpModule.for_target(load_model(out / "target", "cpu", None)).save(tmp_path / "mtp")
    capsys.readouterr()
    main(["generate", "--pair", str(out / "target"), "--draft", str(out / "draft"), "--prompt", "import os\n",
          "--max-new-tokens", "8", "--device", "cpu", "--method", "mtp", "--mtp", str(tmp_path / "mtp")])
    assert "speculative (mtp)" in capsys.readouterr().out
    main(["generate", "--pair", str(out / "target"), "--draft", str(out / "draft"), "--prompt", "import os\n",
          "--max-new-tokens", "8", "--device", "cpu", "--method", "layer_skip", "--exit-layer", "1",
          "--k-schedule", "heuristic", "--confidence-threshold", "0.5"])
    assert "speculative (layer_skip E=1), heuristic K, confidence stop 0.5" in capsys.readouterr().out
    main(["generate", "--pair", str(out / "target"), "--draft", str(out / "draft"), "--prompt", "import os\n",
          "--max-new-tokens", "8", "--device", "cpu", "--method", "eagle3", "--eagle3", str(tmp_path / "eagle3")])
    assert "speculative (eagle3 tree)" in capsys.readouterr().out
    main(["generate", "--pair", str(out / "target"), "--draft", str(out / "draft"),
          "--prompt", "import os\nimport os\n", "--max-new-tokens", "8", "--device", "cpu", "--method", "lookup_first",
          "--then", "eagle3", "--eagle3", str(tmp_path / "eagle3"), "--eagle-tree", "chain", "--k", "2"])
    assert "speculative (lookup_first eagle3 chain)" in capsys.readouterr().out
    main(["generate", "--pair", str(out / "target"), "--draft", str(out / "draft"), "--prompt", "import os\n",
          "--max-new-tokens", "8", "--device", "cpu", "--method", "lookup_first", "--k", "2"])
    assert "speculative (lookup_first draft_model)" in capsys.readouterr().out
    eagle = ["generate", "--pair", str(out / "target"), "--draft", str(out / "draft"), "--prompt", "import os\n",
             "--max-new-tokens", "8", "--device", "cpu", "--method", "eagle", "--eagle", str(tmp_path / "eagle")]
    main(eagle)
    printed = capsys.readouterr().out
    assert "speculative (eagle tree)" in printed and "K=6:" in printed  # the tree's own depth, not K = 4
    main(eagle + ["--k", "3"])
    assert "K=3:" in capsys.readouterr().out  # an explicit --k caps the depth
    main(eagle + ["--eagle-tree", "chain"])
    printed = capsys.readouterr().out
    assert "speculative (eagle chain)" in printed and "K=4:" in printed
    main(eagle + ["--eagle-tree", "1,5,5,0.5"])
    assert "speculative (eagle tree)" in (printed := capsys.readouterr().out) and "K=5:" in printed
    for bad in (["--eagle-tree", "1,5"], ["--eagle-tree", "tree"], ["--eagle-tree", "1,5,5", "--method", "medusa"]):
        with pytest.raises(SystemExit):
            main(eagle + bad)
    main(["generate", "--pair", str(out / "target"), "--draft", str(out / "draft"), "--prompt", "import os\n",
          "--max-new-tokens", "8", "--device", "cpu", "--method", "medusa", "--heads", str(tmp_path / "heads")])
    assert "speculative (medusa chain)" in capsys.readouterr().out  # heads without a tree.json
    main(["bench", "--pair", str(out / "target"), "--draft", str(out / "draft"), "--prompt", "import os\n",
          "--max-new-tokens", "8", "--device", "cpu", "--repeats", "1", "--heads", str(tmp_path / "heads"),
          "--eagle", str(tmp_path / "eagle"), "--eagle3", str(tmp_path / "eagle3"), "--all"])
    table = capsys.readouterr().out
    assert "\nmedusa " in table and "\nmedusa chain" in table
    assert "\neagle " in table and "\neagle chain" in table and "\neagle3 " in table and "\neagle3 chain" in table
    main(["bench", "--pair", str(out / "target"), "--draft", str(out / "draft"), "--prompt", "import os\n",
          "--max-new-tokens", "8", "--device", "cpu", "--repeats", "1", "--all"])
    table = capsys.readouterr().out
    assert "medusa" not in table and "eagle" not in table  # no heads for this target: the rows are left out
    assert "mtp" not in table and "layer_skip" not in table  # nor an MTP module, nor exit adapters
    assert "\ndraft_model adaptive-heuristic" in table and "\ndraft_model adaptive-confidence" in table


def test_workloads_shows_each_set(capsys):
    main(["workloads"])
    out = capsys.readouterr().out
    assert all(f"== {name}:" in out for name in ("code", "prose", "edit", "quote")) and "_revised(" in out
    assert all(f"== chat-{name}:" in out for name in ("conversation", "translation", "summarization", "qa", "math",
                                                      "rag", "code")) and "Assistant:" in out


@pytest.mark.usefixtures("cached_smollm2")
def test_the_smollm2_pair_runs_every_command_without_a_draft_and_says_what_needs_one(capsys):
    # a tiny stand-in in the cache (tests/test_packaged.py): the same code path as the converted SmolLM2
    main(["bench", "--pair", "smollm2", "--workload", "chat-qa", "--num-prompts", "1", "--max-new-tokens", "6",
          "--device", "cpu", "--repeats", "1", "--layer-skip", "1", "--all"])
    table = capsys.readouterr().out
    assert "1 chat-qa prompts" in table and "draft none" in table
    assert "no draft model for this pair: left out speclab draft_model" in table and "hf assisted" in table
    assert "\nngram " in table and "\nlayer_skip E=1 " in table and "\ndraft_model " not in table
    for command in (["bench", "--methods", "speclab target-only,speclab draft_model"], ["evaluate"],
                    ["generate", "--prompt", "w1 w2"], ["generate", "--prompt", "w1 w2", "--method", "lookup_first"],
                    ["bench", "--methods", "speclab target-only,speclab lookup_first draft_model"]):
        with pytest.raises(SystemExit, match="needs a draft model: the smollm2 pair has no draft yet.*train shared-draft"):
            main([*command, "--pair", "smollm2", "--device", "cpu"])
    main(["profile", "--pair", "smollm2", "--device", "cpu"])  # the target alone
    profile = capsys.readouterr().out
    assert "draft none (the pair has no draft yet)" in profile and "no cost ratio c without a draft" in profile
    rows = [line.split() for line in profile.splitlines() if line.strip()[:1].isdigit()]
    assert [int(r[0]) for r in rows] == [1, 2, 4, 8, 16, 32, 64] and all(r[2] == "-" for r in rows)
    main(["generate", "--pair", "smollm2", "--method", "ngram", "--prompt", "w1 w2 w1 w2", "--max-new-tokens", "4",
          "--device", "cpu"])
    assert "speculative (ngram)" in capsys.readouterr().out
    main(["generate", "--pair", "smollm2", "--method", "target-only", "--chat", "--prompt", "w1 w2",
          "--max-new-tokens", "4", "--device", "cpu"])
    assert capsys.readouterr().out.startswith("<user> w1 w2 <assistant>")  # the stand-in's chat template


def test_bench_takes_the_chat_group_and_refuses_an_unknown_workload_naming_the_choices():
    with pytest.raises(SystemExit, match="unknown workload 'chat-poems'; choose from .*chat-qa.*chat"):
        main(["bench", "--workload", "chat-poems"])



def test_a_shipped_set_smaller_than_num_prompts_is_timed_whole_and_said(capsys):
    from argparse import Namespace

    from speclab.cli.bench import prompt_count
    from speclab.measure.workloads import shipped_count
    args = Namespace(prompt=None, num_prompts=16)
    assert shipped_count("edit") == 8 and shipped_count("code") is None
    assert prompt_count(args, "code") == 16 and capsys.readouterr().out == ""
    assert prompt_count(args, "edit") == 8
    assert "ships 8 prompts: timing all 8" in capsys.readouterr().out
    assert prompt_count(Namespace(prompt=None, num_prompts=3), "quote") == 3


def test_evaluate_lossless_checks_each_drafter_and_its_broken_rule_and_writes_json(capsys, tmp_path):
    import json
    main(["evaluate", "--device", "cpu", "--lossless", "30", "--methods", "draft_model,medusa", "--num-prompts", "1",
          "--json", str(tmp_path / "l.json")])
    out = capsys.readouterr().out
    assert "draft_model, prompt 1: p = " in out and "(the broken rule: p = " in out and "medusa, prompt 1" in out
    record = json.loads((tmp_path / "l.json").read_text())
    assert [c["method"] for c in record["checks"]] == ["draft_model", "medusa"] and record["cpu"]
    assert all(0 <= c["p_value"] <= 1 and 0 <= c["broken_p_value"] <= 1 for c in record["checks"])
    with pytest.raises(SystemExit, match="unknown method 'eagle9'"):
        main(["evaluate", "--device", "cpu", "--lossless", "5", "--methods", "eagle9"])


def test_evaluate_lossless_runs_only_the_prompts_named(capsys, tmp_path):
    main(["evaluate", "--device", "cpu", "--lossless", "5", "--methods", "draft_model", "--prompt-numbers", "2",
          "--json", str(tmp_path / "l.json")])
    assert "draft_model, prompt 2: p = " in capsys.readouterr().out
    record = json.loads((tmp_path / "l.json").read_text())
    assert [c["prompt"] for c in record["checks"]] == [2] and "--prompt-numbers 2" in record["command"]
    with pytest.raises(SystemExit, match="prompts 1 to"):
        main(["evaluate", "--device", "cpu", "--lossless", "5", "--workload", "edit", "--prompt-numbers", "0"])


def test_dtype_sets_the_targets_precision_and_the_drafts_unless_it_is_given():
    args = Namespace(pair=None, device="cpu", dtype="bfloat16", draft_dtype="auto", draft=None, threads=None)
    target, draft, _, _ = load_from_args(args)
    assert target.dtype == torch.bfloat16 and draft.dtype == torch.bfloat16
    target, draft, _, _ = load_from_args(Namespace(**{**vars(args), "draft_dtype": "float32"}))
    assert target.dtype == torch.bfloat16 and draft.dtype == torch.float32


def test_export_writes_the_bundled_eagle3_head_for_vllm_with_its_settings(tmp_path, capsys):
    main(["export", "eagle3", "--format", "vllm", "--out", str(tmp_path / "e3"), "--k", "2"])
    record = json.loads((tmp_path / "e3" / "serving.json").read_text())
    assert record["settings"] == {"method": "eagle3", "model": str((tmp_path / "e3").resolve()),
                                  "num_speculative_tokens": 2}
    assert record["target"].endswith("pairs/stdlib/target") and (tmp_path / "e3" / "model.safetensors").exists()
    main(["export", "ngram", "--format", "sglang", "--out", str(tmp_path / "ng")])
    assert json.loads((tmp_path / "ng" / "serving.json").read_text())["settings"]["--speculative-algorithm"] == "NGRAM"
    capsys.readouterr()
    main(["export", "--table", "--k", "4"])
    table = capsys.readouterr().out
    assert "== medusa" in table and "sglang        — no Medusa heads" in table
    with pytest.raises(SystemExit) as stop:
        main(["export", "mtp", "--out", str(tmp_path / "mtp")])
    assert stop.value.code == 2 and "inside the target's checkpoint" in capsys.readouterr().err
