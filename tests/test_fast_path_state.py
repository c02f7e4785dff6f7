"""The fast path's state lives on its model (no module-level table), and its compiler settings hold
during its compiled calls only: importing speclab and enabling a fast path leave torch's dynamo config
as it was."""
import copy
import subprocess
import sys

import torch
import torch._dynamo

from speclab.models import tiny_model
from speclab.runner import (COMPILED_GRAPHS, ModelRunner, StaticRunner, compile_for_fast_path, disable_fast_path,
                            enable_fast_path, fast_path_of, fast_paths, runner_for)

SETTINGS = ("recompile_limit", "fail_on_recompile_limit_hit")


def dynamo_settings():
    return {name: getattr(torch._dynamo.config, name) for name in SETTINGS}


def test_importing_speclab_and_enabling_a_compiled_fast_path_leave_the_dynamo_config_alone():
    """In a fresh process: the whole dynamo config before importing speclab equals the one after
    importing it and enabling the compiled fast path on a model."""
    script = ("import torch, torch._dynamo\n"
              "before = torch._dynamo.config.get_config_copy()\n"
              "import speclab\n"
              "from speclab.models import tiny_model\n"
              "from speclab.runner import enable_fast_path\n"
              "enable_fast_path(tiny_model('llama', layers=1), 'compiled', max_len=32)\n"
              "after = torch._dynamo.config.get_config_copy()\n"
              "changed = sorted(k for k in before if before[k] != after.get(k))\n"
              "assert not changed, changed\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_compiled_calls_run_under_the_fast_paths_settings_and_restore_them(monkeypatch):
    """compile_for_fast_path's calls see COMPILED_GRAPHS and a hard failure past it; before and after
    a call the settings are the process's own (torch.compile stubbed: no compilation here)."""
    seen = []

    def fake_compile(fn, **options):
        return lambda *args: seen.append(dynamo_settings()) or fn(*args)

    monkeypatch.setattr(torch, "compile", fake_compile)
    before = dynamo_settings()
    call = compile_for_fast_path(lambda x: x + 1)
    assert call(1) == 2
    assert seen == [{"recompile_limit": max(before["recompile_limit"], COMPILED_GRAPHS),
                     "fail_on_recompile_limit_hit": True}]
    assert dynamo_settings() == before


def test_a_models_fast_path_is_held_by_the_model():
    """enable_fast_path puts the FastPath on its model, disable_fast_path takes it off; two models are
    independent, fast_paths() sets and restores, and a copy of a model runs on the eager path."""
    a, b = tiny_model("llama", layers=1, seed=0), tiny_model("llama", layers=1, seed=1)
    path = enable_fast_path(a, max_len=16)
    try:
        assert fast_path_of(a) is path and fast_path_of(b) is None
        assert isinstance(runner_for(a), StaticRunner) and isinstance(runner_for(b), ModelRunner)
        assert fast_path_of(copy.deepcopy(a)) is None
        with fast_paths({b: path, a: None}):
            assert fast_path_of(b) is path and fast_path_of(a) is None
        assert fast_path_of(a) is path and fast_path_of(b) is None
    finally:
        disable_fast_path(a)
    assert fast_path_of(a) is None and isinstance(runner_for(a), ModelRunner)
