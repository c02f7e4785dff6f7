"""The benchmark: interleaved repeats, exact outputs, and the model check's arithmetic."""
import json

import pytest
import torch

from speclab import theory
from speclab.measure.bench import BenchRow, format_table, model_check, round_costs, run_bench, speedup_interval
from speclab.stats import GenerationStats


def test_bench_rows_report_outputs_acceptance_and_phase_times(pair, prompt):
    target, draft = pair
    methods = ("speclab target-only", "speclab draft_model", "speclab ngram", "hf target-only")
    rows = run_bench(target, draft, [prompt, prompt[:5]], k=3, max_new_tokens=12, methods=methods, repeats=3)
    assert [r.method for r in rows] == list(methods)
    for r in rows:
        assert r.new_tokens == 24 and len(r.repeat_seconds) == 3
        assert min(r.repeat_seconds) <= r.seconds <= max(r.repeat_seconds)
        assert len(r.prompt_seconds) == 2 and sum(r.prompt_seconds) == pytest.approx(r.seconds)  # the median repeat's
    base, spec = rows[0].stats, rows[1].stats
    assert rows[1].matches_target_only and rows[3].matches_target_only and rows[3].stats is None
    assert spec.drafted > 0 and 0 <= rows[1].acceptance_rate <= 1 and spec.rounds >= 24 / 4
    assert spec.new_tokens == 24 and sum(spec.accepted_lengths) == spec.rounds
    assert spec.draft_s > 0 and spec.target_s > 0 and spec.prefill_s + spec.draft_s + spec.target_s < spec.wall_s
    assert base.draft_s == 0 and base.target_s > 0 and rows[0].alpha is None


def test_a_recorded_row_reads_back_as_the_row_the_bench_measured(pair, prompt):
    methods = ("speclab target-only", "speclab draft_model", "hf target-only")
    rows = run_bench(*pair, [prompt, prompt[:5]], k=3, max_new_tokens=8, methods=methods, repeats=1)
    back = [BenchRow.from_record(json.loads(json.dumps(r.to_record()))) for r in rows]  # as a book record holds it
    assert format_table(back) == format_table(rows)
    assert back[1].stats == rows[1].stats and back[1].alpha == rows[1].alpha and back[2].stats is None
    assert back[1].prompt_seconds == rows[1].prompt_seconds and back[1].tokens_per_s == rows[1].tokens_per_s


def test_a_slow_stretch_of_the_machine_slows_every_method_alike(pair, prompt, monkeypatch):
    """Methods that do the same work get the same time when the machine runs 10x slower for the first
    half of the run: the bench interleaves them prompt by prompt, in a rotated order. (Run method by
    method, the first would take all the slow calls and look 10x slower.)"""
    import speclab.measure.bench as bench
    calls = []
    total = 2 * 4 * 3  # methods x prompts x repeats, after the warm-up

    def fake_run(row, target, draft, drafter, prompt, *args, **kwargs):
        calls.append(row.label)
        return prompt, 10.0 if len(calls) <= total // 2 else 1.0, None

    monkeypatch.setattr(bench, "decode_row", fake_run)
    methods = ("speclab target-only", "hf target-only")
    rows = run_bench(*pair, [prompt] * 4, methods=methods, repeats=3, max_new_tokens=1, warmup=False)
    a, b = methods
    assert len(calls) == total and calls[:6] == [a, b, b, a, a, b]  # one prompt after another, order rotated
    assert sorted(rows[0].repeat_seconds) == sorted(rows[1].repeat_seconds)
    assert rows[0].seconds == rows[1].seconds


