"""Device placement, dtype and synchronisation: the CUDA paths, exercised on a CPU-only machine."""
from unittest import mock

import pytest
import torch

from speclab import devices


def test_auto_picks_cuda_then_mps_then_cpu():
    with mock.patch("torch.cuda.is_available", return_value=True):
        assert devices.pick_device("auto").type == "cuda"
    with mock.patch("torch.cuda.is_available", return_value=False), \
            mock.patch("torch.backends.mps.is_available", return_value=True):
        assert devices.pick_device(None).type == "mps"
    with mock.patch("torch.cuda.is_available", return_value=False), \
            mock.patch("torch.backends.mps.is_available", return_value=False):
        assert devices.pick_device().type == "cpu"


def test_asking_for_a_missing_gpu_says_so():
    with mock.patch("torch.cuda.is_available", return_value=False):
        with pytest.raises(ValueError, match="CUDA is not available"):
            devices.pick_device("cuda")


def test_default_dtypes():
    assert devices.default_dtype(torch.device("cpu")) == torch.float32
    assert devices.default_dtype(torch.device("cuda"), cuda_bf16=True) == torch.bfloat16
    assert devices.default_dtype(torch.device("cuda"), cuda_bf16=False) == torch.float16  # a T4
    assert devices.default_dtype(torch.device("mps")) == torch.float16


def test_a_gpu_that_only_emulates_bf16_gets_float16(monkeypatch):
    # torch answers True for a T4 unless emulation is excluded: a T4 must get float16, as chapter 0 says
    def t4(including_emulation=True):
        return including_emulation
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", t4)
    assert devices.default_dtype(torch.device("cuda")) == torch.float16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)  # an A100
    assert devices.default_dtype(torch.device("cuda")) == torch.bfloat16


def test_draft_dtype_is_half_on_cpu_and_the_targets_elsewhere():
    assert devices.draft_dtype(torch.device("cpu"), torch.float32) == torch.float16
    assert devices.draft_dtype(torch.device("cuda"), torch.bfloat16) == torch.bfloat16
    assert devices.draft_dtype(torch.device("mps"), torch.float16) == torch.float16


def test_linear_runs_wide_half_products_on_a_cpu_in_float32():
    torch.manual_seed(0)
    weight, bias = torch.randn(48, 32).half(), torch.randn(48).half()
    wide = torch.randn(2, devices.CPU_FLOAT32_ROWS // 2, 32).half()  # rows counted over leading dims
    with mock.patch("torch.nn.functional.linear", wraps=torch.nn.functional.linear) as spy:
        out = devices.linear(wide, weight, bias)
    assert spy.call_args.args[0].dtype == torch.float32 and out.dtype == torch.float16
    expected = torch.nn.functional.linear(wide.float(), weight.float(), bias.float()).half()
    assert torch.equal(out, expected)
    narrow = wide[:1, :devices.CPU_FLOAT32_ROWS - 1]  # a decode step's few rows keep 16 bits
    with mock.patch("torch.nn.functional.linear", wraps=torch.nn.functional.linear) as spy:
        devices.linear(narrow, weight, bias)
    assert spy.call_args.args[0].dtype == torch.float16
    full = torch.randn(devices.CPU_FLOAT32_ROWS, 32)  # float32 as it is
    assert torch.equal(devices.linear(full, weight.float()), torch.nn.functional.linear(full, weight.float()))
    assert devices.wide_half_on_cpu(wide) and not devices.wide_half_on_cpu(narrow)
    on_gpu = mock.Mock(device=torch.device("cuda"), dtype=torch.float16, shape=(64, 32))
    on_gpu.numel.return_value = 64 * 32
    assert not devices.wide_half_on_cpu(on_gpu)  # a GPU's 16-bit GEMM is its fast path


def test_timer_synchronises_the_gpu_before_reading_the_clock():
    with mock.patch("torch.cuda.synchronize") as sync:
        with devices.timer("cuda") as t:
            pass
    assert sync.call_count == 2 and t["seconds"] >= 0
    with mock.patch("torch.cuda.synchronize") as sync:
        with devices.timer("cpu"):
            pass
    sync.assert_not_called()


def test_decode_loop_times_with_device_synchronisation(pair, prompt):
    """The decode loop's timers go through devices.synchronize with the model's device."""
    import speclab
    target, draft = pair
    with mock.patch("speclab.devices.synchronize", wraps=devices.synchronize) as sync:
        result = speclab.speculative_generate(target, draft, prompt, k=2, max_new_tokens=5)
    assert sync.call_count >= 4 and all(str(c.args[0]) == "cpu" for c in sync.call_args_list)
    assert result.stats.device == "cpu"


def test_a_record_names_the_gpu_it_ran_on_and_none_on_a_cpu():
    assert devices.gpu_name("cpu") is None
    with mock.patch("torch.cuda.get_device_name", return_value="NVIDIA H200") as name:
        assert devices.gpu_name(torch.device("cuda")) == "NVIDIA H200"
    name.assert_called_once()


def test_a_cpu_that_hides_its_model_number_is_named_with_its_family_and_model():
    from speclab.devices import cpu_from_cpuinfo
    hidden = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\n"
    assert cpu_from_cpuinfo(hidden + "\nprocessor\t: 1\n") == "AMD EPYC (family 26, model 2)"
    named = "cpu family\t: 6\nmodel\t\t: 85\nmodel name\t: Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz\n"
    assert cpu_from_cpuinfo(named) == "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz"
    with pytest.raises(KeyError):
        cpu_from_cpuinfo("processor\t: 0\n")
