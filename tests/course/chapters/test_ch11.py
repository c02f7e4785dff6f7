"""speclab.course.chapters.ch11: the batch sweep's record read back for chapter 11."""
import matplotlib

matplotlib.use("Agg")

from speclab.course.chapters import ch11  # noqa: E402
from speclab.course.notebook import read_record  # noqa: E402

RECORD = ch11.sweep_record()


def test_costs_and_roofline():
    costs = ch11.pass_costs(RECORD)
    assert set(costs) == set(RECORD["batch_sizes"]) and 1 in costs[1] and 5 in costs[64]
    numbers = ch11.cost_numbers(RECORD)
    assert numbers["tokens64_5"] == 320 and numbers["pass64_5_over_roof"] > 1
    assert 1 < numbers["verify5_b1"] < numbers["verify5_b64"] < 5
    assert ch11.roof_ms(RECORD, 1000) > ch11.roof_ms(RECORD, 1) > 0
    assert all(len(line) <= 100 for line in ch11.cost_grid_text(RECORD).splitlines())


def test_texts_fit_the_column():
    table, _ = ch11.policy_analysis(RECORD)
    for text in (ch11.sweep_text(RECORD), ch11.models_text(RECORD), table):
        assert all(len(line) <= 100 for line in text.splitlines())


def test_checks_and_numbers():
    checks = ch11.sweep_checks(RECORD)
    assert checks["equal"] == checks["sequences"] > 0
    model = ch11.model_numbers(RECORD)
    assert model["naive_dm_64"] > model["measured_dm_64"]
    _, policy = ch11.policy_analysis(RECORD)
    assert 0 <= policy["policy_exact"] <= policy["cells_all"] == 21


def test_latency_and_fallback():
    rows = ch11.latency_rows(RECORD, (1, 64))
    assert len(rows) == 8 and rows[0][1] == "target-only" and rows[0][4] == 0
    assert all(len(r) == len(ch11.LATENCY_HEADER) for r in rows)
    assert ch11.LATENCY_HEADER[2].startswith("ITL p95")   # next to the method: visible on a phone
    lat = ch11.latency_checks(rows)
    assert lat["p95_eagle_64"] > 0
    fallback = ch11.fallback_ratio(read_record("12_load_test"))
    assert 0 < fallback["fb_ratio"] < 2


def test_figures_draw():
    import matplotlib.pyplot as plt

    for fig in (ch11.plot_pass_costs(RECORD), ch11.plot_sweep(RECORD)):
        assert fig.get_size_inches()[0] <= 7.5
        plt.close(fig)


def test_policy_table_and_exercise_numbers():
    rows = ch11.policy_table(RECORD)
    cells = len(RECORD["batch_sizes"]) * len(ch11.METHODS_KEYS)
    assert len(rows) == cells and all(len(r) == len(ch11.POLICY_HEADER) for r in rows)
    assert any(row[2] == "off" for row in rows)   # prompt lookup switched off somewhere
    first = rows[0]   # draft model at batch 1: the policy's K, its speedup, the best fixed K's, K = 4's
    s = RECORD["summary"]["draft_model"]
    assert first[:3] == ["draft_model", 1, s["policy_k"]["1"]]
    assert first[4] == f"{s['best_speedup']['1']:.2f}x (K={s['best_k']['1']})"
    numbers = ch11.cost_numbers(RECORD)
    assert 1 < numbers["min_over_roof"] <= numbers["pass64_5_over_roof"]
    assert 1 < numbers["ex1_b16"] < numbers["ex1_b64"] < 2
    parts = ch11.round_parts(RECORD)
    assert parts["ex3_round_ms"] == parts["ex3_draft_ms"] + parts["ex3_verify_ms"] > 0


def test_margin_changes_compare_both_picks_with_the_hindsight_best():
    changes = ch11.margin_changes(RECORD, 0.03)
    summary = RECORD["summary"]
    for c in changes:
        s = summary[c["method"]]
        assert c["margin_k"] != c["policy_k"] == s["policy_k"][str(c["batch"])]
        assert c["best_x"] == s["best_speedup"][str(c["batch"])] >= c["policy_x"]
        assert c["margin_x"] == 1.0 if c["margin_k"] == 0 else c["margin_x"] > 0
    assert ch11.margin_changes(RECORD, 0.0) == []   # no margin: the policy itself
    text = ch11.margin_text(changes, RECORD)
    assert all(len(line) <= 100 for line in text.splitlines()) and "hindsight" in text


def test_the_page_names_the_methods_as_the_registry_does():
    """The record names its rows "draft model" and "prompt lookup"; the page reads them as the registry's."""
    assert read_record("11_batch_static")["summary"].keys() != RECORD["summary"].keys()  # renamed on reading
    assert list(RECORD["summary"]) == list(ch11.METHODS_KEYS) == ["draft_model", "ngram", "eagle chain"]
    for text in (ch11.sweep_text(RECORD), ch11.models_text(RECORD)):
        assert "draft_model" in text and "ngram" in text and "draft model" not in text and "prompt lookup" not in text
    model = ch11.model_numbers(RECORD)
    assert model["rounds_err_large"] == abs(model["rounds_err_pred"] / model["rounds_err_meas"] - 1)
