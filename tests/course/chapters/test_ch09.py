"""Chapter 9's helpers: they read the chapter's records and draw its figures at the column's width."""
import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from speclab.course.chapters import ch09  # noqa: E402


def test_layer_skip_table_reads_every_exit_with_and_without_adapter():
    summary, table = ch09.layer_skip_table(24)
    assert summary["k"] >= 1 and table
    exits = {e for e, _ in table}
    assert all((e, True) in table and (e, False) in table for e in exits)
    for (e, _), t in table.items():
        assert t["c"] > 0 and t["v"] > 0 and t["shared"] >= t["modelled"]
    html = ch09.layer_skip_html(table, 24).data
    assert html.count("<tr>") == len(table) + 1


def test_adaptive_speeds_have_every_k_and_threshold_per_workload():
    fixed, conf, heur, alpha = ch09.adaptive_speeds(ch09.bench_rows("09_adaptive.json"))
    assert set(fixed) == set(conf) == set(heur) == set(alpha)
    for w in fixed:
        assert len(fixed[w]) >= 2 and len(conf[w]) >= 1 and 0 < alpha[w] < 1
    assert ch09.adaptive_best_threshold("code") in conf["code"]
    assert "heuristic" in ch09.adaptive_html(fixed, conf, heur, alpha).data


def test_by_category_gives_target_only_speed_one():
    speeds = ch09.by_category(ch09.bench_rows("smollm2_bench.json"))
    ones = [x for (m, _), (x, _) in speeds.items() if m == "speclab target-only"]
    assert ones and all(x == pytest.approx(1.0) for x in ones)


def test_verify_steps_are_positive_per_workload():
    steps = ch09.verify_steps("part2_bench.json")
    assert len(steps) == 3 and all(s > 0 for s in steps)


def test_figures_fit_the_column():
    fig = ch09.drafter_panels()
    assert isinstance(fig, Figure) and fig.get_figwidth() <= 7.5
    _, table = ch09.layer_skip_table(24)
    assert ch09.layer_skip_figure(table).get_figwidth() <= 7.5
    live = {"plain": [0.2, 0.5], "adapter": [0.3, 0.6]}
    assert ch09.exit_figure([2, 12], live, live, 24).get_figwidth() <= 7.5
    by_step = {"MTP": [0.7, 0.6], "EAGLE-3": [0.7, 0.68]}
    assert ch09.unrolled_figure(by_step, by_step).get_figwidth() <= 7.5


def test_short_marks_lossy_rows():
    assert ch09.short("speclab medusa-typical", lossless=False) == "medusa-typical*"
    assert ch09.short("hf assisted") == "hf assisted"
