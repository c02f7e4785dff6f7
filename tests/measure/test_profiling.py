"""Profiling: the roofline arithmetic and the measured costs."""
import pytest
import torch
from transformers import GPT2Config, Qwen3Config

from speclab.measure import profiling
from speclab.runner import ModelRunner
from tests.conftest import tiny_model


def test_kv_bytes_per_token_matches_a_real_cache_and_known_shapes():
    model = tiny_model("qwen3", layers=2)  # 4 query heads, 2 KV heads of head_dim 8
    runner = ModelRunner(model)
    runner.forward(torch.arange(6))
    cached = sum(t.numel() * t.element_size() for layer in runner.cache.layers for t in (layer.keys, layer.values))
    assert profiling.kv_bytes_per_token(model.config, 4) == cached // 6
    qwen3_06b = Qwen3Config(num_hidden_layers=28, hidden_size=1024, num_attention_heads=16, num_key_value_heads=8,
                            head_dim=128)
    assert profiling.kv_bytes_per_token(qwen3_06b, 2) == 114688
    assert profiling.kv_bytes_per_token(GPT2Config(n_layer=12, n_head=12, n_embd=768), 2) == 2 * 12 * 12 * 64 * 2


def test_roofline_arithmetic():
    assert profiling.matmul_intensity(1, 4096, 4096, 2) == pytest.approx(1.0, rel=1e-3)
    assert profiling.matmul_intensity(4096, 4096, 4096, 2) == pytest.approx(4096 / 3)
    assert profiling.attainable_tflops(1.0, 989, 3350) == pytest.approx(3.35)
    assert profiling.attainable_tflops(1000.0, 989, 3350) == 989
    assert profiling.decode_floor_ms(140e9, 0, 3350) == pytest.approx(41.79, abs=0.01)


def test_measured_costs_are_positive_and_bandwidth_is_bytes_over_time(pair):
    target, draft = pair
    assert profiling.forward_ms(target, 4, context=16, repeats=3) > 0
    assert 0 < profiling.cost_ratio(target, draft, context=16, repeats=3)
    assert profiling.decode_bandwidth_gbs(target, 1.0) == pytest.approx(profiling.parameter_bytes(target) / 1e6)


def test_passes_are_timed_interleaved_so_a_slow_stretch_slows_every_pass_alike(pair, monkeypatch):
    """A machine that is 10x slower for the first half of a measurement must not show up as a 10x
    ratio between two passes that cost the same: timing them one after the other would."""
    from contextlib import contextmanager
    calls = []

    @contextmanager
    def fake_timer(device):
        result = {"seconds": 0.0}
        yield result
        calls.append(1)
        result["seconds"] = 0.010 if len(calls) <= 12 else 0.001  # 24 timed calls in all, half slow

    monkeypatch.setattr(profiling, "timer", fake_timer)
    target, _ = pair
    times = profiling.forward_ms_by_positions(target, [1, 5], context=8, repeats=10)
    assert list(times) == [1, 5]
    assert 0.5 < times[5] / times[1] < 2
    calls.clear()
    # tree passes take part the same way: (positions, parents)
    unit, tree = profiling.pass_ms(target, [(1, None), (4, [-1, 0, 0])], context=8, repeats=10)
    assert 0.5 < tree / unit < 2


def test_interleaved_costs_still_see_real_work(pair):
    target, _ = pair
    times = profiling.forward_ms_by_positions(target, [1, 256], context=8, repeats=3)
    assert times[256] > times[1] > 0


def test_a_step_breakdown_splits_the_measured_step(pair):
    target, _ = pair
    parts = profiling.step_breakdown(target, context=16, steps=5)
    assert parts["total"] > 0 and parts["matrix products"] > 0 and parts["attention"] > 0
    assert min(parts.values()) >= 0 and set(parts) == {"total", "matrix products", "attention", "generated kernels",
                                                       "other operators", "framework"}
    assert parts["generated kernels"] == 0  # eager: nothing compiled
    assert profiling.gemv_bandwidth_gbs("cpu", megabytes=8, repeats=2) > 0


