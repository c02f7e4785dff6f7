"""Section 9.6's figure helper: one row per category, one marker series per method, at the column's width."""
import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from speclab.course.chapters import ch09, ch09_compare  # noqa: E402


def test_category_figure_draws_every_method_in_every_category():
    speeds = ch09.by_category(ch09.bench_rows("smollm2_lookup_first.json"))
    labels = {"speclab eagle3": "EAGLE-3", "speclab lookup_first eagle3": "lookup, then EAGLE-3"}
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


def test_run_html_captions_a_live_run_with_who_drafted():
    import speclab

    target, _, tokenizer, _ = speclab.load_pair()
    ids = tokenizer("class Error(Exception):", return_tensors="pt").input_ids
    drafter = speclab.load_drafter("lookup_first", target, drafter="eagle3")
    result = speclab.speculative_generate(target, drafter, ids, max_new_tokens=12)
    sources = ch09_compare.sources_of(drafter)
    assert sources and set(sources) <= {"lookup", "drafter"}
    page = ch09_compare.run_html("mixed", result, tokenizer, sources).data
    assert f"over {result.stats.rounds} rounds" in page and f"of the {len(sources)}" in page
    plain = speclab.load_drafter("eagle3", target)
    assert ch09_compare.sources_of(plain) is None
    assert "lookup drafted" not in ch09_compare.run_html("head", result, tokenizer).data
