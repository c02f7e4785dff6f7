"""Chapter 8's helpers: each figure draws from small made-up inputs, sized for the book's column."""
import html
import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from speclab.course.chapters import ch08  # noqa: E402


def fits_the_column(fig: Figure) -> bool:
    return fig.get_size_inches()[0] <= ch08.WIDTH


def smallest_font(fig: Figure) -> float:
    sizes = [t.get_fontsize() for t in fig.findobj(matplotlib.text.Text) if t.get_text().strip()]
    return min(sizes)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_heads_diagram_shows_both_heads_at_a_readable_size():
    fig = ch08.heads_diagram()
    texts = " ".join(t.get_text() for t in fig.findobj(matplotlib.text.Text))
    assert "EAGLE-1 head" in texts and "EAGLE-3 head" in texts
    assert "fc: [e; f], 2H -> H" in texts and "fc: fuse, 3H -> H" in texts
    assert fits_the_column(fig) and smallest_font(fig) >= ch08.FONT


def test_mask_figure_draws_one_panel_per_step_with_readable_labels():
    fig = ch08.mask_figure(n=4)
    images = [ax for ax in fig.axes if ax.images]
    assert len(images) == 4
    # step s has 4 * (s + 1) columns
    assert [ax.images[0].get_array().shape[1] for ax in images] == [4, 8, 12, 16]
    assert fits_the_column(fig) and smallest_font(fig) >= ch08.FONT


def test_tree_figure_labels_every_node_and_the_root():
    parents = [-1, -1, 0, 0, 2]
    labels = [f"t{i}\n{90 - 10 * i}%" for i in range(len(parents))]
    fig = ch08.tree_figure(parents, labels, ["white"] * len(parents), "root")
    texts = {t.get_text() for t in fig.axes[0].texts}
    assert texts == set(labels) | {"root"}
    assert fits_the_column(fig) and smallest_font(fig) >= ch08.FONT


def test_cache_and_position_figures():
    fig = ch08.cache_figure([(0, 0, 10, 13), (13, 10, 13, 16), (16, 13, 15, 18)])
    assert fits_the_column(fig) and len(fig.axes[0].patches) > 0
    by_pos = {"a": {"by_position": [0.5, 0.6, float("nan")], "tokens_per_round": 2.0}}
    fig = ch08.position_figure(by_pos, 3)
    assert fits_the_column(fig) and len(fig.axes[0].lines) == 1


def test_record_figures_draw_from_made_up_records():
    record = {"log": {"train": [[1, 1.0, 8.0], [2, 0.9, 7.0]],
                      "evals": [{"step": 0, "heldout_feature_loss": 1, "heldout_ce": 8},
                                {"step": 2, "heldout_feature_loss": 0.8, "heldout_ce": 6}]}}
    assert fits_the_column(ch08.training_figure(record, np.array([[1.0, 8.0], [0.9, 7.5]])))
    ablation = {k: {"log": {"evals": [{"step": 0, "heldout_top1": 0.0}, {"step": 5, "heldout_top1": 0.3}]}}
                for k in ("a", "b")}
    live = {k: (None, None, [(0, 0.0), (5, 0.2)]) for k in ("a", "b")}
    assert fits_the_column(ch08.ablation_figure(ablation, live, {"a": "A", "b": "B"}, 4, 8))
    evals3 = [{"step": s, "heldout_top1_by_step": [0.1 * s] * 3} for s in range(3)]
    end = {"EAGLE-3": [0.7, 0.6, 0.5], "EAGLE-3, earlier layout": [0.7, 0.65, 0.6]}
    assert fits_the_column(ch08.depth_figure({"EAGLE-1": [0.6] * 3, "EAGLE-3": [0.7] * 3}, end, evals3, 3))
    bins = [{"confidence": 0.2, "outcome": 0.3}, {"confidence": 0.8, "outcome": 0.9}]
    calib = {(name, kind): bins for name in ("EAGLE-1", "EAGLE-3") for kind in (1.0, 0.0)}
    fig = ch08.calibration_figure(calib, [(1.0, "sampled"), (0.0, "greedy")], lambda t: 0.1)
    assert fits_the_column(fig) and len(fig.axes) == 2


