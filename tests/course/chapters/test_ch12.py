"""Chapter 12's helpers read the committed records the way the page says."""
from __future__ import annotations

import pytest

from speclab.course.chapters import ch12
from speclab.course.notebook import read_record


def test_side_by_side_reads_every_method_and_the_numbers_the_prose_glues():
    record = read_record("12_vllm_beside_speclab")
    rows, numbers = ch12.side_by_side(record)
    assert [r[0] for r in rows] == list(record["rows"])
    assert all(len(r) == len(ch12.SIDE_BY_SIDE_HEADER) for r in rows)
    assert numbers["all_equal"] is True and numbers["worst_gap"] < numbers["ngram_gap"]
    assert numbers["vllm_e3"] == pytest.approx(record["rows"]["eagle3"]["vllm"]["tokens_per_s"]
                                               / record["rows"]["target-only"]["vllm"]["tokens_per_s"])
    speedups = {r[0]: r[-1] for r in rows}  # every method's, n-gram's too; target-only's is empty
    assert speedups["target-only"] == "" and all(v.endswith("x") for n, v in speedups.items() if n != "target-only")
    assert numbers["speclab_ngram"] < 1 < numbers["vllm_ngram"]


def test_the_load_record_and_chapter_11s_grid():
    load = read_record("12_load_test")
    assert len(ch12.load_table(load)) == sum(len(rows) for rows in load["rows"].values())
    numbers = ch12.load_numbers(load)
    assert numbers["high_rate"] > numbers["low_rate"] and numbers["fallback_above"] == load["fallback_above"]
    assert ch12.pass_ratio(read_record("11_batch_static"), 16, 5) == pytest.approx(30.1 / 17.6, rel=0.01)


def test_target_only_speeds_name_each_record():
    speeds = ch12.target_only_speeds({n: read_record(n) for n in ch12.SPEEDS})
    assert set(speeds) == {label for label, _ in ch12.SPEEDS.values()}
    assert all(50 < v < 200 for v in speeds.values())


def test_a_p95_from_few_requests():
    assert ch12.all_below_quantile(24) == pytest.approx(0.95 ** 24)
    assert ch12.requests_for_upper_bound(0.95) == 59  # 0.95**59 < 0.05 <= 0.95**58
    assert 0.95 ** 58 > 0.05 > 0.95 ** 59


def test_wrapping_keeps_lines_short():
    text = ch12.reasons_text(["at 16 req/s the p95 time per token rose " * 5])
    assert max(map(len, text.splitlines())) <= 96


def test_the_claims_of_12_4_hold_for_the_committed_records_and_fail_when_they_do_not():
    load, batch = read_record("12_load_test"), read_record("11_batch_static")
    ch12.check_load_claims(load, batch)
    assert "K = 3" in ch12.load_caption(load) and "batch 1" in ch12.side_caption(read_record("12_vllm_beside_speclab"))
    fallback_as_eagle3 = {**load, "rows": {**load["rows"], "eagle3-fallback": load["rows"]["eagle3"]}}
    with pytest.raises(AssertionError, match="fallback below plain decoding"):
        ch12.check_load_claims(fallback_as_eagle3, batch)


def test_the_fallback_and_ngram_claims_of_12_4_fail_when_the_record_says_otherwise():
    load, batch = read_record("12_load_test"), read_record("11_batch_static")
    drafting = [{**r, "drafts": 100} for r in load["rows"]["eagle3-fallback"]]
    with pytest.raises(AssertionError, match="as often as EAGLE-3"):
        ch12.check_load_claims({**load, "rows": {**load["rows"], "eagle3-fallback": drafting}}, batch)
    off_p95 = {r["rate"]: r["tpot_ms_p95"] for r in load["rows"]["off"]}
    calm = [{**r, "tpot_ms_p95": off_p95[r["rate"]]} for r in load["rows"]["ngram"]]
    with pytest.raises(AssertionError, match="n-gram raises the p95"):
        ch12.check_load_claims({**load, "rows": {**load["rows"], "ngram": calm}}, batch)
    varying = [{**r, "drafts": r["drafts"] + r["rate"]} for r in load["rows"]["ngram"]]
    with pytest.raises(AssertionError, match="the same at every rate"):
        ch12.check_load_claims({**load, "rows": {**load["rows"], "ngram": varying}}, batch)


def test_the_lookup_row_is_the_registered_method_without_weights():
    record, load = read_record("12_vllm_beside_speclab"), read_record("12_load_test")
    assert ch12.lookup_row(record["rows"]) == "ngram" == ch12.lookup_row(load["rows"])
    with pytest.raises(ValueError, match="one row drafting without weights"):
        ch12.lookup_row(["target-only", "eagle3"])


def test_the_short_run_of_12_3_says_where_its_numbers_come_from_and_a_live_one_is_checked():
    record = read_record("12_vllm_beside_speclab")
    from_record = ch12.eagle3_beside(record, live=False)
    assert from_record.startswith("from this section's record, not run here")
    assert "SPECLAB_REQUIRE_SERVING=1" in from_record and max(map(len, from_record.splitlines())) <= 100
    live = {**record, "prompts": 1}
    assert ch12.eagle3_beside(live, live=True).startswith("live here") and "1 prompt of" in ch12.eagle3_beside(
        live, live=True)
    rows = record["rows"]["eagle3"]
    wrong = {**live, "rows": {"eagle3": {**rows, "vllm": {**rows["vllm"], "same_as_target_only": False}}}}
    with pytest.raises(AssertionError, match="vllm's output differs"):
        ch12.eagle3_beside(wrong, live=True)
    tau = rows["speclab"]["mean_acceptance_length"] * (1 + 2 * ch12.LIVE_TOLERANCE)
    drifted = {**live, "rows": {"eagle3": {**rows, "vllm": {**rows["vllm"], "mean_acceptance_length": tau}}}}
    with pytest.raises(AssertionError, match="acceptance is"):
        ch12.eagle3_beside(drifted, live=True)
    silent = {**live, "rows": {"eagle3": {**rows, "vllm": {**rows["vllm"], "drafts": 0}}}}
    with pytest.raises(AssertionError, match="vLLM proposed no draft"):
        ch12.eagle3_beside(silent, live=True)
    ch12.eagle3_beside(drifted, live=False)  # the record's row is shown, not checked again