def test_a_compiled_step_counts_its_kernels_apart_from_the_python_that_calls_them():
    from speclab.runner import disable_fast_path, enable_fast_path
    model = tiny_model("llama", layers=1)
    enable_fast_path(model, "compiled", max_len=64)
    try:
        parts = profiling.step_breakdown(model, context=8, steps=3)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            profiling.decode_steps(model, context=8, steps=2)()
    finally:
        disable_fast_path(model)
    names = [e.key for e in prof.key_averages()]
    assert any("cpp_fused" in n for n in names)  # each generated kernel reports itself to the profiler
    assert any(n.startswith("## Call CompiledFxGraph") for n in names)  # and so does the Python calling them
    assert parts["generated kernels"] > 0 and parts["framework"] > 0 and parts["matrix products"] == 0


def test_the_bandwidth_by_size_measures_each_size_it_is_given():
    by_size = profiling.gemv_bandwidth_by_size("cpu", sizes_mb=(1, 4), repeats=2)
    assert list(by_size) == [1, 4] and min(by_size.values()) > 0


def test_the_compute_roof_multiplies_matrices_of_the_dtype_it_is_given(monkeypatch):
    made = []
    randn = torch.randn
    monkeypatch.setattr(torch, "randn", lambda *shape, **kw: made.append(kw["dtype"]) or randn(*shape, **kw))
    fast = profiling.matmul_gflops("cpu", n=64, repeats=2, dtype=torch.bfloat16)
    assert made == [torch.bfloat16, torch.bfloat16]
    assert fast > 0 and profiling.matmul_gflops("cpu", n=64, repeats=2) > 0 and made[2:] == [torch.float32] * 2


def test_thread_scaling_times_the_step_and_the_floor_at_each_thread_count_and_restores_the_count(pair, monkeypatch):
    target, _ = pair
    seen = []

    def gemv_gbs(device, megabytes, repeats):  # the thread count each floor was measured at, as its bandwidth
        assert megabytes == max(16, round(profiling.parameter_bytes(target) / 2**20))  # a matrix the weights' size
        seen.append(torch.get_num_threads())
        return 10.0 * torch.get_num_threads()

    monkeypatch.setattr(profiling, "gemv_bandwidth_gbs", gemv_gbs)
    before = torch.get_num_threads()
    scaling = profiling.thread_scaling(target, (1, 2), context=8, steps=3, rounds=2)
    assert seen == [1, 2, 1, 2] and torch.get_num_threads() == before  # interleaved, then restored
    weights = profiling.parameter_bytes(target)
    for n, at in scaling.items():
        assert at["gemv_gbs"] == 10.0 * n and at["floor_ms"] == pytest.approx(weights / (10e9 * n) * 1000)
        assert at["step_over_floor"] == pytest.approx(at["step_ms"] / at["floor_ms"])
    assert scaling[2]["floor_ms"] == pytest.approx(scaling[1]["floor_ms"] / 2) and scaling[1]["step_ms"] > 0


def test_compile_alone_times_transformers_model_and_gives_its_forward_back():
    from speclab.runner import disable_fast_path, enable_fast_path
    model = tiny_model("llama", layers=1)
    assert profiling.compiled_alone_ms(model, context=4, steps=3) > 0
    assert "forward" not in vars(model)  # the class's forward again, uncompiled
    enable_fast_path(model)
    try:
        with pytest.raises(ValueError, match="disable_fast_path"):
            profiling.compiled_alone_ms(model)
    finally:
        disable_fast_path(model)


def test_a_draft_step_is_timed_alone_and_right_after_a_target_pass(pair):
    target, draft = pair
    costs = profiling.draft_step_ms(target, draft, context=8, width=3, repeats=3)
    assert set(costs) == {"alone", "after a target pass"} and min(costs.values()) > 0


def test_costs_alone_times_each_pass_of_the_loop_by_itself(pair):
    target, draft = pair
    costs = profiling.costs_alone(target, draft, context=12, width=4, repeats=2)
    assert list(costs) == ["target step", "verify pass", "draft step", "draft step after a target pass"]
    assert all(ms > 0 for ms in costs.values())


def test_the_last_level_cache_is_the_highest_level_the_system_reports(tmp_path):
    for index, level, size in (("index0", 1, "48K"), ("index2", 2, "2048K"), ("index3", 3, "491520K")):
        (tmp_path / index).mkdir()
        (tmp_path / index / "level").write_text(f"{level}\n")
        (tmp_path / index / "size").write_text(f"{size}\n")
    assert profiling.last_level_cache_mb(str(tmp_path)) == 480.0
    (tmp_path / "index3" / "size").write_text("32M\n")
    assert profiling.last_level_cache_mb(str(tmp_path)) == 32.0
    assert profiling.last_level_cache_mb(str(tmp_path / "missing")) is None