def test_transformers_rows_go_on_past_eos_as_speclab_does(pair, prompt):
    """Where the target's greedy choice is its EOS token, transformers' loops must emit it and go on,
    as speclab's do: forbidding EOS (min_new_tokens) would give another text."""
    from speclab.decoding import generate
    target, draft = pair
    first = generate(target, prompt, max_new_tokens=1).tokens[0].item()
    eos = target.generation_config.eos_token_id
    target.generation_config.eos_token_id = first  # the very first greedy token is now EOS
    try:
        rows = run_bench(target, draft, [prompt], max_new_tokens=6, warmup=False,
                         methods=("speclab target-only", "hf target-only", "hf assisted"))
    finally:
        target.generation_config.eos_token_id = eos
    assert all(r.new_tokens == 6 for r in rows)
    assert rows[1].matches_target_only and rows[2].matches_target_only


def test_with_an_eos_token_every_row_stops_there_and_keeps_it(pair, prompt):
    """--stop-at-eos: a chat answer ends at its end-of-turn token, and what the target writes after it is not
    the category's text. Every row (speclab's loops, the fast path, transformers' generate) stops at the
    token, with it, and the greedy outputs stay equal; without it they go on."""
    from speclab.decoding import generate
    from speclab.measure import bench
    target, draft = pair
    greedy = generate(target, prompt, max_new_tokens=12).tokens.tolist()
    stop = greedy[4]
    ends = greedy.index(stop) + 1  # the first time the target emits it
    methods = ("speclab target-only", "speclab draft_model", "speclab ngram", "hf target-only",
               "hf assisted")
    paths = bench.prepare_fast_paths(target, draft, "static", max_width=4)
    rows = run_bench(target, draft, [prompt], k=3, max_new_tokens=12, methods=methods, warmup=False,
                     eos_token_id=stop, paths=paths)
    assert len(rows) == len(methods) + 3  # the speclab rows again on the fast path
    assert all(r.new_tokens == ends for r in rows), [(r.method, r.new_tokens) for r in rows]
    assert all(r.matches_target_only for r in rows[1:])
    assert rows[1].stats.new_tokens == ends
    past = run_bench(target, draft, [prompt], k=3, max_new_tokens=12, methods=methods[:2], warmup=False)
    assert all(r.new_tokens == 12 for r in past)


def test_the_warm_up_decodes_the_longest_prompt_in_full_on_the_fast_path(pair, prompt, monkeypatch):
    """A compiled graph compiled inside a timed run (a longer prompt's cache reaching a new bucket) is
    timed as decoding: the warm-up runs each fast row over the longest prompt for every new token."""
    from speclab.measure import bench
    from speclab.runner import fast_path_of
    calls = []
    real = bench.decode_row

    def spy(row, target, draft, drafter, prompt, max_new, *args, **kwargs):
        calls.append((row.label, len(prompt), max_new, fast_path_of(target) is not None))
        return real(row, target, draft, drafter, prompt, max_new, *args, **kwargs)

    monkeypatch.setattr(bench, "decode_row", spy)
    target, draft = pair
    paths = bench.prepare_fast_paths(target, draft, "static", max_width=4)
    methods = ("speclab target-only", "speclab draft_model")
    run_bench(target, draft, [prompt[:5], prompt], k=3, max_new_tokens=10, methods=methods, paths=paths)
    warm = calls[:4]
    assert warm == [("speclab target-only", 5, 10, False), ("speclab draft_model", 5, 10, False),
                    ("speclab target-only (fast)", len(prompt), 10, True),
                    ("speclab draft_model (fast)", len(prompt), 10, True)]


