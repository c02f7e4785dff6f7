"""The batch sweep's arithmetic (speclab.measure.batching): inter-token gaps, the crossover, the K policy
from the model, and a sweep on a tiny pair whose rows are checked against target-only."""
import pytest
import torch

from speclab.measure import batching
from speclab.runner import disable_fast_path, enable_fast_path
from tests.conftest import tiny_model


def test_a_rounds_time_is_shared_by_the_tokens_it_produced():
    # the first round (after the prefill) is left out; then 2 tokens 0.3 s later, 1 token 0.1 s after that
    assert batching.itl_gaps([0.5, 0.5, 0.8, 0.8, 0.9]) == pytest.approx([0.15, 0.15, 0.1])
    assert batching.itl_gaps([0.5]) == []


def test_percentile_and_crossover():
    assert batching.percentile([5, 1, 3, 2, 4], 95) == 5 and batching.percentile([1.0], 95) == 1.0
    assert batching.crossover({1: 2.0, 4: 1.3, 16: 0.9, 64: 0.6}) == 16
    assert batching.crossover({1: 2.0, 4: 0.9, 16: 1.1, 64: 0.6}) == 64  # it paid again at 16: not crossed at 4
    assert batching.crossover({1: 2.0, 64: 1.2}) is None


def test_the_policy_shrinks_k_as_verification_stops_being_free_and_turns_speculation_off():
    """A verify pass that is flat in width at batch 1 (memory-bound) and linear at batch 64 (compute-bound):
    the model picks a long K alone, a short one in between, and K = 0 (off) when nothing pays."""
    target_ms = {1: {1: 10, 2: 10, 3: 10, 5: 10.5, 9: 11},
                 8: {1: 12, 2: 16, 3: 20, 5: 28, 9: 44},
                 64: {1: 40, 2: 80, 3: 120, 5: 200, 9: 360}}
    draft_ms = {1: 1.0, 8: 1.2, 64: 4.0}
    predicted = batching.predict(0.9, target_ms, draft_ms, [1, 2, 4, 8])
    policy = batching.k_policy(predicted)
    assert policy[1] == 8 and 1 <= policy[8] < 8 and policy[64] == 0
    assert predicted[1][8] > predicted[1][1] > 1 > predicted[64][1]


def test_the_roofline_turns_from_weights_to_compute_at_the_ridge():
    weight_bytes, params, gbs, gflops = 4e8, 1e8, 10.0, 100.0  # ridge: 100e9 * 4 / (2 * 10e9) = 20 tokens
    low, ridge, high = (batching.roofline_ms(weight_bytes, params, n, gbs, gflops) for n in (1, 20, 40))
    assert low == pytest.approx(ridge) == pytest.approx(40.0) and high == pytest.approx(80.0)


@pytest.fixture()
def batch_pair(pair):
    target, draft = pair
    for model in (target, draft):
        enable_fast_path(model, max_len=64, max_batch=4)
    yield target, draft
    for model in (target, draft):
        disable_fast_path(model)


def test_a_sweep_times_every_row_and_checks_it_against_target_only(batch_pair):
    target, draft = batch_pair
    prompts = [torch.tensor([5, 17, 42, 8, 23]), torch.tensor([3, 9, 4]), torch.tensor([11, 2, 33]),
               torch.tensor([7, 7, 7, 7])]
    drafters = batching.make_drafters(target, draft, [batching.DRAFT_MODEL, batching.PROMPT_LOOKUP])
    runs = [(batching.DRAFT_MODEL, 2), (batching.PROMPT_LOOKUP, 1)]
    table = batching.sweep(target, drafters, prompts, runs, [1, 4], 6,
                           repeats=1, log=lambda line: None, min_prompts=4)
    assert [(r.method, r.batch) for r in table] == [
        (m, b) for b in (1, 4) for m in ("target-only", "draft_model", "ngram")]
    # batch 1 decodes the four prompts one at a time, batch 4 all at once: the same 24 tokens
    assert all(r.equal_rows == 4 and r.new_tokens == 6 * 4 for r in table)
    assert all(r.speedup == 1.0 for r in table if r.method == "target-only")
    assert [len(g) for g in batching.batches_of(prompts, 1, 4)] == [1, 1, 1, 1]
    with pytest.raises(ValueError, match=f"batch 8 needs {batching.MIN_PROMPTS} prompts"):
        batching.sweep(target, drafters, prompts, [], [8], 6, repeats=1)


def test_calibration_prompts_run_side_by_side_with_the_timed_ones_and_alone_decide_the_policy(batch_pair,
                                                                                               monkeypatch):
    """sweep(..., calibration=...) times both prompt sets in one rotation at each batch size (calibration and
    timed runs alternate, so both meet the same machine); each set's ratios are to its own target-only, and
    the policy (Calibration.tuned) reads the calibration rows only."""
    target, draft = batch_pair
    timed = [torch.tensor([5, 17, 42, 8, 23]), torch.tensor([3, 9, 4])]
    other = [torch.tensor([11, 2, 33]), torch.tensor([7, 7, 7, 7])]
    drafters = batching.make_drafters(target, draft, [batching.DRAFT_MODEL, batching.PROMPT_LOOKUP])
    order, real_decode = [], batching.decode

    def spy(target_, drafter, k, prompts, max_new_tokens):
        order.append("calibration" if any(p is q for p in prompts for q in other) else "timed")
        return real_decode(target_, drafter, k, prompts, max_new_tokens)

    monkeypatch.setattr(batching, "decode", spy)
    both = batching.sweep(target, drafters, timed, [(batching.DRAFT_MODEL, 2), (batching.PROMPT_LOOKUP, 1)], [1, 2], 5,
                          repeats=2, log=lambda line: None, min_prompts=2, calibration=other)
    # batch 1: each run decodes its two prompts one at a time; the sets alternate run by run
    first = order[:12]
    assert first == ["timed", "timed", "calibration", "calibration"] * 3
    cal_rows, timed_rows = batching.of_set(both, "calibration"), batching.of_set(both, "timed")
    assert len(cal_rows) == len(timed_rows) == 6 and all(r.equal_rows == 2 for r in both)
    assert all(r.speedup == 1.0 for r in cal_rows + timed_rows if r.method == "target-only")
    cal = batching.Calibration({}, None, {batching.DRAFT_MODEL: 0.5, batching.PROMPT_LOOKUP: 0.5})
    cal.tuned(both)
    assert cal.rows == cal_rows
    assert batching.rows_from_dicts(batching.rows_to_dicts(both)) == both  # a record's rows read back
    for r in timed_rows:  # the timed rows do not move the policy
        r.speedup = 10.0 if r.k else 1.0
    assert cal.policy == batching.measured_policy(cal_rows, [batching.DRAFT_MODEL, batching.PROMPT_LOOKUP])


