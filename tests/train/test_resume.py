"""Stopping and resuming: a run stopped early (by its deadline, after N steps, or by Ctrl-C) and run again
ends with exactly the weights and log of a run that was never stopped: the shared training loop, Medusa
heads, and exit adapters (one run of the loop per layer); the target's features, part by part."""
import shutil
import time

import pytest
import torch
import torch.nn.functional as F

from speclab.models import BUNDLED_DIR
from speclab.train import data
from speclab.train.loop import lr_at, train_loop
from speclab.train.exit import train_exit
from speclab.train.medusa import MEDUSA_PRESETS, train_medusa
from tests.conftest import tiny_model

STEPS = 6


def run(out, stop_after_steps=None, deadline=None, interrupt_at=None, seed=0):
    """A tiny Llama trained STEPS steps by train_loop on random rows drawn by (seed, step), checkpointed in
    out/tiny.ckpt; `interrupt_at`: the step at which Ctrl-C arrives. Returns the model and the log."""
    torch.manual_seed(seed)
    model = tiny_model("llama", layers=1, seed=seed).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    schedule = MEDUSA_PRESETS["micro"]  # lr and warmup

    def step_fn(step):
        if step == interrupt_at:
            raise KeyboardInterrupt
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        rows = torch.randint(0, 96, (2, 9), generator=g)
        loss = F.cross_entropy(model(rows[:, :-1]).logits.flatten(0, 1), rows[:, 1:].flatten())
        return loss, [round(loss.item(), 4)]

    def evaluate(step, loss):
        return {"step": step, "norm": float(sum(p.detach().norm() for p in model.parameters()))}, "evaluated"

    log = train_loop("tiny", model, opt, STEPS, step_fn, ckpt_file=out / "tiny.ckpt", key="model",
                     log={"evals": [], "seconds": 0.0}, schedule=schedule, device=torch.device("cpu"),
                     evaluate=evaluate, eval_every=2, evaluate_first=True, clip=1.0, deadline=deadline,
                     stop_after_steps=stop_after_steps, save_every_s=0)
    return model, log


def same_run(a, b):
    (model_a, log_a), (model_b, log_b) = a, b
    state_a, state_b = model_a.state_dict(), model_b.state_dict()
    assert state_a.keys() == state_b.keys() and all(torch.equal(state_a[k], state_b[k]) for k in state_a)
    assert log_a["evals"] == log_b["evals"] and log_a["train"] == log_b["train"]


@pytest.mark.parametrize("stop", ["steps", "deadline", "ctrl-c"])
def test_the_loop_resumed_ends_where_an_unstopped_run_does(tmp_path, stop):
    (tmp_path / "whole").mkdir()
    whole = run(tmp_path / "whole")
    out = tmp_path / stop
    out.mkdir()
    first = {"steps": dict(stop_after_steps=2), "deadline": dict(deadline=time.time() - 1),
             "ctrl-c": dict(interrupt_at=3)}[stop]
    with pytest.raises(SystemExit, match=r"tiny: stopped at step \d/6; run the same command again to resume"):
        run(out, **first)
    saved = torch.load(out / "tiny.ckpt")
    assert saved["step"] == {"steps": 2, "deadline": 0, "ctrl-c": 3}[stop]
    assert set(saved) == {"model", "opt", "step", "log"}
    if stop == "steps":  # stopped twice on the way
        with pytest.raises(SystemExit, match="stopped at step 4/6"):
            run(out, stop_after_steps=2)
    same_run(run(out), whole)
    same_run(run(out), whole)  # a finished run run again changes nothing


def test_lr_at_warms_up_then_decays_to_a_tenth():
    p = MEDUSA_PRESETS["stdlib"]
    assert lr_at(0, p, 800) == pytest.approx(p.lr / p.warmup)
    assert lr_at(p.warmup - 1, p, 800) == pytest.approx(p.lr)
    assert lr_at(800, p, 800) == pytest.approx(p.lr / 10)


def test_medusa_stopped_and_resumed_trains_the_same_heads(tmp_path):
    """train_medusa (micro, on the bundled target) stopped after 2 steps, then after 2 more, then run to
    the end, writes the heads and log of a run never stopped."""
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    target = BUNDLED_DIR / "target"
    record = train_medusa(target, whole, preset="micro", device="cpu")
    parts.mkdir()
    for cached in ("data.pt", "generated.pt", "features.pt"):  # the same features, not computed twice
        shutil.copy(whole / cached, parts / cached)
    for _ in range(2):
        with pytest.raises(SystemExit, match="stopped at step"):
            train_medusa(target, parts, preset="micro", device="cpu", stop_after_steps=2)
    resumed = train_medusa(target, parts, preset="micro", device="cpu")
    assert resumed["log"]["evals"] == record["log"]["evals"] and resumed["log"]["train"] == record["log"]["train"]
    assert resumed["accuracy"] == record["accuracy"]
    heads_a = torch.load(whole / "medusa.ckpt")["heads"]
    heads_b = torch.load(parts / "medusa.ckpt")["heads"]
    assert all(torch.equal(heads_a[k], heads_b[k]) for k in heads_a)