def test_the_speedup_interval_is_a_bootstrap_over_prompts():
    base = BenchRow("speclab target-only", 80, 16.0, prompt_seconds=[2.0] * 8)
    same = BenchRow("a", 80, 8.0, prompt_seconds=[1.0] * 8)  # 2x on every prompt
    assert speedup_interval(same, base) == pytest.approx((2.0, 2.0))
    mixed = BenchRow("b", 80, 8.0, prompt_seconds=[0.5, 0.5, 1.5, 1.5] * 2)  # 4x on half, 1.33x on half
    low, high = speedup_interval(mixed, base)
    assert 1.33 <= low < 2.0 < high <= 4.0  # the total's 2x, and how far other prompts could move it
    narrower = speedup_interval(BenchRow("c", 320, 32.0, prompt_seconds=[0.5, 0.5, 1.5, 1.5] * 8),
                                BenchRow("speclab target-only", 320, 64.0, prompt_seconds=[2.0] * 32))
    assert low < narrower[0] and narrower[1] < high  # four times the prompts, a narrower interval
    table = format_table([base, mixed]).splitlines()
    assert "95% range" in table[0] and f"{low:.2f}-{high:.2f}x" in table[2] and " - " in table[1]
    assert len(table) == 7 and table[3].startswith("speedup:")  # the legend, no footer: enough prompts
    assert max(map(len, table)) <= 88  # fits a page's code column


def test_too_few_prompts_give_no_interval_and_the_table_says_why():
    base = BenchRow("speclab target-only", 40, 8.0, prompt_seconds=[2.0] * 4)
    few = BenchRow("b", 40, 4.0, prompt_seconds=[0.5, 0.5, 1.5, 1.5])
    assert speedup_interval(few, base) is None
    assert speedup_interval(few, base, min_prompts=4) is not None
    table = format_table([base, few]).splitlines()
    assert "no interval over 4 prompts" in table[-2] and "--num-prompts" in table[-1]
    assert "95% range" not in "\n".join(table)  # a column of dashes is left out; the footer says why
    long = BenchRow("speclab draft_model adaptive-confidence", 40, 4.0, prompt_seconds=[1.0] * 4)
    assert max(map(len, format_table([base, long]).splitlines())) <= 88  # the longest row label still fits


def test_bench_refuses_an_unknown_method(pair, prompt):
    with pytest.raises(ValueError, match="unknown method"):
        run_bench(*pair, [prompt], methods=("speclab target-only", "vllm"))
    # a row label of one setting names the method and the option that makes the row
    with pytest.raises(ValueError, match="'speclab layer_skip E=8' is a row of 'speclab layer_skip'.*--layer-skip"):
        run_bench(*pair, [prompt], methods=("speclab target-only", "speclab layer_skip E=8"))


def test_model_check_puts_costs_in_target_token_units():
    # target-only: 100 tokens in 1.0 s after a 0.1 s prefill -> 9 ms per token
    base = GenerationStats(new_tokens=100, wall_s=1.0, prefill_s=0.1, target_s=0.8, rounds=100)
    # speculative, K = 4: 25 rounds, 100 drafted, 75 accepted, 20 rejections
    spec = GenerationStats(method="speculative", k=4, new_tokens=100, wall_s=0.6, prefill_s=0.1, rounds=25,
                           drafted=100, accepted=75, rejections=20, target_s=0.3, draft_s=0.18)
    check = model_check(base, spec)
    unit = 0.9 / 100
    assert check.unit_ms == pytest.approx(9.0)
    assert check.alpha == pytest.approx(75 / 95)
    assert check.verify_cost == pytest.approx(0.3 / 25 / unit)
    assert check.c == pytest.approx(0.18 / 100 / unit)
    assert check.other == pytest.approx((0.5 - 0.3 - 0.18) / 25 / unit)
    assert check.measured == pytest.approx(0.9 / 0.5)
    assert check.modelled == pytest.approx(theory.speedup(75 / 95, 4, check.c, check.verify_cost))
    assert check.ratio == pytest.approx(check.measured / check.modelled)
    # the per-round rest priced in: each round pays verify + K c + other target tokens
    per_round = check.verify_cost + 4 * check.c + check.other
    assert check.modelled_with_other == pytest.approx(theory.expected_tokens(75 / 95, 4) / per_round)
    assert check.modelled_with_other < check.modelled
    assert "measured/modelled" in str(check) and "with other" in str(check)
    with pytest.raises(ValueError, match="drafted"):
        model_check(base, base)