def test_a_batch_of_one_is_timed_against_the_prompt_alone_in_pairs_whose_order_alternates(batch_pair,
                                                                                        monkeypatch):
    target, _ = batch_pair
    calls, real_generate = [], batching.generate

    def spy(target_, prompts, **kwargs):
        calls.append("listed" if isinstance(prompts, list) else "alone")
        return real_generate(target_, prompts, **kwargs)

    monkeypatch.setattr(batching, "generate", spy)
    ratios = batching.batch_of_one_pairs(target, torch.tensor([5, 17, 42]), 4, pairs=3)
    assert calls == ["alone", "listed", "listed", "alone", "alone", "listed"]
    assert len(ratios) == 3 and all(r > 0 for r in ratios)
    calls.clear()
    assert batching.one_against_a_batch_of_one(target, torch.tensor([5, 17, 42]), 4, repeats=3) > 0
    assert len(calls) == 6


def test_pass_costs_time_each_batch_and_width(batch_pair):
    target, _ = batch_pair
    costs = batching.pass_costs(target, [1, 4], [1, 3], context=8, repeats=1)
    assert set(costs) == {1, 4} and all(set(c) == {1, 3} and min(c.values()) > 0 for c in costs.values())


def test_pass_costs_need_the_fast_path():
    with pytest.raises(ValueError, match="enable_fast_path"):
        batching.pass_costs(tiny_model("llama", layers=1), [1], [1], context=4)


def test_the_measured_policy_takes_the_fastest_k_and_turns_speculation_off_where_none_pays():
    def row(method, k, batch, speedup):
        return batching.BatchRow(method, k, batch, 1, 1.0, 0.0, 0.0, speedup=speedup)

    table = [row("target-only", 0, 1, 1.0), row("m", 2, 1, 1.4), row("m", 4, 1, 1.6),
             row("target-only", 0, 32, 1.0), row("m", 2, 32, 0.9), row("m", 4, 32, 0.7)]
    assert batching.measured_policy(table, ["m"]) == {"m": {1: 4, 32: 0}}


def test_the_default_takes_the_fastest_k_and_a_tie_margin_hands_near_ties_to_the_smaller():
    def row(k, batch, speedup):
        return batching.BatchRow("m", k, batch, 1, 1.0, 0.0, 0.0, speedup=speedup)

    table = [row(2, 1, 1.45), row(4, 1, 1.47), row(8, 1, 1.40),  # K=2 within 0.03 of K=4
             row(1, 8, 1.02), row(2, 8, 1.01),                    # within 0.03 of off (1.0x)
             row(1, 16, 1.10), row(2, 16, 1.20)]                  # 0.10 apart: the faster
    assert batching.TIE == 0.0 and batching.measured_policy(table, ["m"]) == {"m": {1: 4, 8: 1, 16: 2}}
    assert batching.measured_policy(table, ["m"], tie=0.03) == {"m": {1: 2, 8: 0, 16: 2}}
    with pytest.raises(ValueError, match="tie"):
        batching.measured_policy(table, ["m"], tie=-0.1)


def test_the_rounds_model_prices_a_round_with_its_tail_and_its_drafting():
    """3 tokens a round, but the batch ran 1.5x the rounds its sequences needed: 2 tokens a round for the
    batch, in a 12 ms pass plus 3 ms of drafting, against 10 ms a token alone: 1.33x."""
    row = batching.BatchRow("m", 2, 8, 1, 1.0, 0.0, 0.0, tokens_per_round=3.0, tail=1.5, draft_ms=3.0)
    predicted = batching.predict_from_rounds([row], {8: {1: 10.0, 3: 12.0}})
    assert predicted == {"m": {8: {2: pytest.approx(2 * 10 / 15)}}}


def test_the_sweep_names_its_rows_as_the_registry_and_reads_an_older_record_under_those_names():
    """A row is named as its drafter is (the registry's name and variant); a record written when the rows
    were "draft model" and "prompt lookup" reads under the names now, in its rows and its tables by method."""
    assert list(batching.DRAFTERS) == ["draft_model", "ngram", "eagle chain"]
    old = {"rows": [{"method": "draft model", "k": 1}, {"method": "target-only", "k": 0}],
           "summary": {"draft model": {"best_k": {}}, "prompt lookup": {}, "eagle chain": {}},
           "alpha": {"prompt lookup": 0.8}}
    new = batching.current_names(old)
    assert [r["method"] for r in new["rows"]] == ["draft_model", "target-only"]
    assert list(new["summary"]) == list(batching.DRAFTERS) and new["alpha"] == {"ngram": 0.8}