def test_bench_and_cost_figures():
    ratio = {"speclab target-only": 1.0, "speclab eagle": 2.5, "speclab medusa": 1.1}
    spread = {"speclab eagle": (2.0, 3.0), "speclab medusa": (0.9, 1.3)}
    fig = ch08.bench_figure(ratio, spread)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["target-only", "medusa", "eagle"] and fits_the_column(fig)
    widths = [1, 8, 64]
    fig = ch08.verify_cost_figure(widths, {1: 1.0, 8: 1.2, 64: 2.5}, {1: 1.0, 8: 1.0, 64: 1.0})
    assert fits_the_column(fig) and len(fig.axes[0].lines) == 2


def test_tree_runs_table_names_chains_and_trees(capsys):
    class Stats:
        mean_tokens_per_round, drafted, rounds = 3.0, 12, 4

    class Drafter:
        tree, top_k, depth, total_tokens, min_confidence = "dynamic", 2, 6, 12, 0.1

    class Chain:
        tree = "chain"

    ch08.tree_runs_table({"tree": (Drafter(), 6, Stats()), "chain": (Chain(), 4, Stats())})
    out = capsys.readouterr().out.splitlines()
    assert "2, 6, 12" in out[1] and "0.1" in out[1] and "1, 4, 4" in out[2]
    assert all(len(line) <= 100 for line in out)


def test_count():
    import torch
    assert ch08.count(torch.nn.Linear(3, 2)) == 8


def test_the_ablation_figure_draws_the_live_variants_it_is_given():
    ablation = {k: {"log": {"evals": [{"step": 0, "heldout_top1": 0.0}, {"step": 5, "heldout_top1": 0.3}]}}
                for k in ("a", "b", "c")}
    fig = ch08.ablation_figure(ablation, {"a": (None, None, [(0, 0.0), (5, 0.2)])}, {"a": "A", "b": "B", "c": "C"},
                               4, 8)
    assert len(fig.axes[0].lines) == 3 and len(fig.axes[1].lines) == 1
    assert fig.axes[1].lines[0].get_color() == fig.axes[0].lines[0].get_color()


def ablation_record(evals: dict[str, list[float]]) -> dict:
    return {k: {"log": {"evals": [{"step": 100 * i, "heldout_top1": v} for i, v in enumerate([0.0, *top1])]}}
            for k, top1 in evals.items()}


def test_the_ablation_order_of_8_2_is_read_from_the_record_and_fails_when_it_does_not_hold():
    from speclab.course.notebook import read_record
    order = ch08.ablation_order(read_record("08_eagle_inputs"))
    assert order["first"] < order["cross"] and order["feature_first"] > order["token_first"]
    made_up = {"feature+token": [0.4, 0.5, 0.6, 0.7], "feature": [0.3, 0.35, 0.36, 0.37],
               "token": [0.2, 0.3, 0.4, 0.5]}
    assert ch08.ablation_order(ablation_record(made_up)) == {"first": 100, "cross": 300, "feature_first": 0.3,
                                                               "token_first": 0.2}
    for key, evals, says in [("token", [0.31, 0.3, 0.4, 0.5], "ahead of the token alone at first"),
                             ("token", [0.2, 0.3, 0.3, 0.36], "token alone is ahead at the end"),
                             ("feature+token", [0.4, 0.5, 0.6, 0.45], "pair leads"),
                             ("feature", [0.3, 0.31, 0.32, 0.43], "token alone gains more")]:
        with pytest.raises(AssertionError, match=says):
            ch08.ablation_order(ablation_record({**made_up, key: evals}))