def test_round_costs_are_in_decode_steps_of_the_target_only_row():
    # target-only: 100 decode steps in 0.8 s of target time -> 8 ms a step
    base = BenchRow("speclab target-only", 100, 1.0,
                    GenerationStats(new_tokens=100, wall_s=1.0, prefill_s=0.1, target_s=0.8, rounds=100))
    # 20 rounds of 5 tokens: 0.24 s verifying (1.5 steps a round), 0.08 s drafting, 0.02 s else
    spec = BenchRow("speclab eagle", 100, 0.44, GenerationStats(
        method="speculative", k=8, new_tokens=100, rounds=20, draft_calls=120, drafted=140, accepted=80,
        rejections=15, prefill_s=0.1, draft_s=0.08, target_s=0.24, wall_s=0.44, verified_positions=400))
    cost = round_costs(spec, base)  # 400 positions verified: the drafts, the pending tokens and 240 side tokens
    assert cost == pytest.approx(dict(tpr=5.0, draft=0.5, verify=1.5, other=0.125, passes=6.0, nodes=7.0,
                                      width=20.0))
    with pytest.raises(ValueError, match="drafted"):
        round_costs(base, base)
    with pytest.raises(ValueError, match="target-only"):
        round_costs(spec, spec)


def test_combined_stats_sum_runs_and_refuse_mixed_methods():
    a = GenerationStats(method="speculative", k=2, new_tokens=5, rounds=2, drafted=4, accepted=3, rejections=1,
                        accepted_lengths=[0, 1, 1], wall_s=0.5, draft_s=0.1)
    b = GenerationStats(method="speculative", k=2, new_tokens=7, rounds=3, drafted=6, accepted=4, rejections=2,
                        accepted_lengths=[1, 0, 2], wall_s=0.25, draft_s=0.05)
    total = GenerationStats.combine([a, b])
    assert (total.new_tokens, total.rounds, total.accepted, total.accepted_lengths) == (12, 5, 7, [1, 1, 3])
    assert total.wall_s == pytest.approx(0.75) and total.alpha == pytest.approx(7 / 10)
    with pytest.raises(ValueError, match="cannot combine"):
        GenerationStats.combine([a, GenerationStats()])


def test_lookahead_settings_become_rows_side_by_side(pair, prompt):
    from speclab.measure.bench import expand_methods
    methods = ("speclab target-only", "speclab lookahead", "speclab ngram", "hf prompt-lookup")
    assert expand_methods(methods, lookahead=[(4, 4, 4)]) == methods
    settings = [(2, 2, 1), (3, 3, 2)]
    rows = run_bench(*pair, [prompt], k=3, max_new_tokens=10, methods=methods, lookahead=settings, lookup_k=5,
                     warmup=False)
    names = [r.method for r in rows]
    assert names == ["speclab target-only", "speclab lookahead 2,2,1", "speclab lookahead 3,3,2",
                     "speclab ngram", "hf prompt-lookup"]
    by_name = {r.method: r for r in rows}
    assert by_name["speclab ngram"].stats.k == 5 and by_name["speclab lookahead 2,2,1"].stats.k == 3
    wide, narrow = by_name["speclab lookahead 3,3,2"].stats, by_name["speclab lookahead 2,2,1"].stats
    assert wide.verified_positions / wide.rounds > narrow.verified_positions / narrow.rounds  # a wider window
    assert all(r.matches_target_only for r in rows[1:])


def test_prompt_lookup_rules_become_rows_side_by_side(pair, prompt):
    methods = ("speclab target-only", "speclab ngram", "hf prompt-lookup")
    rows = run_bench(*pair, [prompt], k=3, max_new_tokens=10, methods=methods, lookup_k=6, warmup=False,
                     lookup_choices=["latest", "frequent"])
    assert [r.method for r in rows] == ["speclab target-only", "speclab ngram latest",
                                        "speclab ngram frequent", "hf prompt-lookup"]
    assert rows[1].stats.k == rows[2].stats.k == 6 and all(r.matches_target_only for r in rows[1:])
    table = format_table(rows).splitlines()[:len(rows) + 1]  # the header and the rows, above the legend
    assert len({len(line) for line in table}) == 1, "a long row name pushed its columns out of line"


