"""Prompt lookup decoding (Saxena 2023; vLLM's `ngram`): draft by copying what followed an earlier
occurrence of the sequence's last few tokens. No model and no probabilities."""
from __future__ import annotations

from dataclasses import replace

import torch

from speclab.drafting import Draft, Drafter
from speclab.sampling import SamplingParams
from speclab.methods.engines import Options, by_batch, no
from speclab.methods.flags import Flag, Setting, Sweep, named

NAME = "ngram"  # the method's name in the registry (vLLM's)
MIN_NGRAM = 1  # the shortest match that drafts, unless set


MATCH_CHOICES = ("latest", "first", "frequent", "longest")


def lookup_continuation(seq: list[int], num_tokens: int, max_ngram: int = 3, min_ngram: int = MIN_NGRAM,
                        choose: str = "latest") -> list[int]:
    """Prompt lookup's proposal for the sequence `seq`: up to num_tokens of what followed an earlier
    occurrence of its last n tokens (the longest n from max_ngram down to min_ngram with a match; [] when
    nothing matches). Which occurrence: "latest" (the most recent); "first" (the reference's,
    Saxena's find_candidate_pred_tokens, and transformers'); "frequent" (token by token, the continuation
    most occurrences agree on, ties to the latest); "longest" (the one whose preceding text agrees with
    the sequence's for longest, beyond max_ngram, ties to the latest).
    """
    if choose not in MATCH_CHOICES:
        raise ValueError(f"choose must be one of {MATCH_CHOICES}, got {choose!r}")
    for n in range(min(max_ngram, len(seq) - 1), min_ngram - 1, -1):
        tail = seq[-n:]
        # starts i with seq[i:i+n] == tail and at least one token after the match, latest first
        starts = [i for i in range(len(seq) - n - 1, -1, -1) if seq[i:i + n] == tail]
        if not starts:
            continue
        if choose == "latest":
            i = starts[0]
        elif choose == "first":
            i = starts[-1]
        elif choose == "longest":
            i = max(starts, key=lambda j: (_agreement(seq, j + n, len(seq)), j))
        else:
            return _most_frequent(seq, [j + n for j in starts], num_tokens)
        return seq[i + n:i + n + num_tokens]
    return []


def _agreement(seq: list[int], end_a: int, end_b: int, cap: int = 256) -> int:
    """How many tokens before end_a equal those before end_b (a common suffix length, at most cap)."""
    m = 0
    while m < cap and m < end_a and seq[end_a - 1 - m] == seq[end_b - 1 - m]:
        m += 1
    return m


def _most_frequent(seq: list[int], follows: list[int], num_tokens: int) -> list[int]:
    """From continuation starts `follows` (latest first), the token-by-token majority continuation."""
    out: list[int] = []
    while follows and len(out) < num_tokens:
        counts: dict[int, int] = {}
        for j in follows:
            if j < len(seq):
                counts[seq[j]] = counts.get(seq[j], 0) + 1
        if not counts:
            break
        token = max(counts, key=counts.get)  # dicts keep insertion order, so ties go to the latest
        out.append(token)
        follows = [j + 1 for j in follows if j < len(seq) and seq[j] == token]
    return out


