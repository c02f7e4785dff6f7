"""speclab.course.chapters.ch13: chapter 13's bench records read back."""
import matplotlib

matplotlib.use("Agg")

from speclab.course.chapters import ch13  # noqa: E402


def test_block_table_and_gains():
    workload = ch13.workloads("13_block")[0]
    text, rows = ch13.bench_table(workload)
    assert all(len(line) <= 100 for line in text.splitlines())
    assert "speclab target-only" in rows and rows["speclab target-only"]["speedup"] == 1.0
    gains = ch13.block_gains(rows)
    assert set(gains) == {m for m, _ in ch13.block_pairs(rows)} and len(gains) == 4
    assert all(g > 0 for g in gains.values())


def test_named_rows_and_record_line():
    workloads = ch13.workloads("13_suffix_pard")
    assert [w["workload"] for w in workloads][-1] == "code"
    _, rows = ch13.bench_table(workloads[-1], ["speclab target-only", "speclab pard"])
    assert set(rows) == {"speclab target-only", "speclab pard"}
    assert all(len(line) <= 100 for line in ch13.record_line("x", workloads[0]).splitlines())
    line = ch13.record_line("suffix and pard", workloads)
    assert all(len(l) <= 100 for l in line.splitlines()) and "eager path" in line
    assert "16 edits" in line and "16 code" in line


def test_part2_and_figure():
    import matplotlib.pyplot as plt

    host, speedups = ch13.part2_speedups("part2_bench")
    assert host and speedups["code", "speclab target-only"] == 1.0
    fig = ch13.plot_block(ch13.bench_table(ch13.workloads("13_block")[0])[1])
    assert fig.get_size_inches()[0] <= 7.5
    plt.close(fig)