def test_k_sweep_adaptive_k_layer_skip_and_mtp_rows_side_by_side(pair, prompt, tmp_path):
    from speclab.methods.mtp import MtpModule
    target, draft = pair
    MtpModule.for_target(target).save(tmp_path / "mtp")
    methods = ("speclab target-only", "speclab draft_model", "speclab draft_model adaptive-heuristic",
               "speclab draft_model adaptive-confidence", "speclab mtp", "speclab mtp chain", "speclab layer_skip")
    rows = run_bench(target, draft, [prompt], k=3, max_new_tokens=12, methods=methods, warmup=False,
                     k_sweep=[1, 5], layer_skip=[(1, False)], weights={"mtp": tmp_path / "mtp"},
                     confidence_thresholds=[0.5])
    by_name = {r.method: r for r in rows}
    assert list(by_name) == ["speclab target-only", "speclab draft_model", "speclab draft_model K=1",
                             "speclab draft_model K=5", "speclab draft_model adaptive-heuristic",
                             "speclab draft_model adaptive-confidence", "speclab mtp", "speclab mtp chain",
                             "speclab layer_skip E=1"]
    assert by_name["speclab draft_model K=1"].stats.k == 1 and by_name["speclab draft_model K=5"].stats.k == 5
    assert by_name["speclab draft_model adaptive-heuristic"].stats.k == 5  # the sweep's largest K is the upper bound
    assert "heuristic K" in by_name["speclab draft_model adaptive-heuristic"].stats.method
    assert "confidence stop 0.5" in by_name["speclab draft_model adaptive-confidence"].stats.method
    assert by_name["speclab mtp"].stats.drafted <= by_name["speclab mtp"].stats.rounds  # one token a round
    rows = run_bench(target, draft, [prompt], k=3, max_new_tokens=8, warmup=False, confidence_thresholds=[0.2, 0.6],
                     methods=("speclab target-only", "speclab draft_model adaptive-confidence"))
    assert [r.method for r in rows][1:] == ["speclab draft_model adaptive-confidence 0.2",
                                            "speclab draft_model adaptive-confidence 0.6"]
    assert "confidence stop 0.6" in rows[2].stats.method
    assert by_name["speclab mtp chain"].stats.drafted > by_name["speclab mtp chain"].stats.rounds
    assert all(r.matches_target_only for r in rows[1:])


def test_a_lossy_row_decodes_with_its_rule_and_the_table_says_so(pair, prompt, tmp_path):
    """The typical-acceptance row drafts with the Medusa tree and decides with the reference's typical
    rule: the target's greedy text at T = 0 (only the argmax passes a one-hot p), not lossless when
    sampling, and marked so in the table."""
    from speclab.methods.medusa import MedusaHeads
    target, draft = pair
    MedusaHeads.for_target(target, num_heads=2).save(tmp_path / "heads")
    methods = ("speclab target-only", "speclab medusa", "speclab medusa typical")
    weights = {"medusa": tmp_path / "heads"}
    greedy = run_bench(target, draft, [prompt], k=2, max_new_tokens=8, methods=methods, warmup=False,
                       weights=weights)
    assert greedy[2].matches_target_only and greedy[1].stats.lossless and not greedy[2].stats.lossless
    assert "typical-medusa acceptance" in greedy[2].stats.method
    sampled = run_bench(target, draft, [prompt], k=2, max_new_tokens=8, methods=methods, warmup=False,
                        weights=weights, temperature=1.0)
    table = format_table(sampled).splitlines()
    assert table[3].startswith("medusa typical*") and not table[2].startswith("medusa*")
    assert any(line.startswith("*: not lossless") for line in table)
    assert "*" not in format_table(sampled[:2])  # no mark, no legend line, where every row is lossless


