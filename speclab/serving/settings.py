"""One source for engine settings: a speclab method and its options written the way vLLM
(speculative_config), SGLang (launch_server flags), TensorRT-LLM (the LLM API's decoding config),
llama.cpp (llama-server flags) and transformers (generate() arguments) take them; chapter 12's table is
printed from here. Where an engine cannot express what was asked (a dynamic tree in vLLM, a K schedule in
transformers, a K above the cap an engine clamps to), engine_settings raises Unsupported with the reason:
a setting dropped silently would be another method measured as if it were the same.

Sources: vLLM 0.32 vllm/config/speculative.py (checked against the installed SpeculativeConfig in
tests/serving); SGLang docs/advanced_features/speculative_decoding.md @ 067ad4d3; TensorRT-LLM
tensorrt_llm/llmapi/llm_args.py @ fcd3f316 and docs/source/features/speculative-decoding.md @ 04c8822c;
llama.cpp docs/speculative.md (the --spec-* flags); transformers generation/configuration_utils.py @
008f5c8c.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from speclab.methods import (draft_model, eagle, layer_skip, lookahead, lookup_first, medusa, mtp, ngram, parallel_draft,
                             suffix)

ENGINES = ("speclab", "vllm", "sglang", "tensorrt-llm", "llama.cpp", "transformers")


class Unsupported(ValueError):
    """The engine has no setting for what was asked; the message says why and what it offers instead."""


@dataclass(frozen=True)
class Options:
    """A method's settings in speclab's words (the defaults are speclab's), for every engine's writer."""

    k: int = 4  # tokens drafted a round (an EAGLE or Medusa chain's depth)
    path: str | None = None  # the draft model's or head's directory, as the engine should read it
    max_ngram: int = 3  # prompt lookup's n-gram sizes
    min_ngram: int = 1
    # "chain", "dynamic" (EAGLE-2's tree: top_k, depth = k, total_tokens) or a static tree as a list of paths
    # (speclab.trees' medusa_choices)
    tree: str | Sequence[Sequence[int]] = "chain"
    top_k: int = 1
    total_tokens: int | None = None
    # K by batch size: ((first, last, K), ...) in order, covering 1..last; K 0 turns speculation off (chapter 11)
    k_by_batch: Sequence[tuple[int, int, int]] | None = None
    exit_layer: int | None = None  # layer skip's drafting layers
    confidence_threshold: float | None = None  # stop a round's draft below this confidence (None: k tokens)
    lookahead: tuple[int, int, int] = (4, 4, 4)  # lookahead's window W, n-gram length N and pool G
    # suffix decoding's (max_tree_depth, max_cached_requests, max_spec_factor, min_token_prob)
    suffix: tuple[int, int, float, float] = (24, 10000, 1.0, 0.1)
    mask_token_id: int | None = None  # a parallel draft's mask token (its config's pard_token)
    then: str = draft_model.NAME  # lookup_first's drafter where lookup finds no match (settings: these same)
    # "rejection" (the token-wise rule, chapter 3) or "block" (block verification, chapter 13): only speclab
    # and vLLM have the block rule
    acceptance: str = "rejection"


@dataclass(frozen=True)
class EngineSettings:
    engine: str
    method: str
    settings: dict

    def text(self) -> str:
        """The settings as one writes them for that engine: JSON for vLLM's speculative_config, a command
        line's flags for SGLang and llama.cpp, keyword arguments for TensorRT-LLM and transformers."""
        if self.engine == "vllm":
            return json.dumps(self.settings)
        if self.engine in ("sglang", "llama.cpp"):
            return " ".join(f"{flag} {value}" for flag, value in self.settings.items())
        return ", ".join(f"{key}={value!r}" for key, value in self.settings.items())


def engine_settings(method: str, engine: str, options: Options | None = None, **changes) -> EngineSettings:
    """`method` (speclab's registry name, which is vLLM's) with `options` (or Options(**changes)) as
    `engine` takes it. Raises Unsupported where the engine cannot express it, ValueError for a method or
    engine speclab does not know, or settings that make no sense (K < 1, a schedule with gaps)."""
    options = Options(**changes) if options is None else options
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose from {ENGINES}")
    if method not in WRITERS:
        raise ValueError(f"unknown method {method!r}; choose from {tuple(WRITERS)}")
    _check(options)
    written = WRITERS[method](engine, options)
    return EngineSettings(engine, method, {**written, **_acceptance(method, engine, options)})


def _check(o: Options) -> None:
    if not isinstance(o.k, int) or o.k < 1:
        raise ValueError(f"k must be a whole number of draft tokens, at least 1; got {o.k!r}")
    if not 1 <= o.min_ngram <= o.max_ngram:
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
            raise ValueError(f"k_by_batch asks for more draft tokens than k = {o.k} in {over}: vLLM clamps each "
                             f"range to min(num_speculative_tokens, K) and TensorRT-LLM caps it at max_draft_len, "
                             f"so those ranges would run at K = {o.k}; set k to the schedule's largest K "
                             f"({max(r[2] for r in o.k_by_batch)})")
    if o.acceptance not in ("rejection", "block"):
        raise ValueError(f"acceptance is 'rejection' or 'block'; got {o.acceptance!r}")


# drafters whose drafts carry no probabilities: one-hot drafts, for which block verification accepts exactly what
# the token-wise rule accepts (P(first j drafts kept) <= p(x_1..x_j), which the token-wise rule already reaches)
_ONE_HOT_DRAFTS = (ngram.NAME, suffix.NAME, lookahead.NAME)


def _acceptance(method: str, engine: str, o: Options) -> dict:
    """The verification rule, where it is not the default."""
    if o.acceptance == "rejection":
        return {}
    if method in _ONE_HOT_DRAFTS:
        raise _no(engine, f"{method}'s drafts carry no probabilities (one-hot): block verification accepts exactly "
                          "what the token-wise rule accepts, so it is not written (vLLM runs its standard rule)")
    if not _tree_is(o, "chain"):
        raise _no(engine, "block verification judges a chain; a tree is verified branch by branch")
    if engine == "speclab":
        return {"acceptance": "block"}
    if engine == "vllm":
        # vLLM 0.32's drafters draft greedily by default (draft_sample_method "greedy": the draft's
        # probabilities are read as one-hot), which leaves block verification nothing to gain; it needs the
        # drafts sampled and their probabilities kept
        return {"rejection_sample_method": "block", "draft_sample_method": "probabilistic"}
    raise _no(engine, "no block verification: drafts are verified token by token")

def _no(engine: str, what: str) -> Unsupported:
    return Unsupported(f"{engine}: {what}")



def _tree_is(o: Options, *kinds: str) -> bool:
    return (o.tree if isinstance(o.tree, str) else "static") in kinds


def _common(engine: str, o: Options) -> dict:
    """K by batch size, for the engines that have it; the same for every method."""
    if o.k_by_batch is None:
        return {}
    ranges = [list(r) for r in o.k_by_batch]
    if engine in ("vllm", "speclab"):
        return {"num_speculative_tokens_per_batch_size" if engine == "vllm" else "k_by_batch": ranges}
    if engine == "tensorrt-llm":
        # {last batch size of a range: K}; batch sizes past the last key run without speculation, so K 0
        # can only be the last range
        on = [r for r in ranges if r[2] > 0]
        if any(r[2] == 0 for r in ranges[:len(on)]) or len(on) < len(ranges) - 1:
            raise _no(engine, "draft_len_schedule turns speculation off only above its last batch size; "
                              f"a K of 0 in the middle of {ranges} cannot be written")
        return {"draft_len_schedule": {r[1]: r[2] for r in on}}
    raise _no(engine, {"sglang": "no fixed K by batch size: --speculative-adaptive follows the acceptance "
                                 "length, and auto-spec picks among step sets per batch-size bucket",
                       "llama.cpp": "serves one draft length: --spec-draft-auto tunes it by measured speed, "
                                    "--spec-draft-ctx-step by context length, not by batch size",
                       "transformers": "assisted generation runs batch size 1 only"}[engine])


def _draft_model(engine: str, o: Options) -> dict:
    path = o.path or "DRAFT_DIR"
    if engine == "speclab":
        return {"method": draft_model.NAME, "draft": path, "k": o.k, **_confidence(o), **_common(engine, o)}
    if engine == "vllm":
        _no_confidence(engine, o)
        return {"method": draft_model.NAME, "model": path, "num_speculative_tokens": o.k, **_common(engine, o)}
    if engine == "sglang":
        _no_confidence(engine, o)
        _common(engine, o)
        return {"--speculative-algorithm": "STANDALONE", "--speculative-draft-model-path": path,
                "--speculative-num-steps": o.k, "--speculative-eagle-topk": 1, "--speculative-num-draft-tokens": o.k + 1}
    if engine == "tensorrt-llm":
        _no_confidence(engine, o)
        return {"decoding_type": "DraftTarget", "max_draft_len": o.k, "speculative_model": path, **_common(engine, o)}
    if engine == "llama.cpp":
        _common(engine, o)
        # llama.cpp's p_min stops the draft below the draft's own probability (speclab's confidence stop)
        return {"--spec-type": "draft-simple", "--spec-draft-model": path, "--spec-draft-n-max": o.k,
                "--spec-draft-n-min": 0, "--spec-draft-p-min": o.confidence_threshold or 0.0}
    _common(engine, o)
    # transformers' defaults (20 tokens, a 0.4 confidence stop) are not speclab's: both written out
    return {"assistant_model": path, "num_assistant_tokens": o.k, "num_assistant_tokens_schedule": "constant",
            "assistant_confidence_threshold": o.confidence_threshold or 0.0}


def _confidence(o: Options) -> dict:
    return {} if o.confidence_threshold is None else {"confidence_threshold": o.confidence_threshold}


def _no_confidence(engine: str, o: Options) -> None:
    if o.confidence_threshold is not None:
        raise _no(engine, "no confidence stop for a draft model's chain: it always drafts K tokens")


def _ngram(engine: str, o: Options) -> dict:
    if engine == "speclab":
        return {"method": ngram.NAME, "k": o.k, "max_ngram": o.max_ngram, "min_ngram": o.min_ngram,
                **_common(engine, o)}
    if engine == "vllm":
        return {"method": ngram.NAME, "num_speculative_tokens": o.k, "prompt_lookup_max": o.max_ngram,
                "prompt_lookup_min": o.min_ngram, **_common(engine, o)}
    if engine == "sglang":
        _common(engine, o)
        # not prompt lookup: SGLang's NGRAM keeps one cache of n-grams from earlier requests' prompts and
        # outputs (a trie, --speculative-ngram-capacity) and searches it breadth-first (match type BFS), so a
        # request drafts from other requests' text too. The nearest to speclab's lookup in the request alone: a
        # chain (one branch at every level); SGLang's budget counts the pending token
        return {"--speculative-algorithm": "NGRAM", "--speculative-ngram-min-match-window-size": o.min_ngram,
                "--speculative-ngram-max-match-window-size": o.max_ngram, "--speculative-ngram-max-bfs-breadth": 1,
                "--speculative-num-draft-tokens": o.k + 1}
    if engine == "tensorrt-llm":
        if o.min_ngram != 1:
            raise _no(engine, f"NGram matches every size up to max_matching_ngram_size; no minimum "
                              f"(min_ngram {o.min_ngram})")
        return {"decoding_type": "NGram", "max_draft_len": o.k, "max_matching_ngram_size": o.max_ngram,
                **_common(engine, o)}
    if engine == "llama.cpp":
        _common(engine, o)
        if o.min_ngram != o.max_ngram:
            raise _no(engine, "ngram-simple looks up one n-gram size (--spec-ngram-simple-size-n); set "
                              f"min_ngram = max_ngram (got {o.min_ngram}..{o.max_ngram})")
        # ngram-simple's own flags: the lookup n-gram (N) and the draft's length (M)
        return {"--spec-type": "ngram-simple", "--spec-ngram-simple-size-n": o.max_ngram,
                "--spec-ngram-simple-size-m": o.k}
    _common(engine, o)
    if o.min_ngram != 1:
        raise _no(engine, f"prompt lookup tries every size from max_matching_ngram_size down to 1; no minimum "
                          f"(min_ngram {o.min_ngram})")
    return {"prompt_lookup_num_tokens": o.k, "max_matching_ngram_size": o.max_ngram}


def _eagle(version: int):
    name = eagle.NAME if version == 1 else eagle.NAME3

    def write(engine: str, o: Options) -> dict:
        path = o.path or "HEAD_DIR"
        dynamic, static = _tree_is(o, "dynamic"), _tree_is(o, "static")
        total = o.total_tokens if o.total_tokens is not None else o.k * o.top_k
        if dynamic and not o.top_k * o.k >= total >= o.k:
            raise ValueError(f"a dynamic tree of depth {o.k} and top_k {o.top_k} holds {o.k} to "
                             f"{o.k * o.top_k} tokens; total_tokens {total} is outside that")
        if engine == "speclab":
            tree = {"tree": "chain"} if _tree_is(o, "chain") else {"tree": o.tree} if static else {
                "tree": "dynamic", "top_k": o.top_k, "depth": o.k, "total_tokens": total}
            return {"method": name, "head": path, **({"depth": o.k} if _tree_is(o, "chain") else {}), **tree,
                    **_common(engine, o)}
        if engine == "vllm":
            if not _tree_is(o, "chain"):
                # some vLLM versions take a static tree (speculative_token_tree, TREE_ATTN); 0.32, pinned
                # here, has no tree setting at all (vllm/config/speculative.py)
                raise _no(engine, "drafts EAGLE chains only in 0.32 (no dynamic EAGLE-2 tree; a static tree "
                                  "through speculative_token_tree in the versions that have it)")
            return {"method": name, "model": path, "num_speculative_tokens": o.k, **_common(engine, o)}
        if engine == "sglang":
            _common(engine, o)
            if static:
                raise _no(engine, "no static tree: SGLang grows EAGLE-2's dynamic tree from topk and steps")
            top_k, budget = (1, o.k + 1) if not dynamic else (o.top_k, total + 1)
            return {"--speculative-algorithm": "EAGLE" if version == 1 else "EAGLE3",
                    "--speculative-draft-model-path": path, "--speculative-num-steps": o.k,
                    "--speculative-eagle-topk": top_k, "--speculative-num-draft-tokens": budget}
        if engine == "tensorrt-llm":
            if version == 1:
                raise _no(engine, "the PyTorch backend runs EAGLE-3 heads only; EAGLE-1 and -2 checkpoints "
                                  "are incompatible")
            tree = ({} if _tree_is(o, "chain") else {"eagle_choices": [list(p) for p in o.tree]} if static else
                    {"use_dynamic_tree": True, "dynamic_tree_max_topK": o.top_k, "max_total_draft_tokens": total})
            return {"decoding_type": "Eagle3", "max_draft_len": o.k, "speculative_model": path, **tree,
                    **_common(engine, o)}
        if engine == "llama.cpp":
            _common(engine, o)
            if version == 1 or not _tree_is(o, "chain"):
                raise _no(engine, "draft-eagle3 drafts an EAGLE-3 chain (a GGUF converted with "
                                  "--target-model-dir); no EAGLE-1, no tree")
            return {"--spec-type": "draft-eagle3", "--spec-draft-model": path, "--spec-draft-n-max": o.k}
        raise _no(engine, "generate() has no EAGLE drafter (assistant models, prompt lookup and early exit only)")
    return write


def _medusa(engine: str, o: Options) -> dict:
    path = o.path or "HEADS_DIR"
    if engine == "speclab":
        return {"method": medusa.NAME, "heads": path, "tree": o.tree if not isinstance(o.tree, str) else "chain",
                **_common(engine, o)}
    if engine == "tensorrt-llm":
        # MedusaDecodingConfig runs in the TensorRT engine backend only (supports_backend excludes "pytorch"),
        # from heads converted with TensorRT-LLM's own Medusa checkpoint converter; it takes a tree
        if _tree_is(o, "dynamic"):
            raise _no(engine, "Medusa's tree is static (medusa_choices): no dynamic tree")
        choices = [[0] * depth for depth in range(1, o.k + 1)] if _tree_is(o, "chain") else [list(p) for p in o.tree]
        return {"decoding_type": "Medusa", "max_draft_len": len(choices), "num_medusa_heads": max(map(len, choices)),
                "medusa_choices": choices, "speculative_model": path, **_common(engine, o)}
    if engine != "vllm":
        raise _no(engine, {"transformers": "generate() has no Medusa drafter"}.get(engine, "no Medusa heads"))
    if not _tree_is(o, "chain"):
        raise _no(engine, "Medusa proposes each head's top-1 token only: a chain, no tree")
    return {"method": medusa.NAME, "model": path, "num_speculative_tokens": o.k, **_common(engine, o)}


def _mtp(engine: str, o: Options) -> dict:
    if engine == "speclab":
        return {"method": mtp.NAME, "module": o.path or "MODULE_DIR", "num_tokens": o.k, **_common(engine, o)}
    if engine == "vllm":
        # the MTP layers are read from the target's own checkpoint (no separate model)
        return {"method": mtp.NAME, "num_speculative_tokens": o.k, **_common(engine, o)}
    if engine == "sglang":
        _common(engine, o)
        return {"--speculative-algorithm": "NEXTN", "--speculative-num-steps": o.k, "--speculative-eagle-topk": 1,
                "--speculative-num-draft-tokens": o.k + 1}
    if engine == "tensorrt-llm":
        # MTPDecodingConfig's validator sets max_draft_len = num_nextn_predict_layers, so the number of tokens
        # drafted is num_nextn_predict_layers (a max_draft_len beside it is overwritten). On a checkpoint with one
        # MTP layer (DeepSeek-V3's), K > 1 runs that layer K times, EAGLE-style (MTP_EAGLE modes)
        return {"decoding_type": "MTP", "num_nextn_predict_layers": o.k, **_common(engine, o)}
    if engine == "llama.cpp":
        _common(engine, o)
        return {"--spec-type": "draft-mtp", "--spec-draft-n-max": o.k}
    raise _no(engine, "generate() has no MTP drafter")


def _layer_skip(engine: str, o: Options) -> dict:
    if o.exit_layer is None:
        raise ValueError("layer skip needs exit_layer, the last layer that drafts")
    if engine == "speclab":
        return {"method": layer_skip.NAME, "exit_layer": o.exit_layer, "k": o.k, **_common(engine, o)}
    if engine != "transformers":
        raise _no(engine, "no self-drafting from the target's first layers (transformers' assistant_early_exit "
                          "has it)")
    _common(engine, o)
    return {"assistant_early_exit": o.exit_layer, "num_assistant_tokens": o.k,
            "num_assistant_tokens_schedule": "constant"}


def _lookahead(engine: str, o: Options) -> dict:
    w, n, g = o.lookahead
    if engine == "speclab":
        # LookaheadDrafter's own option names (window, ngram, pool)
        return {"method": lookahead.NAME, **dict(window=w, ngram=n, pool=g), "k": o.k, **_common(engine, o)}
    if engine == "tensorrt-llm":  # the LLM API's LookaheadDecodingConfig: W, N, G by their own names
        return {"decoding_type": "Lookahead", "max_window_size": w, "max_ngram_size": n,
                "max_verification_set_size": g, **_common(engine, o)}
    raise _no(engine, "no lookahead decoding (hao-ai-lab/LookaheadDecoding runs it on transformers; "
                      "TensorRT-LLM has it)")


SUFFIX_KEYS = ("max_tree_depth", "max_cached_requests", "max_spec_factor", "min_token_prob")


def _suffix(engine: str, o: Options) -> dict:
    named = dict(zip(SUFFIX_KEYS, o.suffix))
    if engine == "speclab":
        return {"method": suffix.NAME, "k": o.k, **named, **_common(engine, o)}
    if engine == "vllm":  # needs Arctic Inference installed beside vLLM (pip install arctic-inference)
        return {"method": suffix.NAME, "num_speculative_tokens": o.k,
                **{f"suffix_decoding_{key}": value for key, value in named.items()}, **_common(engine, o)}
    raise _no(engine, {
        "sglang": "SUFFIX is a --speculative-algorithm (with Arctic Inference installed), but its tree settings "
                  "are not in this course's sources: set the algorithm and check SGLang's suffix_decoding docs",
        "tensorrt-llm": "its SA decoding is a suffix automaton over the request alone, with no cache of earlier "
                        "requests' outputs to set",
        "llama.cpp": "no suffix-tree drafting; ngram-* look up the request's own text",
        "transformers": "no suffix-tree drafting; prompt_lookup_num_tokens looks up the request's own text"}[engine])


def _parallel_draft(engine: str, o: Options) -> dict:
    path = o.path or "PARD_DIR"
    if engine == "speclab":
        return {"method": parallel_draft.NAME, "model": path, "k": o.k, **_common(engine, o)}
    if engine == "vllm":  # a draft model run with K - 1 mask tokens; the mask id is read from its config
        return {"method": draft_model.NAME, "model": path, "num_speculative_tokens": o.k, "parallel_drafting": True,
                **_common(engine, o)}
    if engine == "tensorrt-llm":  # PARDDecodingConfig names the mask token itself: the config's pard_token
        mask = "MASK_TOKEN_ID" if o.mask_token_id is None else o.mask_token_id
        return {"decoding_type": "PARD", "max_draft_len": o.k, "speculative_model": path, "mask_token_id": mask,
                **_common(engine, o)}
    raise _no(engine, "no parallel drafting: a draft model there drafts token by token")


def _lookup_first(engine: str, o: Options) -> dict:
    """Prompt lookup in front of o.then. llama.cpp has this very precedence for a comma-separated
    --spec-type (a draftless type before a drafter); TensorRT-LLM's nearest puts another matcher in front."""
    if o.then in (*lookup_first.DRAFTLESS, lookup_first.NAME) or o.then not in WRITERS:
        raise ValueError(f"lookup_first puts prompt lookup in front of a trained drafter; then={o.then!r} is not one")
    behind = WRITERS[o.then](engine, o) if engine in ("speclab", "llama.cpp") else None
    if engine == "speclab":
        return {"method": lookup_first.NAME, "drafter": o.then, "max_ngram": o.max_ngram, "min_ngram": o.min_ngram,
                **{key: value for key, value in behind.items() if key != "method"}}
    if engine == "llama.cpp":
        if o.min_ngram != o.max_ngram:
            raise _no(engine, "ngram-simple looks up one n-gram size (--spec-ngram-simple-size-n); set "
                              f"min_ngram = max_ngram (got {o.min_ngram}..{o.max_ngram})")
        return {**behind, "--spec-type": f"ngram-simple,{behind['--spec-type']}",
                "--spec-ngram-simple-size-n": o.max_ngram, "--spec-ngram-simple-size-m": o.k}
    raise _no(engine, {
        "vllm": "one method per speculative_config: no prompt lookup in front of a drafter",
        "sglang": "one --speculative-algorithm: no prompt lookup in front of a drafter",
        "tensorrt-llm": "no prompt lookup in front of a drafter; the nearest: use_sa_spec=True with "
                        "sa_spec_threshold=N on an Eagle3, MTP or PARD config puts its suffix automaton (the "
                        "longest match in the request, no max_ngram) in front once a match is N tokens long",
        "transformers": "generate() takes an assistant model or prompt lookup, not both"}[engine])


WRITERS = {draft_model.NAME: _draft_model, ngram.NAME: _ngram, eagle.NAME: _eagle(1), eagle.NAME3: _eagle(3),
           medusa.NAME: _medusa, mtp.NAME: _mtp, layer_skip.NAME: _layer_skip, lookahead.NAME: _lookahead,
           suffix.NAME: _suffix, parallel_draft.NAME: _parallel_draft, lookup_first.NAME: _lookup_first}


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