class PromptLookupDrafter(Drafter):
    """Prompt lookup decoding (Saxena 2023): find an earlier occurrence of the sequence's last n tokens
    (n from max_ngram down to min_ngram) and propose the num_tokens that followed it (None: as many as
    the round allows, k). No model, no probabilities; it wins where the output copies its context (code
    edits, answers quoting a passage, summaries). `choose` picks among several occurrences
    (lookup_continuation; chapter 6 compares the rules on its workloads). transformers' and vLLM's names
    for the same knobs are the registry's aliases (speclab.methods.REGISTRY)."""

    name = NAME
    batched = True  # no state between rounds: each sequence's proposal reads only its own ids

    def __init__(self, max_ngram: int = 3, min_ngram: int = MIN_NGRAM, num_tokens: int | None = None,
                 choose: str = "frequent"):
        if not isinstance(min_ngram, int) or not isinstance(max_ngram, int) or not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need integers 1 <= min_ngram <= max_ngram; got min_ngram={min_ngram!r}, "
                             f"max_ngram={max_ngram!r}")
        if num_tokens is not None and (not isinstance(num_tokens, int) or num_tokens < 1):
            raise ValueError(f"num_tokens (tokens per proposal) must be an integer >= 1 or None (use k); "
                             f"got {num_tokens!r}")
        if choose not in MATCH_CHOICES:
            raise ValueError(f"choose must be one of {MATCH_CHOICES}, got {choose!r}")
        self.max_ngram, self.min_ngram, self.num_tokens, self.choose = max_ngram, min_ngram, num_tokens, choose

    def propose(self, ids: torch.Tensor, k: int, sampling: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        n = k if self.num_tokens is None else min(k, self.num_tokens)  # never more than the round allows
        follow = lookup_continuation(ids.tolist(), n, self.max_ngram, self.min_ngram, self.choose)
        return Draft(torch.tensor(follow, dtype=torch.long, device=ids.device))


# ---------------------------------------------------------------- engine settings
def engine_settings(engine: str, o: Options) -> dict:
    """Prompt lookup's settings as `engine` takes them (speclab.serving.settings.engine_settings)."""
    o = replace(o, min_ngram=MIN_NGRAM) if o.min_ngram is None else o  # the drafter's own default
    if engine == "speclab":
        return {"method": NAME, "k": o.k, "max_ngram": o.max_ngram, "min_ngram": o.min_ngram,
                **by_batch(engine, o)}
    if engine == "vllm":
        return {"method": NAME, "num_speculative_tokens": o.k, "prompt_lookup_max": o.max_ngram,
                "prompt_lookup_min": o.min_ngram, **by_batch(engine, o)}
    if engine == "sglang":
        by_batch(engine, o)
        # not prompt lookup: SGLang's NGRAM keeps one cache of n-grams shared by all requests, fed with each
        # request's last tokens after every verification (generated text and the prompt's tail, not its body:
        # ngram_worker.py @ f3b0fcd5), a trie (--speculative-ngram-capacity) searched breadth-first, so a
        # request drafts from other requests' text too. The nearest to speclab's lookup in the request alone: a
        # chain (one branch at every level); SGLang's budget counts the pending token
        return {"--speculative-algorithm": "NGRAM", "--speculative-ngram-min-match-window-size": o.min_ngram,
                "--speculative-ngram-max-match-window-size": o.max_ngram, "--speculative-ngram-max-bfs-breadth": 1,
                "--speculative-num-draft-tokens": o.k + 1}
    if engine == "tensorrt-llm":
        if o.min_ngram != 1:
            raise no(engine, f"NGram matches every size up to max_matching_ngram_size; no minimum "
                             f"(min_ngram {o.min_ngram})")
        # is_public_pool (default True) shares one pool between all requests; lookup is in the request alone
        return {"decoding_type": "NGram", "max_draft_len": o.k, "max_matching_ngram_size": o.max_ngram,
                "is_public_pool": False, **by_batch(engine, o)}
    if engine == "llama.cpp":
        by_batch(engine, o)
        if o.min_ngram != o.max_ngram:
            raise no(engine, "ngram-simple looks up one n-gram size (--spec-ngram-simple-size-n); set "
                             f"min_ngram = max_ngram (got {o.min_ngram}..{o.max_ngram})")
        # ngram-simple's own flags: the lookup n-gram (N) and the draft's length (M)
        return {"--spec-type": "ngram-simple", "--spec-ngram-simple-size-n": o.max_ngram,
                "--spec-ngram-simple-size-m": o.k}
    by_batch(engine, o)
    if o.min_ngram != 1:
        raise no(engine, f"prompt lookup tries every size from max_matching_ngram_size down to 1; no minimum "
                         f"(min_ngram {o.min_ngram})")
    return {"prompt_lookup_num_tokens": o.k, "max_matching_ngram_size": o.max_ngram}


# ================================================================ its bench sweep
def lookup_rows(values) -> tuple[Setting, ...]:
    """A prompt-lookup bench row per match rule (MATCH_CHOICES; None: the default, "frequent")."""
    return named(values, str, lambda c, text: Setting(text, {} if c is None else dict(choose=c)))


SWEEP = Sweep("lookup_choices", Flag("--lookup-choose", dict(
    nargs="+", choices=MATCH_CHOICES, metavar="RULE",
    help=f"prompt lookup's rule for choosing among several matches ({', '.join(MATCH_CHOICES)}; default: frequent); "
         "several give a row each, side by side")), lookup_rows, default=(None,))
