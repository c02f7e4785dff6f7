"""Section 9.6's figure helper: one row per category, one marker series per method, at the column's width."""
import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from speclab.course.chapters import ch09, ch09_compare  # noqa: E402


def test_category_figure_draws_every_method_in_every_category():
    speeds = ch09.by_category(ch09.bench_rows("smollm2_lookup_first.json"))
    labels = {"speclab eagle3": "EAGLE-3", "speclab lookup-then-eagle3": "lookup, then EAGLE-3"}
    fig = ch09_compare.category_figure(speeds, labels)
    assert isinstance(fig, Figure) and fig.get_figwidth() == ch09_compare.WIDTH
    ax = fig.axes[0]
    cats = ch09_compare.categories_of(speeds)
    assert [t.get_text() for t in ax.get_yticklabels()] == cats
    series = [line for line in ax.get_lines() if line.get_label() in labels.values()]
    assert len(series) == 2
    for line, m in zip(series, labels):
        assert list(line.get_xdata()) == [speeds[m, c][0] for c in cats]


def test_category_figure_refuses_a_method_without_a_speed_and_too_many_methods():
    speeds = {("a", "qa"): (1.0, None), ("a", "rag"): (1.1, None), ("b", "qa"): (0.9, None)}
    with pytest.raises(KeyError):
        ch09_compare.category_figure(speeds, {"a": "A", "b": "B"})
    many = {(str(i), "qa"): (1.0, None) for i in range(9)}
    with pytest.raises(ValueError):
        ch09_compare.category_figure(many, {str(i): str(i) for i in range(9)})