def test_exit_adapters_stopped_mid_layer_resume_that_layer(tmp_path):
    """train_exit keeps finished layers in exit.ckpt and the layer in training in a checkpoint of its own,
    removed once the layer is done: stopped mid-layer and resumed, it writes the adapters of a run never
    stopped."""
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    target = BUNDLED_DIR / "target"
    record = train_exit(target, whole, [3], preset="micro", device="cpu")
    parts.mkdir()
    for cached in ("data.pt", "generated.pt", "features.pt", "features_exit.pt"):
        shutil.copy(whole / cached, parts / cached)
    with pytest.raises(SystemExit, match="stopped at step 2/6"):
        train_exit(target, parts, [3], preset="micro", device="cpu", stop_after_steps=2)
    assert (parts / "exit-3.ckpt").exists() and not (parts / "exit.ckpt").exists()
    resumed = train_exit(target, parts, [3], preset="micro", device="cpu")
    assert not (parts / "exit-3.ckpt").exists()
    strip = {k: v for k, v in record["layers"]["3"].items() if k != "seconds"}
    assert {k: v for k, v in resumed["layers"]["3"].items() if k != "seconds"} == strip
    a, b = torch.load(whole / "exit.ckpt")["adapters"][3], torch.load(parts / "exit.ckpt")["adapters"][3]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_parallel_draft_stopped_and_resumed_trains_the_same_draft(tmp_path):
    """train_parallel_draft (micro, on the bundled target and draft) stopped after 2 steps and run again ends
    with the draft and log of a run never stopped; what it writes loads as a parallel drafter."""
    from speclab import load_drafter, load_pair
    from speclab.train.parallel_draft import train_parallel_draft
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    target = BUNDLED_DIR / "target"
    record = train_parallel_draft(target, whole, preset="micro", device="cpu")
    parts.mkdir()
    for cached in ("data.pt", "generated.pt", "features.pt"):
        shutil.copy(whole / cached, parts / cached)
    with pytest.raises(SystemExit, match="stopped at step"):
        train_parallel_draft(target, parts, preset="micro", device="cpu", stop_after_steps=2)
    resumed = train_parallel_draft(target, parts, preset="micro", device="cpu")
    assert resumed["log"]["evals"] == record["log"]["evals"] and resumed["log"]["train"] == record["log"]["train"]
    a, b = torch.load(whole / "pard.ckpt")["draft"], torch.load(parts / "pard.ckpt")["draft"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    drafter = load_drafter("pard", load_pair(device="cpu").target, model=whole / "pard")
    assert drafter.mask == record["mask_token_id"] == 4096 and len(record["log"]["evals"][-1]["heldout_top1_by_depth"]) == 3


def test_the_targets_features_resume_at_the_first_missing_part(tmp_path, monkeypatch):
    target = tiny_model("llama", layers=2, seed=0)
    rows = torch.randint(0, 96, (5, 8), generator=torch.Generator().manual_seed(0))
    expected_next: list = []
    expected = data.target_features(target, rows, torch.device("cpu"), layers=(0, 1, -1), greedy=expected_next)
    width = expected.shape[-1] // 3
    parts = tmp_path / "parts"
    (fused, last), greedy = data.resumable_features(target, rows, torch.device("cpu"), [[0, 1], [-1]], parts,
                                                    part_rows=2)
    assert torch.equal(fused, expected[..., :2 * width]) and torch.equal(last, expected[..., 2 * width:])
    assert torch.equal(greedy, torch.cat(expected_next))
    assert sorted(p.name for p in parts.iterdir()) == ["rows0000000-2.pt", "rows0000002-2.pt", "rows0000004-1.pt"]

    (parts / "rows0000004-1.pt").unlink()  # a run that ended before its last part
    with pytest.raises(SystemExit, match="target's features: stopped at row 4/5"):
        data.resumable_features(target, rows, torch.device("cpu"), [[0, 1], [-1]], parts, time.time() - 1,
                                part_rows=2)
    computed = []
    real = data.target_features
    monkeypatch.setattr(data, "target_features", lambda *a, **k: computed.append(len(a[1])) or real(*a, **k))
    (fused, last), _ = data.resumable_features(target, rows, torch.device("cpu"), [[0, 1], [-1]], parts,
                                               part_rows=2)
    assert computed == [1] and torch.equal(last, expected[..., 2 * width:])  # saved parts read, not recomputed
    other = rows.clone()
    other[0, 0] = (other[0, 0] + 1) % 96  # a part saved from other rows is computed again
    data.resumable_features(target, other, torch.device("cpu"), [[0, 1], [-1]], parts, part_rows=2)
    assert computed == [1, 2]
    data.resumable_features(target, other, torch.device("cpu"), [[-1]], parts, part_rows=2)  # and other layers
    assert computed == [1, 2, 2, 2, 1]


def test_features_gathered_into_mapped_files_equal_those_gathered_in_memory(tmp_path):
    target = tiny_model("llama", layers=2, seed=0)
    rows = torch.randint(0, 96, (5, 8), generator=torch.Generator().manual_seed(0))
    in_memory, greedy = data.resumable_features(target, rows, torch.device("cpu"), [[0, 1], [-1]], tmp_path / "a",
                                                part_rows=2)
    mapped, mapped_greedy = data.resumable_features(target, rows, torch.device("cpu"), [[0, 1], [-1]],
                                                    tmp_path / "b", part_rows=2, backing=tmp_path / "gather")
    assert all(torch.equal(a, b) for a, b in zip(in_memory, mapped)) and torch.equal(greedy, mapped_greedy)
    # each group's tensor is its file: float16, two bytes a feature, written through
    sizes = [(tmp_path / "gather" / f"gather{i}.f16").stat().st_size for i in range(2)]
    assert sizes == [t.numel() * 2 for t in mapped]
    on_disk = torch.from_file(str(tmp_path / "gather" / "gather1.f16"), size=mapped[1].numel(), dtype=torch.float16)
    assert torch.equal(on_disk.view(mapped[1].shape), in_memory[1])
