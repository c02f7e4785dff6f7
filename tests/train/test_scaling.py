"""train scale: the points of a data-scaling curve are the first N conversations of one stream, frozen, each
trained with the same steps per conversation, summed up in curve.json."""
import json

import pytest
import torch

from speclab.cli.train import main as train_main
from speclab.train.scaling import freeze_point
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