def test_block_rows_run_every_chain_row_again_with_block_verification(pair, prompt):
    target, draft = pair
    methods = ("speclab target-only", "speclab draft_model", "speclab ngram", "speclab lookahead")
    greedy = run_bench(target, draft, [prompt], k=3, max_new_tokens=12, methods=methods, repeats=1, block=True)
    names = [r.method for r in greedy]
    assert names == [*methods, "speclab draft_model (block)", "speclab ngram (block)"]  # lookahead: a tree
    by = {r.method: r for r in greedy}
    assert by["speclab draft_model (block)"].matches_target_only  # greedy: the same longest match
    assert by["speclab draft_model (block)"].stats.method.endswith("block verification")
    assert by["speclab draft_model (block)"].stats.accepted == by["speclab draft_model"].stats.accepted
    sampled = run_bench(target, draft, [prompt], k=3, max_new_tokens=12, methods=methods[:2], repeats=1,
                        temperature=1.0, block=True)
    assert [r.method for r in sampled] == [*methods[:2], "speclab draft_model (block)"]
    assert sampled[2].stats.lossless and sampled[2].new_tokens == 12


def test_suffix_rows_forget_earlier_requests_before_each_pass_over_the_prompts(pair, prompt, monkeypatch):
    """A repeat must not draft from its own earlier output: the bench empties a drafter's memory of earlier
    requests (Drafter.forget_requests) before the first prompt of every pass, warm-up included."""
    from speclab.methods.suffix import SuffixDrafter
    forgotten = []
    original = SuffixDrafter.forget_requests
    monkeypatch.setattr(SuffixDrafter, "forget_requests", lambda self: (forgotten.append(1), original(self)))
    methods = ("speclab target-only", "speclab suffix", "speclab suffix tree")
    rows = run_bench(*pair, [prompt, prompt[:5]], k=3, max_new_tokens=8, methods=methods, repeats=2)
    assert all(r.matches_target_only for r in rows[1:])
    assert len(forgotten) == 2 * 2  # two suffix rows, two passes; the first pass's call forgets the warm-up too
    by = {r.method: r for r in rows}
    assert by["speclab suffix"].stats.new_tokens == 16


def test_reference_rows_only_when_named_and_a_clear_error_when_not_installed(pair, prompt, monkeypatch):
    from speclab.measure import arctic_suffix, bench
    assert "arctic suffix" not in bench.METHODS and "arctic suffix" in bench.REFERENCE_METHODS
    monkeypatch.setattr(arctic_suffix.importlib, "import_module", lambda name: (_ for _ in ()).throw(ImportError(name)))
    with pytest.raises(ImportError, match="install-arctic-suffix.sh"):
        run_bench(*pair, [prompt], k=3, max_new_tokens=4, methods=("speclab target-only", "arctic suffix"))


def test_the_draft_models_passes_are_timed_alone_beside_the_loop_prompt_by_prompt(pair, prompt, monkeypatch):
    """time_alone: the draft-model row's costs alone are one more run in the rotation, at each prompt's
    mean context, once per prompt and repeat; the row carries their medians, and its record keeps them."""
    import speclab.measure.bench as bench
    calls = []

    def fake_alone(target, draft, context, width, repeats=5, seed=0):
        calls.append((context, width))
        return {"target step": 1.0, "verify pass": float(len(calls)), "draft step": 0.1,
                "draft step after a target pass": 0.2}

    monkeypatch.setattr(bench, "costs_alone", fake_alone)
    methods = ("speclab target-only", "speclab draft_model")
    prompts = [prompt, prompt[:5]]
    rows = run_bench(*pair, prompts, k=3, max_new_tokens=6, methods=methods, repeats=2, warmup=False,
                     time_alone=True)
    assert calls == [(len(prompts[0]) + 3, 4), (len(prompts[1]) + 3, 4)] * 2
    assert rows[0].alone_ms is None and rows[1].alone_ms["verify pass"] == 2.5  # median of 1, 2, 3, 4
    assert BenchRow.from_record(json.loads(json.dumps(rows[1].to_record()))).alone_ms == rows[1].alone_ms
    calls.clear()
    assert run_bench(*pair, prompts, k=3, max_new_tokens=6, methods=methods, warmup=False)[1].alone_ms is None
    assert not calls


