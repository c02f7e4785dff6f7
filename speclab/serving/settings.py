"""One source for engine settings: a speclab method and its options written the way vLLM
(speculative_config), SGLang (launch_server flags), TensorRT-LLM (the LLM API's decoding config),
llama.cpp (llama-server flags) and transformers (generate() arguments) take them; chapter 12's table is
printed from here. Where an engine cannot express what was asked (a dynamic tree in vLLM, a K schedule in
transformers, a K above the cap an engine clamps to), engine_settings raises Unsupported with the reason:
a setting dropped silently would be another method measured as if it were the same.

Sources: vLLM 0.32 vllm/config/speculative.py (checked against the installed SpeculativeConfig in
tests/serving); SGLang docs/advanced_features/speculative_decoding.md @ 067ad4d3; TensorRT-LLM
docs/source/features/speculative-decoding.md @ 04c8822c, tensorrt_llm/llmapi/llm_args.py @ fcd3f316 (the
Medusa and lookahead configs) and pull requests #10860 (draft_len_schedule) and #12341 (MTP's max_draft_len);
llama.cpp docs/speculative.md (the --spec-* flags); transformers generation/configuration_utils.py @
008f5c8c.
"""
from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from speclab.methods import REGISTRY
from speclab.methods.engines import ENGINES, Options, Unsupported, no, tree_is


# TensorRT-LLM decoding types its default PyTorch backend does not take (docs/source/features/
# speculative-decoding.md @ 04c8822c lists MTP, Eagle3, NGram, DraftTarget, PARD, DFlash, SA): their configs
# declare the TensorRT engine backend alone (llm_args.py @ fcd3f316, supports_backend)
ENGINE_BACKEND_ONLY = ("Medusa", "Lookahead")


def writers() -> dict:
    """Every registered method that engines serve -> its writer (Method.engine_settings, in its own
    module), read from the registry when asked, so a method registered later is served too."""
    return {m.name: m.engine_settings for m in REGISTRY.values() if m.engine_settings}


@dataclass(frozen=True)
class EngineSettings:
    engine: str
    method: str
    settings: dict

    def text(self) -> str:
        """The settings as one pastes them into that engine: JSON for vLLM's speculative_config, a command
        line's flags for SGLang and llama.cpp, the speculative_config line of the YAML file trtllm-serve
        reads (--extra_llm_api_options; a comment line above it where only the TensorRT engine backend takes
        it), and generate()'s keyword arguments for transformers, the draft loaded (generate() takes a
        model, not a path)."""
        if self.engine == "vllm":
            return json.dumps(self.settings)
        if self.engine in ("sglang", "llama.cpp"):
            return " ".join(f"{flag} {value}" for flag, value in self.settings.items())
        if self.engine == "tensorrt-llm":
            line = f"speculative_config: {_yaml_flow(self.settings)}"
            if self.settings.get("decoding_type") in ENGINE_BACKEND_ONLY:  # said in the file, as a YAML comment
                line = f"# trtllm-serve --backend tensorrt only\n{line}"
            return line
        return ", ".join(f"{key}=AutoModelForCausalLM.from_pretrained({value!r})" if key == "assistant_model"
                         else f"{key}={value!r}" for key, value in self.settings.items())