def test_the_scaling_table_and_figure_show_every_point_and_only_the_timed_points_speeds():
    def point(n, tokens, top1, timed=True, host="CPU A, 2 CPU threads"):
        p = {"tokens": tokens, "conversations": n,
             "head": {"steps": n, "train_minutes": n / 100, "heldout_top1_by_step": [top1 + 0.05],
                      "heldout_answer_top1_by_step": [top1]},
             "draft": {"steps": 2 * n, "heldout_top1": top1 - 0.25, "heldout_answer_top1": top1 - 0.3}}
        # each line its own values: head 1.x, draft 0.x; eager .1, fast .3; the more tokens, the faster
        speeds = {name: {path: {"speedup": base + tokens / 1e7 + extra, "row": "r", "tokens_per_round": 2.0}
                         for path, extra in (("eager", 0.1), ("fast", 0.3))}
                  for name, base in (("head", 1.0), ("draft", 0.0))}
        return {**p, "speeds": {**speeds, "host": host}} if timed else p
    same = {kind: {"about": "", "points": {  # every point decoded the same prompts; the hand-written ones at two
        str(n): {"head": {"tokens_per_round": 2.0 + i / 2 + extra}, "draft": {"tokens_per_round": 1.8 + i / 2}}
        for i, n in enumerate(points)}} for kind, extra, points in (("everyday forms", 0.0, (1400, 4000, 14000)),
                                                                  ("varied forms", -0.5, (1400, 4000, 14000)),
                                                                  ("hand-written prompts", -0.2, (1400, 4000)))}
    curve = {"points": [point(4000, 1_000_000, 0.6), point(1400, 350_000, 0.5), point(14000, 3_500_000, 0.7, False)],
             "same_prompts": same}
    table = ch08.scaling_table(curve).data  # the points as columns, by tokens; not measured says "-"
    heads = re.findall(r"<th[^>]*>([^<]*)</th>", table)
    assert heads[1:] == ["1,400", "4,000", "14,000"]
    rows = {html.unescape(r[0]): r[1:] for r in (re.findall(r"<td[^>]*>([^<]*)</td>", row)
                                  for row in re.findall(r"<tr>(.*?)</tr>", table)[1:])}
    assert rows["conversations trained on"] == ["1,330", "3,800", "13,300"]  # a twentieth of each held out
    assert rows["tokens in its conversations (requests, held-out too)"] == ["0.35M", "1.00M", "3.50M"]
    assert rows["training steps: draft"] == ["2,800", "8,000", "28,000"]
    assert rows["training minutes: head"] == ["14", "40", "140"] and rows["training minutes: draft"] == ["-"] * 3
    assert rows["first draft right, held-out answers: head"] == ["0.500", "0.600", "0.700"]
    assert rows["tokens a round, everyday forms: head"] == ["2.00", "2.50", "3.00"]  # every point
    assert rows["tokens a round, varied forms: head"] == ["1.50", "2.00", "2.50"]
    assert rows["tokens a round, hand-written prompts: head"] == ["1.80", "2.30", "-"]  # where they were decoded
    assert rows["tokens a round, hand-written prompts: draft"] == ["1.80", "2.30", "-"]
    assert rows["speed on the bench, fast: head"] == [f"{1 + 0.035 + 0.3:.2f}x", f"{1.1 + 0.3:.2f}x", "-"]
    assert rows["speed on the bench, eager: draft"] == [f"{0.035 + 0.1:.2f}x", f"{0.1 + 0.1:.2f}x", "-"]
    assert rows["speeds timed on"] == ["CPU A, 2 CPU threads"] * 2 + ["-"]
    fig = ch08.scaling_figure(curve)
    left, right = fig.axes
    assert fits_the_column(fig) and smallest_font(fig) >= ch08.FONT
    lines = {line.get_label(): line for line in left.lines}
    same = lines["EAGLE-3 head, requests in the everyday forms"]
    assert list(same.get_xdata()) == [0.35, 1.0, 3.5] and list(same.get_ydata()) == [2.0, 2.5, 3.0]
    assert list(lines["EAGLE-3 head, requests in the varied forms"].get_ydata()) == [1.5, 2.0, 2.5]
    bench = lines["draft, hand-written chat prompts"]
    assert list(bench.get_xdata()) == [0.35, 1.0] and list(bench.get_ydata()) == pytest.approx([1.8, 2.3])
    speeds = {line.get_label(): line for line in right.lines if not line.get_label().startswith("_")}
    assert sorted(speeds) == ["EAGLE-3 head, eager", "EAGLE-3 head, fast", "draft, eager", "draft, fast"]
    for label, (base, extra) in {"EAGLE-3 head, eager": (1.0, 0.1), "EAGLE-3 head, fast": (1.0, 0.3),
                                 "draft, eager": (0.0, 0.1), "draft, fast": (0.0, 0.3)}.items():
        assert list(speeds[label].get_xdata()) == [0.35, 1.0]  # the timed points only
        assert list(speeds[label].get_ydata()) == pytest.approx([base + 0.035 + extra, base + 0.1 + extra])
    # a point timed on another machine: no line joins its speeds to the others', and the legend names both hosts
    curve["points"][2] = point(14000, 3_500_000, 0.7, host="Intel(R) Xeon(R) Processor (family 6, model 167), 2 CPU threads")
    right = ch08.scaling_figure(curve).axes[1]
    speeds = {line.get_label(): line for line in right.lines if not line.get_label().startswith("_")}
    assert list(speeds["EAGLE-3 head, eager (CPU A)"].get_xdata()) == [0.35, 1.0]
    assert list(speeds["EAGLE-3 head, eager (Intel Xeon (family 6, model 167))"].get_xdata()) == [3.5]
    assert len(speeds) == 8
    older = {"points": [point(1400, 350_000, 0.5, False)]}  # a curve from before the same requests were decoded
    assert ch08.tokens_a_round(older, older["points"][0])["head", "varied forms"] is None
    assert not ch08.scaling_figure(older).axes[0].lines