def test_a_row_derived_from_a_drafter_that_learns_from_requests_gets_its_own(pair, prompt, monkeypatch):
    """Suffix decoding remembers earlier requests: its fast row gets a drafter of its own, or one row would
    draft from the other's output of the same prompt; a drafter that forgets nothing (prompt lookup, here
    in four rows: eager and fast, each also with block verification) is shared."""
    import speclab.measure.bench as bench
    target, draft = pair
    used: dict = {}
    original = bench.decode_row

    def spy(row, target, draft, drafter, *args, **kwargs):
        if row.label != "speclab target-only":
            used.setdefault((row.label, fast_paths_on()), set()).add(id(drafter))
        return original(row, target, draft, drafter, *args, **kwargs)

    def fast_paths_on():
        from speclab.runner import fast_path_of
        return fast_path_of(target) is not None

    monkeypatch.setattr(bench, "decode_row", spy)
    methods = ("speclab target-only", "speclab suffix", "speclab ngram")
    paths = bench.prepare_fast_paths(target, draft, "static", max_width=4)
    rows = run_bench(target, draft, [prompt, prompt[:5]], k=3, max_new_tokens=8, methods=methods, repeats=1,
                     block=True, paths=paths)
    assert all(r.matches_target_only for r in rows[1:])
    suffix = [used[key] for key in used if key[0].startswith("speclab suffix")]
    assert len(suffix) == 2 and all(len(ids) == 1 for ids in suffix)  # eager and fast, one drafter each
    assert len(set().union(*suffix)) == 2
    lookup = [used[key] for key in used if key[0].startswith("speclab ngram")]
    assert len(lookup) == 4 and len(set().union(*lookup)) == 1


def test_the_default_bench_is_the_lesson_and_all_is_every_row():
    """`python -m speclab bench` runs target-only, the registry's lesson rows and transformers' two; `--all` every
    row that fits: on the bundled target, every lesson row fits and the lesson is a strict subset."""
    import speclab
    from speclab.measure.bench import HF_LESSON, TARGET_ONLY, default_methods, lesson_methods
    from speclab.methods import REGISTRY

    target, draft, _, _ = speclab.load_pair()
    lesson, every = lesson_methods(target, draft), default_methods(target, draft)
    expected = {TARGET_ONLY, *HF_LESSON, *(row for m in REGISTRY.values() for row in m.lesson_rows)}
    assert set(lesson) == expected and set(lesson) < set(every)
    assert list(lesson) == [m for m in every if m in lesson]          # in the table's order
    assert all(row in m.bench_rows for m in REGISTRY.values() for row in m.lesson_rows)


def test_the_interleaved_timing_says_how_far_it_got():
    from speclab.measure.bench import time_interleaved

    said = []
    time_interleaved({"a": lambda i: (0.0, i), "b": lambda i: (0.0, i)}, 2, 2, said.append)
    assert len(said) == 4 and said[-1].startswith("repeat 2/2, prompt 2/2: 2 rows timed")


