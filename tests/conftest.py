"""Tiny randomly initialised models, built offline from transformers configs; one torch thread per test
worker."""
from __future__ import annotations

import os

# The suite runs on every core with pytest-xdist (pyproject.toml's addopts: one worker per core). Each worker,
# and each notebook kernel it starts (kernels inherit its environment), then gets one thread: two workers of two
# threads each on two cores would contend. Set before torch is imported, so its OpenMP pool is one thread too.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)

from speclab import models

# Where the models these fixtures build live: the CPU, unless SPECLAB_TEST_DEVICE names another device. On a
# GPU machine, `SPECLAB_TEST_DEVICE=cuda python -m pytest -o addopts="" tests/test_runner.py ...` runs the
# device-agnostic tests there (.ci/gpu-check: the fast path's CUDA graphs).
DEVICE = torch.device(os.environ.get("SPECLAB_TEST_DEVICE", "cpu"))
# How close a cache written pass by pass must come to a fresh forward's. On a CPU the sums agree to float32's
# last digits; on a GPU a pass's kernels depend on its width (a 5-row verify pass and a 34-row prefill add in
# different orders), which moved one key by 2.9e-5 on an H200 (2026-11-30). A stale or misplaced row is off by
# about a key's own size (entries near 2.4 in these models, neighbouring rows 3 apart).
CACHE_TOLERANCE = dict(atol=1e-5, rtol=1e-4) if DEVICE.type == "cpu" else dict(atol=1e-4, rtol=1e-3)


def tiny_model(arch: str = "llama", layers: int = 2, vocab: int = 96, seed: int = 0, **kwargs) -> torch.nn.Module:
    """speclab's tiny random model with the tests' defaults: 96 ids, EOS id 1, on DEVICE."""
    return models.tiny_model(arch, layers=layers, vocab=vocab, seed=seed, eos_token_id=1, **kwargs).to(DEVICE)


@pytest.fixture(scope="session")
def pair():
    """A Llama target and a smaller Llama draft that share a vocabulary of 96 ids."""
    return tiny_model("llama", layers=2, seed=0), tiny_model("llama", layers=1, seed=1)


@pytest.fixture()
def prompt():
    return torch.tensor([5, 17, 42, 8, 23, 61, 7, 30])


# The files whose tests take longest, longest first (each runs on one worker: --dist loadfile). pytest-xdist
# hands out files in collection order (pyproject.toml's addopts turn off its own reordering by test count), so
# these start first and no long file is handed out last, to one worker while the other has nothing left.
# The rest follow, most tests first (xdist's own order). What each of these spends its time on: the grader's
# fixtures (kernels for every solved lab, the attack and fenced submissions), torch.compile's graphs on a CPU
# (cold inductor cache: minutes), the book build, 1250-sample chi-square checks.
SLOWEST_FILES = ["tests/course/test_labs.py", "tests/course/test_grading.py", "tests/test_batched_decoding.py",
                 "tests/test_runner.py", "tests/methods/test_layer_step.py", "tests/course/test_book.py",
                 "tests/test_lossless.py"]


def pytest_collection_modifyitems(config, items):
    counts: dict[str, int] = {}
    for item in items:
        counts[item.nodeid.split("::")[0]] = counts.get(item.nodeid.split("::")[0], 0) + 1

    def rank(item):
        path = item.nodeid.split("::")[0]
        first = SLOWEST_FILES.index(path) if path in SLOWEST_FILES else len(SLOWEST_FILES)
        return first, -counts[path], path

    items[:] = sorted(items, key=rank)  # stable: a file's tests keep their order