def test_gain_interval_pairs_the_prompts_across_points():
    # three prompts; the larger point gains 50% on each, but the prompts differ tenfold in tokens a round
    small = [[10, 10], [60, 20], [100, 10]]
    large = [[15, 10], [90, 20], [150, 10]]
    curve = {"same_prompts": {"hand-written prompts": {"points": {"1": {"head": {"by_prompt": small}},
                                                           "2": {"head": {"by_prompt": large}}}}}}
    gain, lo, hi = ch08.gain_interval(curve, "hand-written prompts", "head", 1, 2)
    assert gain == pytest.approx(0.5) and lo == pytest.approx(0.5) and hi == pytest.approx(0.5)  # paired: no spread
    mixed = {"same_prompts": {"hand-written prompts": {"points": {"1": {"head": {"by_prompt": small}},
                                                           "2": {"head": {"by_prompt": [[15, 10], [60, 20], [100, 10]]}}}}}}
    gain, lo, hi = ch08.gain_interval(mixed, "hand-written prompts", "head", 1, 2)  # one prompt of three gained
    assert gain == pytest.approx(175 / 170 - 1) and 0 <= lo < gain < hi
    assert ch08.gain_interval(mixed, "hand-written prompts", "head", 1, 2) == (gain, lo, hi)  # seeded
    assert all(type(x) is float for x in (gain, lo, hi))  # (glue formats a plain float, not np.float64)


def test_gains_compare_like_with_like_and_their_difference_resamples_each_set_apart():
    # set a: math prompts gained 50%, conversation none; set b: every prompt gained 20%
    a = {"categories": ["math", "conversation"] * 3,
         "points": {"1": {"head": {"by_prompt": [[10, 10]] * 6}},
                    "2": {"head": {"by_prompt": [[15, 10], [10, 10]] * 3}}}}
    b = {"categories": ["math", "code"] * 3,
         "points": {"1": {"head": {"by_prompt": [[10, 10]] * 6}}, "2": {"head": {"by_prompt": [[12, 10]] * 6}}}}
    curve = {"same_prompts": {"a": a, "b": b}}
    assert ch08.gain_interval(curve, "a", "head", 1, 2)[0] == pytest.approx(0.25)
    assert ch08.gain_interval(curve, "a", "head", 1, 2, categories=("math",)) == pytest.approx((0.5, 0.5, 0.5))
    diff, lo, hi = ch08.gain_difference(curve, "a", "b", "head", 1, 2)
    assert diff == pytest.approx(0.05) and lo < 0 < hi  # which of a's prompts a draw takes decides it
    assert ch08.gain_difference(curve, "a", "b", "head", 1, 2, categories=("math",)) == pytest.approx((0.3, 0.3, 0.3))
    with pytest.raises(ValueError, match="hold none in"):
        ch08.gain_interval(curve, "a", "head", 1, 2, categories=("qa",))


def test_rounds_needed_keeps_a_rounds_cost_and_scales_acceptance_to_the_goal():
    point = {"speeds": {"head": {"eager": {"speedup": 1.25, "tokens_per_round": 2.0}}}}
    # a round costs 2.0 / 1.25 = 1.6 target steps; 1.5x needs 2.4 tokens a round, 1.2 times today's
    assert ch08.rounds_needed(point, "head", "eager", 1.5) == pytest.approx((2.4, 1.2))
    assert ch08.rounds_needed(point, "head", "eager", 1.25) == pytest.approx((2.0, 1.0))  # already there


