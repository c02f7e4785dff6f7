"""speclab.train.loop: the training steps' precision (step_precision), compiled losses (loss_function) and whole saves
(save_whole)."""
from pathlib import Path

import shutil

import pytest
import torch

from speclab.methods.eagle import EagleHead
from speclab.train.eagle import eagle3_loss, soft_cross_entropy
from speclab.train.data import target_features
from speclab.train.loop import loss_function, precision_name, save_whole, step_precision
from tests.conftest import tiny_model

BF16_UNITS = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


@pytest.mark.skipif(not BF16_UNITS, reason="this CPU has no bf16 units: step_precision refuses bf16 here")
def test_a_bf16_eagle3_step_is_near_float32s_and_training_under_it_lowers_every_step_loss():
    target = tiny_model("llama", layers=4, seed=0).requires_grad_(False)
    rows = torch.randint(0, 96, (8, 24), generator=torch.Generator().manual_seed(0))
    final = target_features(target, rows, torch.device("cpu")).float()
    torch.manual_seed(0)
    head = EagleHead.for_target(target, version=3)
    layered = target_features(target, rows, torch.device("cpu"), layers=head.feature_layers).float()
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    exact, _ = eagle3_loss(head, embed, lm_head, rows, layered, final, steps=3)
    with step_precision(True, torch.device("cpu")):
        halved, _ = eagle3_loss(head, embed, lm_head, rows, layered, final, steps=3)
    # the products in bfloat16 (8 bits of mantissa), the loss in float32
    assert halved.dtype == torch.float32 and halved.item() != exact.item()
    assert abs(halved.item() - exact.item()) < 0.02 * exact.item()
    opt = torch.optim.AdamW(head.parameters(), lr=3e-3)
    history = []
    for _ in range(30):
        with step_precision(True, torch.device("cpu")):
            loss, per_step = eagle3_loss(head, embed, lm_head, rows, layered, final, steps=3)
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(per_step)
    assert all(p.dtype == torch.float32 for p in head.parameters())  # the weights stay float32
    assert all(last < first for first, last in zip(history[0], history[-1]))


def test_bf16_on_a_cpu_without_bf16_units_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    with pytest.raises(ValueError, match="emulated.*bf16=False, or None"):
        step_precision(True, torch.device("cpu"))
    with step_precision(False, torch.device("cpu")):  # float32 is always there
        assert not torch.is_autocast_enabled("cpu")
    assert precision_name(step_precision(None, torch.device("cpu"))) == "float32"  # by device: float32 here


def test_bf16_by_device_follows_the_units():
    chosen = step_precision(None, torch.device("cpu"))
    assert chosen._enabled == BF16_UNITS
    assert precision_name(chosen) == ("bfloat16 autocast" if BF16_UNITS else "float32")


def textbook_soft_ce(logits, teacher_logits, mask):
    """-sum(p_teacher * log_softmax(logits)), masked mean: the form soft_cross_entropy rewrites."""
    ce = -(torch.softmax(teacher_logits, -1) * torch.log_softmax(logits, -1)).sum(-1)
    return (ce * mask).sum() / mask.sum()


def soft_ce_inputs():
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(2, 7, 50, generator=g) * 3).requires_grad_()
    teacher = torch.randn(2, 7, 50, generator=g) * 3
    mask = (torch.rand(2, 7, generator=g) > 0.3).float()
    return logits, teacher, mask


@pytest.mark.parametrize("compiled", [False, True])
def test_the_soft_cross_entropy_and_its_compiled_fusion_are_the_textbook_loss_and_gradient(compiled):
    if compiled and not (shutil.which("g++") or shutil.which("clang++")):
        pytest.skip("torch.compile on a CPU needs a C++ compiler")
    ce = loss_function(soft_cross_entropy, compiled, torch.device("cpu"))
    assert (ce is soft_cross_entropy) != compiled
    logits, teacher, mask = soft_ce_inputs()
    want = textbook_soft_ce(logits, teacher, mask)
    (want_grad,) = torch.autograd.grad(want, logits)
    got = ce(logits, teacher, mask)
    (got_grad,) = torch.autograd.grad(got, logits)
    assert torch.allclose(got, want, rtol=1e-5) and torch.allclose(got_grad, want_grad, atol=1e-7)


def test_a_loss_is_left_eager_where_no_compiler_is_found(monkeypatch, capsys):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert loss_function(soft_cross_entropy, True, torch.device("cpu")) is soft_cross_entropy
    assert "no C++ compiler" in capsys.readouterr().out
    assert loss_function(soft_cross_entropy, True, torch.device("mps")) is soft_cross_entropy
    monkeypatch.setattr("torch.utils._triton.has_triton", lambda: False)
    assert loss_function(soft_cross_entropy, True, torch.device("cuda")) is soft_cross_entropy
    assert "no Triton" in capsys.readouterr().out


def test_a_save_killed_mid_write_leaves_the_last_whole_file(tmp_path, monkeypatch):
    path = tmp_path / "chat_conversations.pt"
    save_whole({"conversations": [torch.arange(5)]}, path)
    real_save = torch.save

    def torn(obj, target):  # writes part of the archive, then the process "dies"
        real_save(obj, target)
        Path(target).write_bytes(Path(target).read_bytes()[:100])
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", torn)
    with pytest.raises(KeyboardInterrupt):
        save_whole({"conversations": [torch.arange(5), torch.arange(7)]}, path)
    monkeypatch.setattr(torch, "save", real_save)
    assert len(torch.load(path)["conversations"]) == 1  # the old file, whole
    save_whole({"conversations": [torch.arange(5), torch.arange(7)]}, path)
    assert len(torch.load(path)["conversations"]) == 2
    assert [f.name for f in tmp_path.iterdir()] == [path.name]  # no partial file left beside it