def test_the_bench_is_a_plan_of_rows_as_data():
    """A row says what decodes it, with which options and K, on which path; its label is only its name."""
    from speclab.measure.bench import Row, Settings, plan, variants
    settings = Settings.of(k=3, lookup_k=6, k_sweep=[1, 5], lookahead=[(2, 2, 1), (3, 3, 2)])
    rows = {r.label: r for r in plan(("speclab target-only", "speclab draft_model",
                                      "speclab draft_model adaptive-heuristic", "speclab ngram", "speclab lookahead", "speclab medusa typical",
                                      "hf assisted", "hf prompt-lookup"), settings)}
    assert list(rows) == ["speclab target-only", "speclab draft_model", "speclab draft_model K=1",
                          "speclab draft_model K=5", "speclab draft_model adaptive-heuristic", "speclab ngram",
                          "speclab lookahead 2,2,1", "speclab lookahead 3,3,2", "speclab medusa typical", "hf assisted",
                          "hf prompt-lookup"]
    assert rows["speclab target-only"] == Row(k=3) and rows["speclab target-only"].target_only
    assert rows["speclab draft_model"].alone and not rows["speclab draft_model K=5"].alone
    # the sweep's largest
    assert (rows["speclab draft_model K=5"].k, rows["speclab draft_model adaptive-heuristic"].k) == (5, 5)
    assert rows["speclab draft_model adaptive-heuristic"].decode == {"k_schedule": "heuristic"}
    assert rows["speclab ngram"].k == rows["hf prompt-lookup"].k == 6  # lookups take lookup_k
    assert rows["speclab lookahead 3,3,2"].load == dict(window=3, ngram=3, pool=2)
    assert rows["speclab lookahead 3,3,2"].base == "speclab lookahead"
    assert rows["speclab medusa typical"].decode == {"acceptance": "typical-medusa"}
    assert rows["hf assisted"].engine == "transformers" and rows["hf assisted"].needs_draft_model
    chain = rows["speclab draft_model"]
    both = variants((rows["speclab target-only"], chain), {chain.label: torch.nn.Linear(1, 1)}, block=True, fast=True)
    assert [(r.label, r.fast, r.of, r.decode.get("acceptance")) for r in both] == [
        ("speclab target-only", False, None, None), ("speclab draft_model", False, None, None),
        ("speclab draft_model (block)", False, "speclab draft_model", "block"),
        ("speclab target-only (fast)", True, "speclab target-only", None),
        ("speclab draft_model (fast)", True, "speclab draft_model", None),
        ("speclab draft_model (block) (fast)", True, "speclab draft_model", "block")]
    assert [r.alone for r in both] == [False, True, False, False, True, False]
    with pytest.raises(ValueError, match="unknown method"):
        plan(("speclab nothing",))


def test_a_rows_label_is_made_of_its_data_and_the_sweeps_are_the_registrys():
    """The label is the registered row, a sweep's setting and the path, joined; it is never read back. Which
    registered rows a setting sweeps is the registry's (Method.bench_sweeps)."""
    from speclab.measure.bench import Row, Settings, plan, registered_sweeps, swept_rows
    from speclab.methods import REGISTRY
    row = Row("speclab layer_skip", "speclab", "layer_skip", "E=22+adapter", block=True, fast=True)
    assert row.label == "speclab layer_skip E=22+adapter (block) (fast)"
    assert row.of == "speclab layer_skip E=22+adapter" and Row().of is None
    assert Row("hf assisted", "transformers", "assisted").label == "hf assisted"
    swept = swept_rows()
    assert ({s.name for s in swept.values()} == set(registered_sweeps())
            and all(row in REGISTRY[row.split()[1]].bench_rows for row in swept))
    rows = plan(("speclab layer_skip", "speclab ngram"), Settings.of(layer_skip=[(8, False), (12, True)],
                                                                     lookup_choices=["latest"]))
    assert [(r.base, r.setting, r.label) for r in rows] == [
        ("speclab layer_skip", "E=8", "speclab layer_skip E=8"),
        ("speclab layer_skip", "E=12+adapter", "speclab layer_skip E=12+adapter"),
        ("speclab ngram", "", "speclab ngram")]  # one rule: the row as registered
    assert rows[1].load == {"exit_layer": 12, "adapter": True} and rows[2].load == {"choose": "latest"}
