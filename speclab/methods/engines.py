"""What every method's engine settings are written from (speclab.serving.settings): the engines, speclab's
Options, Unsupported, and the pieces every writer shares (K by batch size, the confidence stop). Each
method module writes its own settings (its engine_settings, the registry's Method.engine_settings).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

ENGINES = ("speclab", "vllm", "sglang", "tensorrt-llm", "llama.cpp", "transformers")


class Unsupported(ValueError):
    """The engine has no setting for what was asked; the message says why and what it offers instead."""


@dataclass(frozen=True)
class Options:
    """A method's settings in speclab's words (the defaults are speclab's), for every engine's writer."""

    k: int = 4  # tokens drafted a round (an EAGLE or Medusa chain's depth)
    path: str | None = None  # the draft model's or head's directory, as the engine should read it
    max_ngram: int = 3  # prompt lookup's n-gram sizes
    min_ngram: int | None = None  # None: the method's own (prompt lookup 1; lookup_first's precedence 2)
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
    then: str | None = None  # lookup_first's drafter where lookup finds no match (None: the draft model)
    # "rejection" (the token-wise rule, chapter 3) or "block" (block verification, chapter 13): only speclab
    # and vLLM have the block rule
    acceptance: str = "rejection"


def no(engine: str, what: str) -> Unsupported:
    """Unsupported, naming the engine."""
    return Unsupported(f"{engine}: {what}")


def tree_is(o: Options, *kinds: str) -> bool:
    """Whether the options' tree is one of `kinds` ("chain", "dynamic", "static": a list of paths)."""
    return (o.tree if isinstance(o.tree, str) else "static") in kinds


def by_batch(engine: str, o: Options) -> dict:
    """K by batch size, for the engines that have it; the same for every method."""
    if o.k_by_batch is None:
        return {}
    ranges = [list(r) for r in o.k_by_batch]
    if engine in ("vllm", "speclab"):
        return {"num_speculative_tokens_per_batch_size" if engine == "vllm" else "k_by_batch": ranges}
    if engine == "tensorrt-llm":
        # {last batch size of a range: K}, and K = 0 past the largest key (TensorRT-LLM PR #10860); its
        # validator wants the smallest key's K to be max_draft_len, so batch size 1 must draft the most
        if ranges[0][2] != o.k:
            raise no(engine, f"draft_len_schedule must draft max_draft_len = k = {o.k} at its smallest batch "
                             f"size, and {ranges} drafts {ranges[0][2]} there")
        while ranges[-1][2] == 0:  # implied past the largest key
            ranges.pop()
        return {"draft_len_schedule": {r[1]: r[2] for r in ranges}}
    raise no(engine, {"sglang": "no fixed K by batch size: --speculative-adaptive follows the acceptance "
                                "length, and auto-spec picks among step sets per batch-size bucket",
                      "llama.cpp": "serves one draft length: --spec-draft-auto tunes it by measured speed, "
                                   "--spec-draft-ctx-step by context length, not by batch size",
                      "transformers": "assisted generation runs batch size 1 only"}[engine])


def confidence(o: Options) -> dict:
    """speclab's confidence stop, where one is set."""
    return {} if o.confidence_threshold is None else {"confidence_threshold": o.confidence_threshold}


def no_confidence(engine: str, o: Options) -> None:
    if o.confidence_threshold is not None:
        raise no(engine, "no confidence stop for a draft model's chain: it always drafts K tokens")
