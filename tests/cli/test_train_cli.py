"""`python -m speclab train`'s scaling options: --conversations keeps the preset's steps per conversation."""
from __future__ import annotations

import pytest

from speclab.cli.train import build_parser
from speclab.train.data import scaled_steps
from speclab.train.eagle import EAGLE_PRESETS
from speclab.train.shared_draft import PRESETS as SHARED_PRESETS


def test_more_conversations_train_proportionally_more_steps():
    everyday = EAGLE_PRESETS["smollm2-everyday"]  # 1,400 conversations, 1,500 EAGLE-3 steps
    assert scaled_steps(everyday, None, None, everyday.eagle3_steps) is None  # the preset's own
    assert scaled_steps(everyday, everyday.conversations, None, everyday.eagle3_steps) == everyday.eagle3_steps
    assert scaled_steps(everyday, 4 * everyday.conversations, None, everyday.eagle3_steps) == 4 * everyday.eagle3_steps
    assert scaled_steps(everyday, 14000, 123, everyday.eagle3_steps) == 123  # --steps wins
    draft = SHARED_PRESETS["smollm2-everyday"]
    assert scaled_steps(draft, 2 * draft.conversations, None, draft.steps) == 2 * draft.steps


def test_conversations_on_a_code_preset_is_refused_with_the_presets_that_take_it():
    with pytest.raises(ValueError, match="chat preset"):
        scaled_steps(EAGLE_PRESETS["stdlib"], 1000, None, EAGLE_PRESETS["stdlib"].eagle3_steps)
    with pytest.raises(ValueError, match="at least 1"):
        scaled_steps(EAGLE_PRESETS["smollm2"], 0, None, 100)


@pytest.mark.parametrize("command", ["eagle", "eagle3", "mtp", "shared-draft"])
def test_every_head_command_takes_conversations(command):
    args = build_parser().parse_args([command, "--target", "smollm2", "--out", "x", "--conversations", "4000"])
    assert args.conversations == 4000
