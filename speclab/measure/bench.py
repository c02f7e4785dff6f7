"""Side-by-side speed on one pair, one prompt set and one set of settings, in one process: speclab
target-only, every registered method's bench rows (speclab.methods.REGISTRY), and transformers'
generate (target-only, assisted generation, prompt lookup), each for max_new_tokens (EOS ignored).

Runs are interleaved prompt by prompt in an order rotated from one prompt to the next, so a machine that
slows for a moment slows every method alike; each method's time is its median repeat. model_check then
compares the measured speedup with theory.speedup from the acceptance and costs measured in the same
runs. With fast paths (bench --fast, chapter 10) every speclab row runs again as "<row> (fast)" in the
same interleaved runs, its greedy output compared with eager target-only's.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from functools import partial
import statistics
import time
from pathlib import Path

import torch
from transformers.utils import logging as hf_logging

from speclab import theory
from speclab.decoding import generate, speculative_generate
from speclab.devices import timer
from speclab.drafting import Drafter
from speclab.methods import REGISTRY, by_bench_row, load_drafter
from speclab.measure import arctic_suffix
from speclab.measure.profiling import costs_alone, tune_verify_widths
from speclab.runner import FastPath, disable_fast_path, enable_fast_path, fast_paths, model_device
from speclab.stats import GenerationStats

TARGET_ONLY = "speclab target-only"
HF_METHODS = ("hf target-only", "hf assisted", "hf prompt-lookup")  # transformers' own generate
HF_LESSON = ("hf assisted", "hf prompt-lookup")  # transformers' two against speclab's, in the lesson
# speclab target-only, every registered method's rows (speclab.methods.REGISTRY), transformers' rows
METHODS = (TARGET_ONLY, *(row for m in REGISTRY.values() for row in m.bench_rows), *HF_METHODS)
# rows only when asked for: another implementation of a speclab method, installed apart (chapter 13)
REFERENCE_METHODS = tuple(arctic_suffix.ROWS)
LOOKAHEAD = ((4, 4, 4),)  # (W, N, G) of the bench's lookahead rows: see chapter 6 for how it was chosen
LAYER_SKIP = ((22, True),)  # (exit layer, with the exit adapter) of the layer-skip rows: the fastest in chapter 9's sweep
ADAPTIVE_K = 8  # the adaptive rows' upper bound on K without a K sweep: room to grow where drafts are accepted
FAST = " (fast)"  # a row run on the fast path: "speclab eagle3 (fast)"
BLOCK = " (block)"  # a chain row verified jointly (block verification): "speclab speculative (block)"
CONFIDENCE_THRESHOLDS = (0.1,)  # the adaptive-confidence rows' stops: 0.1 was the fastest in chapter 9's sweep (transformers' default 0.4 stops this small draft too early)


def layer_skip_rows(settings) -> dict[str, tuple[int, bool]]:
    """The layer-skip row name for each (E, adapter): "speclab layer-skip E=12" or "... E=12+adapter"."""
    return {f"speclab layer-skip E={e}" + ("+adapter" if adapter else ""): (int(e), bool(adapter))
            for e, adapter in settings}


def confidence_rows(thresholds) -> dict[str, float]:
    """The confidence-stop row name for each threshold: "speclab adaptive-confidence" for one, and
    "speclab adaptive-confidence T" for each of several."""
    thresholds = list(thresholds)
    if len(thresholds) == 1:
        return {"speclab adaptive-confidence": float(thresholds[0])}
    return {f"speclab adaptive-confidence {t:g}": float(t) for t in thresholds}


def k_sweep_rows(ks) -> dict[str, int]:
    """The fixed-K draft-model rows of a K sweep: "speclab speculative K=n"."""
    return {f"speclab speculative K={k}": int(k) for k in ks or ()}


def lookahead_rows(settings) -> dict[str, tuple[int, int, int]]:
    """The lookahead row name for each (W, N, G): "speclab lookahead" for one setting, and
    "speclab lookahead W,N,G" for each of several (a sweep, side by side in one run)."""
    settings = [tuple(s) for s in settings]
    if len(settings) == 1:
        return {"speclab lookahead": settings[0]}
    return {f"speclab lookahead {w},{n},{g}": (w, n, g) for w, n, g in settings}


def lookup_rows(choices) -> dict[str, str]:
    """The prompt-lookup row name for each match rule (methods.ngram.MATCH_CHOICES): "speclab prompt-lookup"
    for one rule (None: the default), "speclab prompt-lookup RULE" for each of several."""
    choices = list(choices or [None])
    if len(choices) == 1:
        return {"speclab prompt-lookup": choices[0]}
    return {f"speclab prompt-lookup {c}": c for c in choices}


# the bench option that makes the rows of each setting-swept method (row_settings)
SETTING_OPTIONS = {"speclab layer-skip": "--layer-skip E[+adapter] (run_bench's layer_skip)",
                   "speclab lookahead": "--lookahead W,N,G (lookahead)",
                   "speclab prompt-lookup": "--lookup-choose RULE (lookup_choices)",
                   "speclab speculative": "--k-sweep K,K,... (k_sweep)",
                   "speclab adaptive-confidence": "--confidence-threshold T (confidence_thresholds)"}


def unknown_methods_message(unknown: list[str]) -> str:
    """What to change when `unknown` are not bench methods; a row label of one setting, such as
    "speclab layer-skip E=8", is named with the method and the option that makes it."""
    hints = [f"{m!r} is a row of {base!r}: ask for {base!r} and set the row with {option}"
             for m in unknown for base, option in SETTING_OPTIONS.items() if m.startswith(base + " ")]
    return (f"unknown method(s) {unknown}; choose from {METHODS + REFERENCE_METHODS}"
            + "".join(f"\n{h}" for h in hints))


def row_settings(methods, lookahead=LOOKAHEAD, lookup_choices=None, layer_skip=LAYER_SKIP, k_sweep=None,
                 confidence_thresholds=CONFIDENCE_THRESHOLDS) -> dict[str, tuple[str, dict]]:
    """Every row `methods` stands for, in order, with (the registered bench row it is a setting of, and
    the load_drafter options of that setting): "speclab lookahead" becomes one row per lookahead setting,
    "speclab prompt-lookup" one per match rule, "speclab layer-skip" one per (exit layer, adapter),
    "speclab adaptive-confidence" one per threshold, and "speclab speculative" is followed by a row per
    K of a K sweep. A row already expanded keeps its setting; rows of no registered method (target-only,
    transformers') map to themselves."""
    sweeps = {"speclab lookahead": {row: dict(window=w, ngram=n, pool=g)
                                    for row, (w, n, g) in lookahead_rows(lookahead).items()},
              "speclab prompt-lookup": {row: {} if choose is None else dict(choose=choose)
                                        for row, choose in lookup_rows(lookup_choices).items()},
              "speclab layer-skip": {row: dict(exit_layer=e, adapter=a) for row, (e, a) in layer_skip_rows(layer_skip).items()},
              "speclab adaptive-confidence": {row: {} for row in confidence_rows(confidence_thresholds)},
              "speclab speculative": {"speclab speculative": {}, **{row: {} for row in k_sweep_rows(k_sweep)}}}
    expanded = {row: (base, options) for base, rows in sweeps.items() for row, options in rows.items()}
    out: dict[str, tuple[str, dict]] = {}
    for m in methods:
        out.update({row: (m, options) for row, options in sweeps[m].items()} if m in sweeps
                   else {m: expanded.get(m, (m, {}))})
    return out


def expand_methods(methods, lookahead=LOOKAHEAD, lookup_choices=None, layer_skip=LAYER_SKIP, k_sweep=None,
                   confidence_thresholds=CONFIDENCE_THRESHOLDS) -> tuple[str, ...]:
    """The rows `methods` stand for (row_settings), in order."""
    return tuple(row_settings(methods, lookahead, lookup_choices, layer_skip, k_sweep, confidence_thresholds))


def drafter_for(row: str, options: Mapping, target, draft, weights: Mapping[str, str | Path] | None = None):
    """The drafter of a registered method's bench row: its registry options, the row's `options` (a
    sweep's setting), and the method's weights directory from `weights` (method name -> directory;
    default: those shipped with the bundled target). The draft-model rows draft with `draft`."""
    method = by_bench_row(row)
    loaded = {**method.bench_rows[row], **options}
    if method.weights and (weights or {}).get(method.name) is not None:
        loaded[method.weights] = weights[method.name]
    if method.uses_draft_model(row):
        loaded["draft"] = draft
    return load_drafter(method.name, target, **loaded)


def default_methods(target, draft=None, weights: Mapping[str, str | Path] | None = None,
                    layer_skip=LAYER_SKIP) -> tuple[str, ...]:
    """Every row that can run on this target: a registered method's rows only where its weights (heads,
    an EAGLE head, an MTP module, the exit adapters of every `layer_skip` setting) fit it."""
    def fits(row: str, options: Mapping) -> bool:
        try:
            drafter_for(row, options, target, draft, weights)
        except (OSError, ValueError, TypeError):
            return False
        return True

    def trained(base: str) -> bool:  # rows that read weights trained for a target (the draft is given)
        method = by_bench_row(base)  # a row whose drafter is another method's (lookup_first's) reads that one's
        return method is not None and not method.uses_draft_model(base) and \
            (method.bundled is not None or "drafter" in method.bench_rows[base])

    unfit = {base for base, options in row_settings(METHODS, layer_skip=layer_skip).values()
             if trained(base) and not fits(base, options)}
    return tuple(m for m in METHODS if m not in unfit)


def lesson_methods(target, draft, weights: Mapping[str, str | Path] | None = None,
                   layer_skip=LAYER_SKIP) -> tuple[str, ...]:
    """What `python -m speclab bench` runs by default, the course's lesson in about two minutes on 2 cores:
    target-only, each method's lesson rows (the registry's `lesson_rows`) and transformers' two, where they
    fit the target; `--all` runs every row."""
    lesson = {TARGET_ONLY, *HF_LESSON, *(row for m in REGISTRY.values() for row in m.lesson_rows)}
    return tuple(m for m in default_methods(target, draft, weights, layer_skip) if m in lesson)


def decode_options(methods) -> dict[str, dict]:
    """speculative_generate options of the rows of `methods` that decode otherwise than by default: an
    adaptive schedule or another acceptance rule (each method's decode_options in the registry)."""
    out = {}
    for row in methods:
        method = by_bench_row(row)
        if method is not None and row in method.decode_options:
            out[row] = dict(method.decode_options[row])
    return out


def learns_from_requests(drafter) -> bool:
    """Whether a drafter keeps something from one request to the next (it overrides forget_requests)."""
    return isinstance(drafter, Drafter) and type(drafter).forget_requests is not Drafter.forget_requests


def make_drafters(methods, target, draft, weights: Mapping[str, str | Path] | None = None, lookahead=LOOKAHEAD,
                  lookup_choices=None, layer_skip=LAYER_SKIP, k_sweep=None,
                  confidence_thresholds=CONFIDENCE_THRESHOLDS) -> dict:
    """The drafter of each speclab row of `methods` (expanded by the sweeps: row_settings), built once for
    the whole bench. `weights`: method name -> its weights directory (default: those shipped with the
    bundled target); `lookahead`: (W, N, G) settings, one lookahead row each; `lookup_choices`: prompt
    lookup's match rules, a row each; `layer_skip`: (exit layer, adapter) settings, a row each;
    `k_sweep`: fixed K values of the draft model, a row each. The adaptive-K rows draft with the draft
    model."""
    settings = row_settings(methods, lookahead, lookup_choices, layer_skip, k_sweep, confidence_thresholds)
    drafters = {row: drafter_for(base, options, target, draft, weights) for row, (base, options) in settings.items()
                if by_bench_row(base) is not None}
    drafters.update({row: arctic_suffix.ArcticSuffixDrafter(**arctic_suffix.ROWS[row]) for row in methods
                     if row in arctic_suffix.ROWS})
    return drafters


@dataclass
class BenchRow:
    method: str
    new_tokens: int = 0
    seconds: float = 0.0            # median over repeats of the total over prompts
    stats: GenerationStats | None = None  # speclab methods: the median repeat's runs, combined
    matches_target_only: bool | None = None
    repeat_seconds: list[float] = field(default_factory=list)
    prompt_seconds: list[float] = field(default_factory=list)  # per prompt, in the median repeat (sum: seconds)
    # the draft-model row with run_bench's time_alone: its passes' costs (ms) with each model timed by itself
    # beside the loop (profiling.costs_alone), medians over every prompt and repeat; what model checks compare
    alone_ms: dict[str, float] | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.seconds

    @property
    def has_drafts(self) -> bool:
        return self.stats is not None and self.stats.drafted > 0

    @property
    def acceptance_rate(self) -> float | None:
        return self.stats.acceptance_rate if self.has_drafts else None

    @property
    def alpha(self) -> float | None:
        return self.stats.alpha if self.has_drafts else None

    @property
    def tokens_per_round(self) -> float | None:
        return self.stats.mean_tokens_per_round if self.has_drafts else None

    def to_record(self) -> dict:
        """The row as `bench --json` writes it (the book's records); from_record reads it back."""
        return dict(method=self.method, new_tokens=self.new_tokens, seconds=self.seconds,
                    tokens_per_s=self.tokens_per_s, repeat_seconds=self.repeat_seconds,
                    prompt_seconds=self.prompt_seconds, matches_target_only=self.matches_target_only,
                    stats=self.stats.to_dict() if self.stats else None,
                    **({} if self.alone_ms is None else {"alone_ms": self.alone_ms}))

    @classmethod
    def from_record(cls, record: dict) -> BenchRow:
        """A row of a `bench --json` record, so that a chapter computes ratios and speedup_interval from
        what was recorded as the bench did. The stats' derived entries (rates, means) are recomputed."""
        stats = record.get("stats")
        if stats is not None:
            stats = GenerationStats(**{f.name: stats[f.name] for f in fields(GenerationStats) if f.name in stats})
        return cls(record["method"], record["new_tokens"], record["seconds"], stats,
                   record.get("matches_target_only"), list(record.get("repeat_seconds", [])),
                   list(record.get("prompt_seconds", [])), record.get("alone_ms"))


def _hf_generate(target, prompt: torch.Tensor, max_new_tokens: int, temperature: float, seed: int,
                 eos_token_id: int | None = None, **extra):
    # eos_token_id None: go on past EOS as speclab's loops do (min_new_tokens would forbid EOS instead, and
    # where the target's argmax is EOS transformers' text would part from speclab's); given, both stop there
    kwargs = dict(max_new_tokens=max_new_tokens, eos_token_id=eos_token_id, do_sample=temperature > 0,
                  pad_token_id=target.config.pad_token_id if target.config.pad_token_id is not None else 0)
    if temperature > 0:
        torch.manual_seed(seed)
        kwargs.update(temperature=temperature, top_k=None, top_p=None)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # generate() notices about its own options (eos_token_id, the config)
    try:
        with torch.inference_mode():
            out = target.generate(prompt.view(1, -1), attention_mask=torch.ones_like(prompt.view(1, -1)), **kwargs,
                                  **extra)
    finally:
        hf_logging.set_verbosity(verbosity)
    return out[0, len(prompt):]


def run_method(method: str, target, draft, prompt: torch.Tensor, k: int, max_new_tokens: int,
               temperature: float, seed: int, drafters: dict | None = None, options: dict | None = None,
               eos_token_id: int | None = None):
    """(new token ids, seconds, stats or None) for one prompt. `drafters`: the speclab methods' drafters
    (make_drafters); the draft model and prompt lookup are built here when it is not given. `options`:
    more speculative_generate options (the adaptive-K rows'). `eos_token_id`: stop at this token (with it)."""
    device = model_device(target)
    common = dict(max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, eos_token_id=eos_token_id)
    drafters = drafters if drafters is not None else make_drafters((method,), target, draft)
    with timer(device) as t:
        if method == "speclab target-only":
            result = generate(target, prompt, **common)
        elif method in drafters:
            result = speculative_generate(target, drafters[method], prompt, k=k, **common, **(options or {}))
        elif method == "hf target-only":
            result = _hf_generate(target, prompt, max_new_tokens, temperature, seed, eos_token_id)
        elif method == "hf assisted":
            result = _hf_generate(target, prompt, max_new_tokens, temperature, seed, eos_token_id,
                                  assistant_model=draft, num_assistant_tokens=k,
                                  num_assistant_tokens_schedule="constant", assistant_confidence_threshold=0.0)
        elif method == "hf prompt-lookup":
            result = _hf_generate(target, prompt, max_new_tokens, temperature, seed, eos_token_id,
                                  prompt_lookup_num_tokens=k)
        else:
            raise ValueError(f"unknown method {method!r}; choose from {METHODS}")
    if isinstance(result, torch.Tensor):
        return result.cpu(), t["seconds"], None
    return result.tokens, t["seconds"], result.stats


def time_interleaved(runs: dict, num_prompts: int, repeats: int,
                     progress: Callable[[str], None] | None = None) -> dict[object, list[tuple[float, list]]]:
    """Each of `runs` (name -> run(i), which decodes prompt i and returns (seconds, result)) on every
    prompt, `repeats` times, interleaved prompt by prompt: every run decodes prompt i before any
    decodes prompt i + 1, in an order rotated from one prompt to the next, so a slow stretch of the
    machine slows them all alike and none always goes first. Returns, per name, one (seconds summed
    over the prompts, [result of each prompt]) per repeat. `progress` is told after each prompt's round."""
    names = list(runs)
    timed: dict = {name: [] for name in names}
    turn, start = 0, time.perf_counter()
    for repeat in range(repeats):
        totals = {name: [0.0, []] for name in names}
        for i in range(num_prompts):
            for name in names[turn % len(names):] + names[:turn % len(names)]:
                seconds, result = runs[name](i)
                totals[name][0] += seconds
                totals[name][1].append(result)
            turn += 1
            if progress is not None:
                progress(f"repeat {repeat + 1}/{repeats}, prompt {i + 1}/{num_prompts}: {len(names)} rows timed "
                         f"({time.perf_counter() - start:.0f} s)")
        for name in names:
            timed[name].append(tuple(totals[name]))
    return timed


ALONE = "alone"  # run_bench's key for the passes timed alone beside a row


def run_bench(target, draft, prompts: list[torch.Tensor], k: int = 4, max_new_tokens: int = 128,
              temperature: float = 0.0, seed: int = 0, methods: tuple[str, ...] = METHODS,
              warmup: bool = True, repeats: int = 1, weights: Mapping[str, str | Path] | None = None,
              lookahead=LOOKAHEAD, lookup_k: int | None = None, lookup_choices=None, layer_skip=LAYER_SKIP,
              k_sweep=None, adaptive_k: int | None = None,
              confidence_thresholds=CONFIDENCE_THRESHOLDS,
              paths: Mapping[torch.nn.Module, FastPath] | None = None, block: bool = False,
              time_alone: bool = False, eos_token_id: int | None = None,
              progress: Callable[[str], None] | None = None) -> list[BenchRow]:
    """Each method over every prompt, `repeats` times, interleaved prompt by prompt; one row per method with
    the totals over the prompts from the median repeat. weights: method name -> its trained weights'
    directory (default: those shipped). Sweeps, a row each: lookahead (W, N, G), lookup_choices (prompt
    lookup's match rules), layer_skip ((exit layer, adapter)), k_sweep (fixed K, draft model),
    confidence_thresholds; lookup_k: both prompt-lookup rows' K (default k); adaptive_k: the adaptive rows'
    upper bound (default: the sweep's largest K, else k). paths: every speclab row again on those fast paths
    as "<row> (fast)"; block: every chain row under the rejection rule again with block verification as
    "<row> (block)" (chapter 13); time_alone: draft-model rows' passes also timed alone (BenchRow.alone_ms);
    eos_token_id: stop each prompt there, as Spec-Bench does (None: max_new_tokens past it)."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    unknown = [m for m in methods if m not in METHODS + REFERENCE_METHODS]
    if unknown:
        raise ValueError(unknown_methods_message(unknown))
    methods = expand_methods(methods, lookahead, lookup_choices, layer_skip, k_sweep, confidence_thresholds)
    drafters = make_drafters(methods, target, draft, weights, lookahead, lookup_choices, layer_skip, k_sweep,
                             confidence_thresholds)

    def own_drafters(rows) -> dict:
        """A fresh drafter for each row of `rows` (a row, or its block row) whose drafter learns from earlier
        requests (suffix decoding's global tree), for a row derived from it (block, fast): sharing one, a
        row would draft from the other's output of the same prompt."""
        fresh = {}
        for row in rows:
            base = row.removesuffix(BLOCK)
            if base in drafters and learns_from_requests(drafters[base]):
                fresh[row] = make_drafters((base,), target, draft, weights, lookahead, lookup_choices, layer_skip,
                                           k_sweep, confidence_thresholds)[base]
        return fresh
    # model-free drafters draft almost for free: they take lookup_k
    is_lookup = {m: m == "hf prompt-lookup" or m.startswith(("speclab prompt-lookup", "speclab suffix", "arctic suffix"))
                 for m in methods}
    k_of = {m: lookup_k if lookup_k is not None and is_lookup[m] else k for m in methods}
    k_of.update({row: n for row, n in k_sweep_rows(k_sweep).items() if row in methods})
    upper = adaptive_k or max(k_sweep or [max(k, ADAPTIVE_K)])
    confidence = {row: dict(confidence_threshold=t) for row, t in confidence_rows(confidence_thresholds).items()}
    adaptive = ("speclab adaptive-heuristic", *confidence)
    k_of.update({m: upper for m in adaptive if m in methods})
    # rows that decode with another schedule or acceptance rule (the registry's decode_options)
    options_of = {**decode_options(methods), **confidence}
    # a drafter with a tree of its own depth (EAGLE-2's) drafts at that depth: K would only cut it
    # (the draft-model rows hold the model itself, which has none)
    own = {m: getattr(d, "own_depth", None) for m, d in drafters.items() if m in methods}
    k_of.update({m: depth for m, depth in own.items() if depth is not None})
    if block:
        # chain drafters: a draft model, or a Drafter that drafts batches, which only chains do
        # (Drafter.check_batch); rows with another acceptance rule keep it
        chains = [m for m in methods if m in drafters and (isinstance(drafters[m], torch.nn.Module)
                                                          or getattr(drafters[m], "batched", False))
                  and "acceptance" not in options_of.get(m, {})]
        fresh = own_drafters(chains)
        for m in chains:
            drafters[m + BLOCK], k_of[m + BLOCK] = fresh.get(m, drafters[m]), k_of[m]
            options_of[m + BLOCK] = {**options_of.get(m, {}), "acceptance": "block"}
        methods = (*methods, *(m + BLOCK for m in chains))
    fast_drafters = drafters
    if paths:
        fast_drafters = {**drafters, **own_drafters(methods)}
        methods = (*methods, *(m + FAST for m in methods if m.startswith("speclab ")))

    def drafters_of(method: str) -> dict:
        return fast_drafters if method.endswith(FAST) else drafters

    def run_row(method: str, prompt: torch.Tensor, max_new: int, row_seed: int):
        row = method.removesuffix(FAST)
        with fast_paths(paths if method.endswith(FAST) else {}):
            return run_method(row, target, draft, prompt, k_of[row], max_new, temperature, row_seed,
                              drafters_of(method), options_of.get(row), eos_token_id)

    if warmup:
        # a fast row decodes the longest prompt in full, so that every compiled graph the timed runs meet
        # (each pass width, each bucket of cache the contexts reach) compiles here, not inside a timed run
        longest = max(prompts, key=len)
        for method in methods:
            fast = method.endswith(FAST)
            run_row(method, longest if fast else prompts[0], max_new_tokens if fast else min(16, max_new_tokens),
                    seed)

    def decode(method: str, i: int):
        drafter = drafters_of(method).get(method.removesuffix(FAST))
        if i == 0 and hasattr(drafter, "forget_requests"):
            drafter.forget_requests()  # each pass over the prompts starts afresh
        tokens, seconds, stats = run_row(method, prompts[i], max_new_tokens, seed + i)
        return seconds, (tokens.tolist(), stats, seconds)

    # the draft model's passes timed alone, as one more run in the rotation: each prompt's costs at its own
    # mean context (prompt + half the new tokens), in the same minutes as the loop that paid them
    alone_rows = [m for m in methods if time_alone and m.removesuffix(FAST) == "speclab speculative"]

    def alone(method: str, i: int):
        with fast_paths(paths if method.endswith(FAST) else {}):
            context = len(prompts[i]) + max_new_tokens // 2
            return 0.0, costs_alone(target, draft, context, k_of["speclab speculative"] + 1, seed=seed + i)

    timed = time_interleaved({**{m: partial(decode, m) for m in methods},
                              **{(ALONE, m): partial(alone, m) for m in alone_rows}}, len(prompts), repeats, progress)
    # per method, per repeat: (seconds, token lists, stats list, seconds per prompt)
    runs = {m: [(seconds, *map(list, zip(*results))) for seconds, results in timed[m]] for m in methods}
    rows = []
    reference = runs["speclab target-only"][0][1] if "speclab target-only" in runs else None
    for method in methods:
        times = [r[0] for r in runs[method]]
        median = sorted(range(len(times)), key=times.__getitem__)[len(times) // 2]
        seconds, outputs, stats, per_prompt = runs[method][median]
        row = BenchRow(method, new_tokens=sum(len(o) for o in outputs), seconds=seconds, repeat_seconds=times,
                       stats=GenerationStats.combine(stats) if stats[0] is not None else None,
                       prompt_seconds=per_prompt)
        if reference is not None and method != "speclab target-only" and temperature == 0:
            row.matches_target_only = outputs == reference
        if method in alone_rows:
            samples = [costs for _, per_prompt in timed[(ALONE, method)] for costs in per_prompt]
            row.alone_ms = {key: statistics.median(c[key] for c in samples) for key in samples[0]}
        rows.append(row)
    return rows


# A bootstrap sees only the spread among the prompts it is given: a few alike prompts give a narrow
# interval that the next few can land far outside. Below this many prompts the bench shows none.
MIN_INTERVAL_PROMPTS = 8


def prepare_fast_paths(target, draft, mode: str = "static", max_width: int = 9
                       ) -> dict[torch.nn.Module, FastPath]:
    """The fast paths of the pair's models (enable_fast_path), built and warmed up once, the target's
    verify passes padded to the cheapest measured width up to max_width (tune_verify_widths); left
    switched off, for run_bench to switch on row by row."""
    paths = {model: enable_fast_path(model, mode) for model in (target, draft) if model is not None}
    try:
        tune_verify_widths(target, max_width)
    finally:
        for model in paths:
            disable_fast_path(model)
    return paths


def speedup_interval(row: BenchRow, base: BenchRow, level: float = 0.95, draws: int = 2000, seed: int = 0,
                     min_prompts: int = MIN_INTERVAL_PROMPTS) -> tuple[float, float] | None:
    """How far `row`'s speedup over `base` (their times summed over the prompts, in each one's median
    repeat: the table's ratio) moves with the prompts drawn: a percentile bootstrap over prompts, each
    draw one resample of the prompts for both rows. Prompts differ far more than repeats do (EAGLE-2 ran from
    1.7x to 5.7x prompt by prompt), so this, not the spread of the repeats, says how well a ratio is
    pinned. None with fewer than `min_prompts` prompts (see MIN_INTERVAL_PROMPTS)."""
    n = len(row.prompt_seconds)
    if n < max(2, min_prompts) or len(base.prompt_seconds) != n:
        return None
    spec, ref = torch.tensor(row.prompt_seconds), torch.tensor(base.prompt_seconds)
    picks = torch.randint(n, (draws, n), generator=torch.Generator().manual_seed(seed))
    ratios = (ref[picks].sum(1) / spec[picks].sum(1)).sort().values
    tail = (1 - level) / 2
    return ratios[int(tail * draws)].item(), ratios[min(draws - 1, int((1 - tail) * draws))].item()


def round_costs(row: BenchRow, base: BenchRow) -> dict[str, float]:
    """Where `row`'s rounds went, each term in decode steps of `base` (target-only: its target time
    per token): "draft", "verify" and "other" per round, beside "tpr" (tokens a round emitted, one per
    target pass), "passes" (drafter passes a round) and "nodes" (drafts verified a round). The speedup
    is about tpr / (draft + verify + other): tokens per pass belong to the drafter and the text, the
    round's cost in decode steps to the machine, which is why one drafter's ratio moves between
    machines while its tokens per pass do not."""
    if not row.has_drafts or base.stats is None or base.stats.k or not base.stats.rounds:
        raise ValueError(f"round_costs needs a row that drafted ({row.method!r}) and a target-only base row "
                         f"({base.method!r})")
    st, step = row.stats, base.stats.target_s / base.stats.rounds
    per_round = lambda seconds: seconds / st.rounds / step  # noqa: E731
    return dict(tpr=st.mean_tokens_per_round, draft=per_round(st.draft_s), verify=per_round(st.target_s),
                other=per_round(st.other_s), passes=st.draft_calls / st.rounds, nodes=st.drafted / st.rounds)


def row_label(method: str) -> str:
    """A row's name in a table: speclab's rows without the "speclab " prefix (transformers' keep "hf ")."""
    return method.removeprefix("speclab ")


def format_table(rows: list[BenchRow], baseline: str = "speclab target-only") -> str:
    """The rows as a table about 90 characters wide, so that a page shows it whole: tokens/s, the
    speedup over `baseline` and its 95% range over the prompts (speedup_interval), acceptance
    (of drafts; alpha, per token), tokens a target pass emits, drafts and verified positions a round,
    and whether the greedy output equals target-only; a legend under it says which is which, and a
    row marked * decodes with a rule that is not lossless."""
    base = next((r for r in rows if r.method == baseline), rows[0])
    # a row whose rule does not keep the target's distribution (typical acceptance) is marked
    label = {r.method: row_label(r.method) + ("*" if r.stats is not None and not r.stats.lossless else "")
             for r in rows}
    name = max([12] + [len(n) for n in label.values()])  # sweeps' rows carry their setting in the name
    lines = [f"{'method':{name}} {'tok/s':>6} {'speedup':>7} {'95% range':>11} {'accept':>6} {'alpha':>5} "
             f"{'tok/pass':>8} {'drafts':>6} {'width':>5} {'same':>4}"]
    for r in rows:
        accept = f"{r.acceptance_rate:.3f}" if r.acceptance_rate is not None else "-"
        alpha = f"{r.alpha:.3f}" if r.alpha is not None else "-"
        tpr = f"{r.tokens_per_round:.2f}" if r.tokens_per_round is not None else "-"
        per_round = f"{r.stats.drafted / r.stats.rounds:.1f}" if r.has_drafts else "-"
        width = f"{r.stats.verified_positions / r.stats.rounds:.1f}" if r.has_drafts else "-"
        same = "-" if r.matches_target_only is None else ("yes" if r.matches_target_only else "no")
        interval = speedup_interval(r, base) if r is not base else None
        spread = f"{interval[0]:.2f}-{interval[1]:.2f}x" if interval else "-"
        speedup = f"{r.tokens_per_s / base.tokens_per_s:.2f}x"
        lines.append(f"{label[r.method]:{name}} {r.tokens_per_s:6.1f} {speedup:>7} {spread:>11} {accept:>6} "
                     f"{alpha:>5} {tpr:>8} {per_round:>6} {width:>5} {same:>4}")
    tokens = ", ".join(str(n) for n in sorted({r.new_tokens for r in rows}))
    lines += [f"speedup: tokens/s over {row_label(base.method)}; 95% range: a bootstrap over the prompts;",
              "accept: of drafted tokens; alpha: per token; tok/pass: tokens a target pass emits;",
              "drafts, width: drafted tokens and verified positions a round; same: greedy output",
              f"equals target-only; new tokens a row: {tokens}"]
    if any(n.endswith("*") for n in label.values()):
        lines.append("*: not lossless: its rule changes the sampled distribution (typical acceptance)")
    prompts = len(base.prompt_seconds)
    if 2 <= prompts < MIN_INTERVAL_PROMPTS:
        lines.append(f"(no interval over {prompts} prompts: a bootstrap needs {MIN_INTERVAL_PROMPTS} or more to say "
                     "how far")
        lines.append(" a ratio moves with the prompts; --num-prompts 16 for a record)")
    return "\n".join(lines)


@dataclass
class ModelCheck:
    """The speedup model against a measured run, every cost in units of one target-only token."""

    k: int
    unit_ms: float        # target-only time per token (a decode step and its sampling)
    alpha: float          # measured per-token acceptance
    verify_cost: float    # one verification pass (K + 1 positions), as paid in the loop
    c: float              # one draft step, as paid in the loop
    other: float          # per round: everything else (the rule, sampling the correction, rollback)
    measured: float       # measured speedup of the decode phase (prefill excluded on both sides)
    tokens_per_round: float

    @property
    def modelled(self) -> float:
        """theory.speedup from the measured alpha, c and verify cost."""
        return theory.speedup(self.alpha, self.k, self.c, self.verify_cost)

    @property
    def ratio(self) -> float:
        return self.measured / self.modelled

    def __str__(self) -> str:
        return (f"model check (costs in target-only tokens of {self.unit_ms:.2f} ms, as paid in the loop): "
                f"alpha {self.alpha:.3f} -> E(alpha, K={self.k}) = {theory.expected_tokens(self.alpha, self.k):.2f} "
                f"tokens/round (measured {self.tokens_per_round:.2f}); verify pass {self.verify_cost:.2f}, "
                f"draft step c = {self.c:.3f}, other {self.other:.2f} per round\n"
                f"speedup: measured {self.measured:.2f}x, modelled {self.modelled:.2f}x "
                f"(measured/modelled {self.ratio:.2f})")


def model_check(base: GenerationStats, spec: GenerationStats) -> ModelCheck:
    """Measured speedup of `spec` (speculative runs) over `base` (target-only runs of the same prompts)
    against theory.speedup(alpha, K, c, verify_cost).

    The costs come from the same runs (GenerationStats times each phase): one target-only token is
    the unit; the verify pass is the target's time per round, c the drafter's time per drafted token.
    So c is what a draft step costs *inside* the loop, which on a CPU is more than it costs alone (the
    target's pass evicts the draft's weights from the cache). What the model leaves out (the rule,
    rollback, Python between passes) shows up as `other` and in the ratio. The prefill, the same work
    for both methods, is excluded on both sides.
    """
    if not spec.drafted or not base.new_tokens or base.k:
        raise ValueError("model_check needs target-only stats and speculative stats that drafted tokens")
    unit = (base.wall_s - base.prefill_s) / base.new_tokens
    spec_decode = spec.wall_s - spec.prefill_s
    return ModelCheck(
        k=spec.k, unit_ms=1000 * unit, alpha=spec.alpha, verify_cost=spec.target_s / spec.rounds / unit,
        c=spec.draft_s / spec.drafted / unit,
        other=(spec_decode - spec.target_s - spec.draft_s) / spec.rounds / unit,
        measured=unit * spec.new_tokens / spec_decode, tokens_per_round=spec.mean_tokens_per_round)
