"""Chapter 10's helpers read its records, lay out their tables and draw their figures."""
import matplotlib

matplotlib.use("Agg")

from speclab.course.chapters import ch10  # noqa: E402
from speclab.course.notebook import read_record  # noqa: E402


def test_path_table_pairs_every_method_with_its_fast_row():
    bench = read_record("10_bench_compiled")
    ratios, rows, header = ch10.path_table(bench)
    assert "draft_model" in ratios and "target-only" not in ratios
    assert len(rows) == len(ratios) and all(len(r) == len(header) for r in rows)
    e, f = ratios["draft_model"]
    assert 0 < e and 0 < f


def test_by_category_and_width_steps_read_a_chat_record():
    workloads = read_record("10_smollm2_fast")["workloads"]
    cats = ch10.by_category(workloads, ("speculative",))
    assert len(cats) == len(workloads)
    assert all(c["fast_x"] > 0 and 0 <= c["alpha"] <= 1 for c in cats.values())
    assert ch10.category_rows(cats, ("speculative",))[0][0] in cats
    assert ch10.width_steps(workloads[0])[1] == 1.0


def test_thread_scaling_and_records_table():
    record = read_record("10_profile_compiled")
    scaling, floor_gain, step_gain = ch10.thread_scaling(record)
    assert set(scaling) == {1, 2} and floor_gain > 0 and step_gain > 0
    assert len(ch10.scaling_lines(record)) == 3
    rows, header = ch10.records_table({"x": record})
    assert len(rows[0]) == len(header)


def test_figures_are_drawn_at_the_column_width():
    record = read_record("10_profile_compiled")
    fig = ch10.step_bars({"a": (record["steps"]["eager"], 1.0), "b": ({"total": 2.0}, 1.0)}, floor=0.5)
    assert fig.get_size_inches()[0] <= 7.5
    fig = ch10.width_figure({"eager, live": {1: 1.0, 2: 1.5}})
    assert fig.get_size_inches()[0] <= 7.5
    fig = ch10.speedup_figure({"m": (1.2, 0.9)}, "host")
    assert fig.get_size_inches()[0] <= 7.5


def test_show_source_folds_long_lines(capsys):
    def f():  # a line longer than twenty characters, to be folded
        return 1
    ch10.show_source(f, width=40)
    assert all(len(line) <= 40 for line in capsys.readouterr().out.splitlines())


def test_the_one_sequence_attention_listing_is_the_fast_paths_attention():
    import torch

    import speclab
    from speclab.fast_model import FastLlama

    target = speclab.load_pair()[0]
    torch.manual_seed(0)
    n, end = 5, 7
    outs, caches = [], []
    for listing in (False, True):
        fast = FastLlama(target, max_len=16)
        layer = fast.layers[0]
        h = torch.randn(1, n, target.config.hidden_size, generator=torch.Generator().manual_seed(1))
        slots = torch.arange(2, 2 + n).view(1, n)
        cos, sin = fast.cos[slots].unsqueeze(1), fast.sin[slots].unsqueeze(1)
        sees = torch.ones(n, end, dtype=torch.bool).tril(diagonal=end - n).view(1, 1, n, end)
        with torch.no_grad():
            if listing:
                outs.append(ch10.attention(fast, layer, h, slots, cos, sin, sees, end))
            else:
                outs.append(fast.attention(layer, h, slots, cos, sin, sees, end, None))
        caches.append(layer.keys.clone())
    assert torch.allclose(outs[0], outs[1]) and torch.equal(caches[0], caches[1])


def test_show_source_can_leave_out_docstrings_and_comments(capsys):
    def f(x):
        """A docstring."""
        # a comment line
        return x  # a trailing comment
    ch10.show_source(f, docstrings=False, comments=False)
    assert capsys.readouterr().out.splitlines() == ["def f(x):", "    return x"]
    ch10.show_source(f, docstrings=False)
    assert "docstring" not in capsys.readouterr().out
