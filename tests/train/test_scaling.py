"""train scale: the points of a data-scaling curve are the first N conversations of one stream, frozen, each
trained with the same steps per conversation, summed up in curve.json."""
import json

import pytest
import torch

from speclab.cli.train import main as train_main
from speclab.train.scaling import bench_argv, freeze_point, point_speeds
from tests.test_packaged import cached_smollm2  # noqa: F401 (the fixture)
from tests.train.test_chat_data import small_library  # noqa: F401 (the fixture)


@pytest.mark.usefixtures("small_library")
def test_points_are_nested_frozen_and_trained_at_the_same_steps_per_conversation(cached_smollm2, tmp_path, capsys):
    stream = tmp_path / "stream"  # 8 conversations the stand-in target answered (the micro-chat preset's)
    train_main(["shared-draft", "--target", "smollm2", "--out", str(stream), "--preset", "micro-chat",
                "--device", "cpu", "--steps", "1"])
    whole = torch.load(stream / "chat_conversations.pt")["conversations"]
    train_main(["scale", "--target", "smollm2", "--stream", str(stream), "--points", "4,8,16",
                "--preset", "micro-chat", "--device", "cpu"])
    assert "holds 8 conversations, not 16" in capsys.readouterr().out  # said aloud, not trained
    curve = json.loads((stream / "curve.json").read_text())
    assert [p["conversations"] for p in curve["points"]] == [4, 8] and curve["target"] == "smollm2"
    for point in curve["points"]:
        n = point["conversations"]
        kept = torch.load(stream / f"c{n}" / "chat_conversations.pt")["conversations"]
        assert len(kept) == n and all(torch.equal(a, b) for a, b in zip(kept, whole))  # the stream's first n
        assert point["head"]["steps"] == n // 2 and point["draft"]["steps"] == n // 2  # micro-chat: 4 steps / 8
        assert len(point["head"]["heldout_top1_by_step"]) >= 1 and 0 <= point["draft"]["heldout_top1"] <= 1
        assert f"--eagle3 {stream / f'c{n}' / 'eagle3'}" in point["bench"]
    assert curve["points"][0]["tokens"] < curve["points"][1]["tokens"]


def test_a_point_past_the_stream_names_the_command_that_answers_more(tmp_path):
    torch.save({"conversations": [torch.ones(3, dtype=torch.int32)] * 2, "seconds": 1.0, "requests": "everyday"},
               tmp_path / "chat_conversations.pt")
    with pytest.raises(ValueError, match="train answers --out .* --conversations 5"):
        freeze_point(tmp_path, 5)
    assert len(torch.load(freeze_point(tmp_path, 1) / "chat_conversations.pt")["conversations"]) == 1


def bench_row(method: str, tokens_per_s: float, tokens_per_round: float = 1.0, exact=True) -> dict:
    return {"method": method, "tokens_per_s": tokens_per_s, "matches_target_only": exact,
            "stats": {"mean_tokens_per_round": tokens_per_round}}


def test_a_points_speeds_are_each_drafters_fastest_row_over_target_only_on_the_same_path():
    rows = [bench_row("speclab target-only", 10, exact=None), bench_row("speclab draft_model", 12, 2.0),
            bench_row("speclab draft_model K=1", 13, 1.5), bench_row("speclab draft_model K=2", 11, 2.2),
            bench_row("speclab eagle3", 15, 2.5), bench_row("speclab eagle3 chain", 16, 2.4),
            bench_row("speclab target-only (fast)", 20, exact=None),
            bench_row("speclab draft_model K=1 (fast)", 25, 1.5),
            bench_row("speclab eagle3 (fast)", 30, 2.6), bench_row("speclab eagle3 chain (fast)", 24, 2.4)]
    speeds = point_speeds({"workloads": [{"rows": rows}]})
    assert speeds["exact"] is True
    assert speeds["draft"] == {"eager": {"row": "speclab draft_model K=1", "speedup": 1.3, "tokens_per_round": 1.5},
                               "fast": {"row": "speclab draft_model K=1", "speedup": 1.25, "tokens_per_round": 1.5}}
    assert speeds["head"]["eager"]["row"] == "speclab eagle3 chain" and speeds["head"]["eager"]["speedup"] == 1.6
    assert speeds["head"]["fast"] == {"row": "speclab eagle3", "speedup": 1.5, "tokens_per_round": 2.6}
    rows[4]["matches_target_only"] = False  # one row that decoded other tokens: the point is not exact
    assert point_speeds({"workloads": [{"rows": rows}]})["exact"] is False


def test_a_points_bench_command_is_one_the_bench_parses(tmp_path):
    from speclab.cli.bench import build_parser
    argv = bench_argv(tmp_path / "c1400")
    assert argv[0] == "bench"
    args = build_parser().parse_args(argv[1:])
    assert args.json == str(tmp_path / "c1400" / "bench.json") and args.fast == "static"
    assert args.draft == str(tmp_path / "c1400" / "draft")