def test_data_for_goals_extends_the_first_to_last_growth_on_log_data():
    def point(n, tokens, tpr, speedup):
        return {"conversations": n, "tokens": tokens,
                "speeds": {"head": {"eager": {"speedup": speedup, "tokens_per_round": tpr}}}}

    def same(by_prompt):  # two categories, two prompts each; the bench times the first of each
        return {"hand-written prompts": {"categories": ["qa", "qa", "math", "math"],
                                         "points": {n: {"head": {"by_prompt": b}} for n, b in by_prompt.items()}}}
    # a round costs 1.6 target steps at both points; 1.5x asks for 2.4 tokens a round, 1.2x the last's 2.0;
    # each 4x of data multiplied tokens a round by 1.25, so 1.2x more needs log 1.2 / log 1.25 steps of 4x
    both = {"1000": [[16, 10], [0, 1], [16, 10], [0, 1]], "4000": [[20, 10], [9, 1], [20, 10], [9, 1]]}
    curve = {"points": [point(4000, 400, 2.0, 1.25), point(1000, 100, 1.6, 1.0)], "same_prompts": same(both)}
    (row,) = ch08.data_for_goals(curve, [("head", "eager", 1.5)], per_category=1)
    assert row["needed"] == pytest.approx(2.4) and row["more"] == pytest.approx(0.2)
    assert row["grew"] == pytest.approx(0.25) and row["round_cost"] == pytest.approx([1.6, 1.6])
    assert row["data_x"] == pytest.approx(4 ** (np.log(1.2) / np.log(1.25)))
    # the timed prompts (the first of each category) gained 25% alike: no spread; the untimed ones are not read
    assert row["grew_interval"] == pytest.approx((0.25, 0.25)) and row["data_x_interval"] == pytest.approx(
        (row["data_x"], row["data_x"]))
    uneven = {"1000": [[16, 10], [0, 1], [16, 10], [0, 1]], "4000": [[24, 10], [0, 1], [16, 10], [0, 1]]}
    row = ch08.data_for_goals({**curve, "same_prompts": same(uneven)}, [("head", "eager", 1.5)], 1)[0]
    lo, hi = row["grew_interval"]
    assert lo == pytest.approx(0) and hi == pytest.approx(0.5)
    flat = {"points": [point(4000, 400, 1.6, 1.0), point(1000, 100, 1.6, 1.0)], "same_prompts": same(uneven)}
    assert ch08.data_for_goals(flat, [("head", "eager", 1.5)], 1)[0]["data_x"] == np.inf  # no growth: never


def test_goal_table_says_never_where_a_line_never_gets_there():
    goal = {"drafter": "draft", "path": "eager", "goal": 1.1, "speedup": 0.96, "tokens_per_round": 1.6,
            "needed": 1.83, "more": 0.14, "round_cost": [1.63, 1.66], "grew": 0.023, "grew_interval": (0.0, 0.046),
            "data_x": 440.3, "data_x_interval": (21.1, np.inf)}
    html = ch08.goal_table([goal, {**goal, "data_x": 2e6}], (1400, 4000), 14).data
    assert "440x (21x to never)" in html and "over 10,000x (21x to never)" in html and "+2% (0% to +5%)" in html


def test_line_check_reads_the_third_point_against_the_line_through_the_first_two():
    def same(by_point):
        return {"varied forms": {"categories": ["qa", "math"],
                                 "points": {n: {"head": {"by_prompt": b}} for n, b in by_point.items()}}}
    points = [{"conversations": n, "tokens": t} for n, t in ((1, 100), (4, 400), (16, 1600))]
    # 1.6 -> 2.0 tokens a round over the first 4x of data; the line says 2.5 after the next 4x
    on_line = {"1": [[16, 10], [16, 10]], "4": [[20, 10], [20, 10]], "16": [[25, 10], [25, 10]]}
    held, lo, hi = ch08.line_check({"points": points, "same_prompts": same(on_line)}, "varied forms", "head",
                                   (1, 4, 16))
    assert held == pytest.approx(1.0) and lo == pytest.approx(1.0) and hi == pytest.approx(1.0)
    # the third point reached 2.2 on one prompt and 2.0 on the other: the curve bends down, and the
    # interval spans the two prompts' own readings
    bent = {**on_line, "16": [[22, 10], [20, 10]]}
    held, lo, hi = ch08.line_check({"points": points, "same_prompts": same(bent)}, "varied forms", "head",
                                   (1, 4, 16))
    assert held == pytest.approx(2.1 / 2.5) and lo == pytest.approx(2.0 / 2.5) and hi == pytest.approx(2.2 / 2.5)
    # a third step half as long (in log data) as the first: the line's prediction is 2.0 * 1.25 ** 0.5
    half = [{"conversations": 16, "tokens": 800} if p["conversations"] == 16 else p for p in points]
    held, _, _ = ch08.line_check({"points": half, "same_prompts": same(on_line)}, "varied forms", "head", (1, 4, 16))
    assert held == pytest.approx(2.5 / (2.0 * 1.25 ** 0.5))