def _yaml_flow(value) -> str:
    """`value` (a settings dict's: str, number, bool, dict, list) in YAML's one-line flow style."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_yaml_flow(k)}: {_yaml_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml_flow(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and not re.fullmatch(r"[\w./-]+", value):
        return json.dumps(value)  # quoted where YAML could misread it (spaces, colons, brackets)
    return str(value)


def engine_settings(method: str, engine: str, options: Options | None = None, **changes) -> EngineSettings:
    """`method` (speclab's registry name, which is vLLM's) with `options` (or Options(**changes)) as
    `engine` takes it. Raises Unsupported where the engine cannot express it, ValueError for a method or
    engine speclab does not know, or settings that make no sense (K < 1, a schedule with gaps)."""
    options = Options(**changes) if options is None else options
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose from {ENGINES}")
    known = writers()
    if method not in known:
        raise ValueError(f"unknown method {method!r}; choose from {tuple(known)}")
    _check(options)
    written = known[method](engine, options)
    return EngineSettings(engine, method, {**written, **_acceptance(method, engine, options)})


def _check(o: Options) -> None:
    if not isinstance(o.k, int) or o.k < 1:
        raise ValueError(f"k must be a whole number of draft tokens, at least 1; got {o.k!r}")
    if o.min_ngram is not None and not 1 <= o.min_ngram <= o.max_ngram:
        raise ValueError(f"n-gram sizes need 1 <= min_ngram <= max_ngram, got {o.min_ngram} and {o.max_ngram}")
    if o.k_by_batch is not None:
        expected = 1
        for first, last, k in o.k_by_batch:
            if first != expected or last < first or k < 0:
                raise ValueError(f"k_by_batch must be (first, last, K) ranges from batch size 1 up, without gaps "
                                 f"and K >= 0; got {list(o.k_by_batch)}")
            expected = last + 1
        over = [list(r) for r in o.k_by_batch if r[2] > o.k]
        if over:
            raise ValueError(f"k_by_batch asks for more draft tokens than k = {o.k} in {over}: vLLM's "
                             f"documentation wants each range's K at most num_speculative_tokens (k) and "
                             f"TensorRT-LLM refuses the schedule; set k to the schedule's largest K "
                             f"({max(r[2] for r in o.k_by_batch)})")
    if o.acceptance not in ("rejection", "block"):
        raise ValueError(f"acceptance is 'rejection' or 'block'; got {o.acceptance!r}")


def _acceptance(name: str, engine: str, o: Options) -> dict:
    """The verification rule, where it is not the default."""
    if o.acceptance == "rejection":
        return {}
    # one-hot drafts: block verification accepts exactly what the token-wise rule accepts (P(first j drafts
    # kept) <= p(x_1..x_j), which the token-wise rule already reaches)
    if REGISTRY[name].one_hot_drafts:
        raise no(engine, f"{name}'s drafts carry no probabilities (one-hot): block verification accepts exactly "
                         "what the token-wise rule accepts, so it is not written (vLLM runs its standard rule)")
    if not tree_is(o, "chain"):
        raise no(engine, "block verification judges a chain; a tree is verified branch by branch")
    if engine == "speclab":
        return {"acceptance": "block"}
    if engine == "vllm":
        # vLLM 0.32's drafters draft greedily by default (draft_sample_method "greedy": the draft's
        # probabilities are read as one-hot), which leaves block verification nothing to gain; it needs the
        # drafts sampled and their probabilities kept
        return {"rejection_sample_method": "block", "draft_sample_method": "probabilistic"}
    raise no(engine, "no block verification: drafts are verified token by token")


def k_by_batch(policy: dict[int, int], max_batch: int) -> tuple[tuple[int, int, int], ...]:
    """Chapter 11's K by batch size (measured at some batch sizes: {B: K}) as ranges covering 1..max_batch:
    each measured B's K holds up to the next measured B, and neighbours with the same K merge."""
    sizes = sorted(int(b) for b in policy)
    if not sizes or sizes[0] != 1 or sizes[-1] > max_batch:
        raise ValueError(f"a policy must start at batch size 1 and stay within {max_batch}; got sizes {sizes}")
    ranges: list[list[int]] = []
    for i, b in enumerate(sizes):
        last = sizes[i + 1] - 1 if i + 1 < len(sizes) else max_batch
        k = int(policy[b] if b in policy else policy[str(b)])
        if ranges and ranges[-1][2] == k:
            ranges[-1][1] = last
        else:
            ranges.append([b, last, k])
    return tuple(tuple(r) for r in ranges)


def mapping_table(options: dict[str, Options], engines: Sequence[str] = ENGINES) -> list[dict[str, str]]:
    """One row per method: each engine's settings as text, or "— " and the reason it has none."""
    rows = []
    for method_name, o in options.items():
        row = {"method": method_name}
        for engine in engines:
            try:
                row[engine] = engine_settings(method_name, engine, o).text()
            except Unsupported as err:
                row[engine] = "— " + str(err).split(": ", 1)[1]
        rows.append(row)
    return rows
