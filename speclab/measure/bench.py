"""Side-by-side speed on one pair, one prompt set and one set of settings, in one process: speclab
target-only, every registered method's bench rows (speclab.methods.REGISTRY), and transformers'
generate (target-only, assisted generation, prompt lookup), each for max_new_tokens (EOS ignored).

The bench is a plan: a tuple of Row, each saying what decodes it (a registered method and its options,
target-only, transformers' generate, or a reference implementation), with which K and speculative_generate
options, on which path; its label is made of that data. plan() makes it from the rows asked for and the
sweeps the registry names (Method.bench_sweeps), variants() adds the block-verified and fast-path rows,
and run_plan times it. Rows are interleaved prompt by prompt in an order rotated from one prompt to the
next, so a machine that slows for a moment slows every row alike; each row's time is its median repeat.
model_check compares the measured speedup with theory.speedup.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
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
from speclab.methods import REGISTRY, by_bench_row, current_row, load_drafter
from speclab.methods.draft_model import K_SWEEP
from speclab.methods.flags import Setting, Sweep
from speclab.measure import arctic_suffix
from speclab.measure.profiling import costs_alone, tune_verify_widths
from speclab.runner import FastPath, disable_fast_path, enable_fast_path, fast_paths, model_device
from speclab.stats import GenerationStats

TARGET_ONLY = "speclab target-only"
# transformers' own generate: each row and how it drafts (None: it does not)
HF_ROWS = {"hf target-only": None, "hf assisted": "assisted", "hf prompt-lookup": "prompt-lookup"}
HF_METHODS = tuple(HF_ROWS)
HF_LESSON = ("hf assisted", "hf prompt-lookup")  # transformers' two against speclab's, in the lesson
# rows only when asked for: another implementation of a speclab method, installed apart (chapter 13); Arctic
# Inference's suffix decoding, whose drafts are lookups as speclab's are
REFERENCE_METHODS = tuple(arctic_suffix.ROWS)
ADAPTIVE_K = 8  # the adaptive rows' upper bound on K without a K sweep: room to grow where drafts are accepted
FAST = " (fast)"  # a row run on the fast path: "speclab eagle3 (fast)"
BLOCK = " (block)"  # a chain row verified jointly (block verification): "speclab draft_model (block)"
ADAPTIVE = ("k_schedule", "confidence_threshold")  # speculative_generate options that make K adaptive


def bench_methods() -> tuple[str, ...]:
    """The rows the bench knows, in the table's order: speclab target-only, every registered method's rows
    (read from the registry now), transformers' rows."""
    return (TARGET_ONLY, *(row for m in REGISTRY.values() for row in m.bench_rows), *HF_METHODS)


METHODS = bench_methods()  # as the registry stood when the bench was imported


def draft_model_row() -> str:
    """The draft model's own row ("speclab draft_model"): the first row of the method that drafts with the
    pair's draft model; model_check reads it, and run_bench's time_alone times its passes alone."""
    return next(row for m in REGISTRY.values() if m.uses_draft_model() for row in m.bench_rows)


# ================================================================ the plan
def labelled(row: str, text: str) -> str:
    """The label of a setting `text` of the bench row `row`: "speclab layer_skip E=22+adapter"."""
    return f"{row} {text}" if text else row


def registered_sweeps() -> dict[str, Sweep]:
    """Every sweep the registry's bench rows take (BenchRow.sweep, declared by the method modules), by name."""
    found: dict[str, Sweep] = {}
    for m in REGISTRY.values():
        for sweep in m.bench_sweeps.values():
            if found.setdefault(sweep.name, sweep) is not sweep:
                raise ValueError(f"two bench sweeps are named {sweep.name!r} (the second {m.name}'s): rename one")
    return found


@dataclass(frozen=True)
class Settings:
    """What shapes the rows (run_bench's arguments of the same names): K, prompt lookup's K (lookup_k,
    default k), the adaptive rows' upper bound (adaptive_k, default: the K sweep's largest, else the larger
    of k and ADAPTIVE_K), and `swept`, the values of the registered sweeps (registered_sweeps: lookahead,
    lookup_choices, layer_skip, k_sweep, confidence_thresholds...) by name; a sweep not named takes its default."""

    k: int = 4
    lookup_k: int | None = None
    adaptive_k: int | None = None
    swept: Mapping[str, Sequence | None] = field(default_factory=dict)

    def __post_init__(self):
        unknown = sorted(set(self.swept) - set(registered_sweeps()))
        if unknown:
            raise ValueError(f"no bench sweep is named {unknown}; the sweeps: {sorted(registered_sweeps())}, and "
                             "the settings k, lookup_k and adaptive_k")

    @classmethod
    def of(cls, k: int = 4, lookup_k: int | None = None, adaptive_k: int | None = None, **swept) -> Settings:
        """Settings(k, lookup_k, adaptive_k, swept) from keywords: Settings.of(k=3, lookahead=[(2, 2, 1)])."""
        return cls(k, lookup_k, adaptive_k, swept)

    def values(self, sweep: Sweep) -> Sequence:
        """The values `sweep` takes here: those given, else its default."""
        given = self.swept.get(sweep.name)
        return sweep.default if given is None else given

    @property
    def lookup(self) -> int:
        """The K of rows whose drafts are lookups in the text, nearly free to make."""
        return self.k if self.lookup_k is None else self.lookup_k

    @property
    def adaptive(self) -> int:
        """The adaptive rows' upper bound on K (the adaptive rows are the draft model's, as its K sweep is)."""
        return self.adaptive_k or max(self.swept.get(K_SWEEP.name) or [max(self.k, ADAPTIVE_K)])


def swept_rows() -> dict[str, Sweep]:
    """Every registered row a sweep makes rows of, and that sweep (Method.bench_sweeps)."""
    return {row: sweep for m in REGISTRY.values() for row, sweep in m.bench_sweeps.items()}


def sweeps(settings: Settings) -> dict[str, tuple[Setting, ...]]:
    """The rows each swept registered row stands for, in order."""
    return {row: sweep.rows(settings.values(sweep)) for row, sweep in swept_rows().items()}


def unknown_methods_message(unknown: list[str]) -> str:
    """What to change when `unknown` are not bench methods; a row label of one setting, such as
    "speclab layer_skip E=8", is named with the row and the option that makes it."""
    swept = swept_rows()
    bases = {m: max((row for row in swept if m.startswith(row + " ")), key=len, default=None) for m in unknown}
    hints = [f"{m!r} is a row of {row!r}: ask for {row!r} and set the row with {swept[row].option}"
             for m, row in bases.items() if row is not None]
    return (f"unknown method(s) {unknown}; choose from {bench_methods() + REFERENCE_METHODS}"
            + "".join(f"\n{h}" for h in hints))


@dataclass(frozen=True)
class Row:
    """One bench row as data. `base`: the row it is (TARGET_ONLY, a registered method's bench row, a
    transformers' or a reference row); `engine`: what decodes it, "speclab" (`method`: the registered
    method, None for target-only), "transformers" (`method`: HF_ROWS' mode) or "reference"; `setting`: a
    sweep's value, named in the label; `load` its drafter's options, `decode` speculative_generate's
    (acceptance rule, K schedule, confidence stop), `k` its K; `block`: verified jointly; `fast`: on the
    fast path; `alone`: the draft model's passes are timed alone beside it. The label is made of these."""

    base: str = TARGET_ONLY
    engine: str = "speclab"
    method: str | None = None
    setting: str = ""
    load: Mapping = field(default_factory=dict)
    decode: Mapping = field(default_factory=dict)
    k: int = 4
    block: bool = False
    fast: bool = False
    alone: bool = False

    @property
    def label(self) -> str:
        """Its name in tables and records: "speclab layer_skip E=22+adapter", "speclab draft_model (block) (fast)"."""
        return labelled(self.base, self.setting) + (BLOCK if self.block else "") + (FAST if self.fast else "")

    @property
    def of(self) -> str | None:
        """The label of the row it is a variant of (block verification, the fast path); None: none."""
        return replace(self, block=False, fast=False).label if self.block or self.fast else None

    @property
    def target_only(self) -> bool:
        """Whether it is speclab's target-only (on either path)."""
        return self.engine == "speclab" and self.method is None

    @property
    def drafts(self) -> bool:
        """Whether speculative_generate decodes it with a drafter (a registered method or a reference)."""
        return self.engine == "reference" or (self.engine == "speclab" and self.method is not None)

    @property
    def needs_draft_model(self) -> bool:
        """Whether it drafts with the pair's draft model (the draft-model rows, transformers' assisted)."""
        if self.engine == "transformers":
            return self.method == "assisted"
        method = REGISTRY[self.method] if self.engine == "speclab" and self.method is not None else None
        return method is not None and method.uses_draft_model(self.base)


def expand(methods, settings: Settings = Settings()) -> list[tuple[str, Setting]]:
    """(the row it is a setting of, its setting) for every row `methods` stand for, in order: a swept row
    becomes one row per setting; a row already expanded keeps its setting; any other stands for itself."""
    swept = sweeps(settings)
    expanded = {labelled(row, s.text): (row, s) for row, values in swept.items() for s in values}
    out: dict[str, tuple[str, Setting]] = {}
    for m in map(current_row, methods):  # a label of an older record's is read as the row's label now
        for row, setting in ([(m, s) for s in swept[m]] if m in swept else [expanded.get(m, (m, Setting()))]):
            out[labelled(row, setting.text)] = (row, setting)
    return list(out.values())


def row_of(base: str, setting: Setting, settings: Settings = Settings()) -> Row:
    """The row of `setting` of the bench row `base` (TARGET_ONLY, a transformers' row, a reference row or
    a registered method's), its K chosen: a K sweep's own; the upper bound for an adaptive schedule; the
    lookup K for drafts that are lookups in the text (Method.drafts_by_lookup); else k."""
    if base == TARGET_ONLY:
        return Row(k=settings.k)
    if base in HF_ROWS:
        mode = HF_ROWS[base]
        return Row(base, "transformers", mode, k=settings.lookup if mode == "prompt-lookup" else settings.k)
    if base in arctic_suffix.ROWS:
        return Row(base, "reference", base, load=arctic_suffix.ROWS[base], k=settings.lookup)
    method = by_bench_row(base)
    if method is None:
        raise ValueError(unknown_methods_message([base]))
    decode = {**method.decode_options.get(base, {}), **setting.decode}
    k = setting.k or (settings.adaptive if any(key in decode for key in ADAPTIVE)
                      else settings.lookup if method.drafts_by_lookup else settings.k)
    return Row(base, "speclab", method.name, setting.text, {**method.bench_rows[base], **setting.load}, decode, k,
               alone=base == draft_model_row() and not setting.text)


def plan(methods, settings: Settings = Settings()) -> tuple[Row, ...]:
    """The rows `methods` stand for (expanded by the sweeps), in order."""
    return tuple(row_of(base, setting, settings) for base, setting in expand(methods, settings))


def expand_methods(methods, **swept) -> tuple[str, ...]:
    """The labels of the rows `methods` stand for, in order; `swept`: the sweeps' values by name (Settings)."""
    return tuple(labelled(row, setting.text) for row, setting in expand(methods, Settings(swept=swept)))


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


def build_drafter(row: Row, target, draft, weights: Mapping[str, str | Path] | None = None):
    """A new drafter for `row` (one that drafts: Row.drafts)."""
    if row.engine == "reference":
        return arctic_suffix.ArcticSuffixDrafter(**row.load)
    return drafter_for(row.base, row.load, target, draft, weights)


def learns_from_requests(drafter) -> bool:
    """Whether a drafter keeps something from one request to the next (it overrides forget_requests)."""
    return isinstance(drafter, Drafter) and type(drafter).forget_requests is not Drafter.forget_requests


def add_drafters(rows, drafters: dict, target, draft, weights: Mapping[str, str | Path] | None = None) -> dict:
    """`drafters` (row label -> drafter) with one for each row of `rows` that drafts and has none yet: a
    variant shares its row's, unless that one learns from requests (suffix decoding's global tree), for
    sharing it, one row would draft from the other's output of the same prompt."""
    for row in rows:
        if row.drafts and row.label not in drafters:
            shared = drafters.get(row.of)
            fresh = shared is None or learns_from_requests(shared)
            drafters[row.label] = build_drafter(row, target, draft, weights) if fresh else shared
    return drafters


def own_depths(rows, drafters: Mapping) -> tuple[Row, ...]:
    """`rows` with the K of a drafter whose tree has a depth of its own (EAGLE-2's) set to that depth: a K
    would only cut it."""
    depth = {label: getattr(d, "own_depth", None) for label, d in drafters.items()}
    return tuple(replace(r, k=depth[r.label]) if depth.get(r.label) is not None else r for r in rows)


def drafts_chains(row: Row, drafter) -> bool:
    """Whether block verification applies: a chain drafter (a draft model, or a Drafter that drafts batches,
    which only chains do: Drafter.check_batch) under the rejection rule."""
    chain = isinstance(drafter, torch.nn.Module) or getattr(drafter, "batched", False)
    return drafter is not None and chain and "acceptance" not in row.decode


def variants(rows, drafters: Mapping, block: bool = False, fast: bool = False) -> tuple[Row, ...]:
    """`rows`, then with `block` each chain row again with block verification ("<row> (block)"), then with
    `fast` every speclab row (those of `block` too) again on the fast path ("<row> (fast)")."""
    rows = tuple(rows)
    if block:
        rows += tuple(replace(r, block=True, decode={**r.decode, "acceptance": "block"}, alone=False)
                      for r in rows if drafts_chains(r, drafters.get(r.label)))
    if fast:
        rows += tuple(replace(r, fast=True) for r in rows if r.engine == "speclab")
    return rows


def make_drafters(methods, target, draft, weights: Mapping[str, str | Path] | None = None, **swept) -> dict:
    """The drafter of each row of `methods` that drafts (expanded by the sweeps: their values by name), by row
    label."""
    return add_drafters(plan(methods, Settings(swept=swept)), {}, target, draft, weights)


@dataclass
class Plan:
    """The rows to time and their drafters (row label -> drafter), built once for the whole bench."""

    rows: tuple[Row, ...]
    drafters: dict


def plan_bench(methods, target, draft, settings: Settings = Settings(), weights=None, block: bool = False,
               fast: bool = False) -> Plan:
    """The bench's plan: the rows of `methods` (bench rows, or an older record's labels for them), their
    drafters, each row's K (own_depths), then the variants (block verification, the fast path) and theirs."""
    unknown = [m for m in methods if current_row(m) not in bench_methods() + REFERENCE_METHODS]
    if unknown:
        raise ValueError(unknown_methods_message(unknown))
    rows = plan(methods, settings)
    drafters = add_drafters(rows, {}, target, draft, weights)
    rows = variants(own_depths(rows, drafters), drafters, block, fast)
    return Plan(rows, add_drafters(rows, drafters, target, draft, weights))


def default_methods(target, draft=None, weights: Mapping[str, str | Path] | None = None,
                    settings: Settings = Settings()) -> tuple[str, ...]:
    """Every row that can run on this target: a registered method's rows only where its weights (heads,
    an EAGLE head, an MTP module, the exit adapters of every layer-skip row of `settings`) fit it."""
    def fits(row: Row) -> bool:
        try:
            build_drafter(row, target, draft, weights)
        except (OSError, ValueError, TypeError):
            return False
        return True

    def trained(row: Row) -> bool:  # rows that read weights trained for a target (the draft is given)
        method = REGISTRY[row.method]  # a row whose drafter is another method's (lookup_first's) reads that one's
        return not row.needs_draft_model and (method.bundled is not None or "drafter" in row.load)

    methods = bench_methods()
    rows = plan(methods, settings)
    unfit = {row.base for row in rows if row.engine == "speclab" and row.method and trained(row) and not fits(row)}
    return tuple(m for m in methods if m not in unfit)


def lesson_methods(target, draft, weights: Mapping[str, str | Path] | None = None,
                   settings: Settings = Settings()) -> tuple[str, ...]:
    """What `python -m speclab bench` runs by default, the course's lesson in about two minutes on 2 cores:
    target-only, each method's lesson rows (the registry's `lesson_rows`) and transformers' two, where they
    fit the target; `--all` runs every row."""
    lesson = {TARGET_ONLY, *HF_LESSON, *(row for m in REGISTRY.values() for row in m.lesson_rows)}
    return tuple(m for m in default_methods(target, draft, weights, settings) if m in lesson)


def needs_draft_model(label: str) -> bool:
    """Whether a bench row (a label of bench_methods or a swept one) drafts with the pair's draft model."""
    try:
        return any(row.needs_draft_model for row in plan((label,)))
    except ValueError:  # not a bench row: run_bench says so
        return False


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
    row: Row | None = field(default=None, compare=False, repr=False)  # the plan's row it measured (not recorded)

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
        what was recorded as the bench did. The stats' derived entries (rates, means) are recomputed; a row
        recorded under an older label is read under its label now (methods.current_row)."""
        stats = record.get("stats")
        if stats is not None:
            stats = GenerationStats(**{f.name: stats[f.name] for f in fields(GenerationStats) if f.name in stats})
        return cls(current_row(record["method"]), record["new_tokens"], record["seconds"], stats,
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


def transformers_options(row: Row, draft) -> dict:
    """generate()'s options of a transformers row: assisted generation with the pair's draft, or prompt lookup,
    at the row's K."""
    if row.method == "assisted":
        return dict(assistant_model=draft, num_assistant_tokens=row.k, num_assistant_tokens_schedule="constant",
                    assistant_confidence_threshold=0.0)
    if row.method == "prompt-lookup":
        return dict(prompt_lookup_num_tokens=row.k)
    return {}


def decode_row(row: Row, target, draft, drafter, prompt: torch.Tensor, max_new_tokens: int, temperature: float,
               seed: int, eos_token_id: int | None = None):
    """(new token ids, seconds, stats or None) of `row` decoding one prompt, with `drafter` (its Plan's) where
    it drafts. `eos_token_id`: stop at this token (with it)."""
    common = dict(max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, eos_token_id=eos_token_id)
    with timer(model_device(target)) as t:
        if row.engine == "transformers":
            result = _hf_generate(target, prompt, max_new_tokens, temperature, seed, eos_token_id,
                                  **transformers_options(row, draft))
        elif row.drafts:
            result = speculative_generate(target, drafter, prompt, k=row.k, **common, **row.decode)
        else:
            result = generate(target, prompt, **common)
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


ALONE = "alone"  # run_plan's key for the passes timed alone beside a row


@dataclass(frozen=True)
class Decoding:
    """How every row decodes each prompt: max_new_tokens, temperature, the seed (prompt i's: seed + i), and
    eos_token_id (stop there, as Spec-Bench does; None: go max_new_tokens past it)."""

    max_new_tokens: int = 128
    temperature: float = 0.0
    seed: int = 0
    eos_token_id: int | None = None


@dataclass
class Bench:
    """A plan on a pair and its prompts: what a row's decode of a prompt, the warm-up and the passes
    timed alone need. `paths`: the pair's fast paths, switched on for the rows that run on them."""

    target: torch.nn.Module
    draft: torch.nn.Module | None
    prompts: list[torch.Tensor]
    plan: Plan
    decoding: Decoding = Decoding()
    paths: Mapping[torch.nn.Module, FastPath] | None = None

    def decode(self, row: Row, prompt: torch.Tensor, max_new_tokens: int, seed: int):
        with fast_paths(self.paths if row.fast else {}):
            return decode_row(row, self.target, self.draft, self.plan.drafters.get(row.label), prompt, max_new_tokens,
                              self.decoding.temperature, seed, self.decoding.eos_token_id)

    def warm_up(self) -> None:
        """Each row once; a fast row decodes the longest prompt in full, so that every compiled graph the timed
        runs meet (each pass width, each bucket of cache the contexts reach) compiles here, not in a timed run."""
        longest, new = max(self.prompts, key=len), self.decoding.max_new_tokens
        for row in self.plan.rows:
            self.decode(row, longest if row.fast else self.prompts[0], new if row.fast else min(16, new),
                        self.decoding.seed)

    def run(self, row: Row, i: int):
        """Prompt i, timed: (seconds, (token list, stats, seconds)); each pass over the prompts starts afresh."""
        drafter = self.plan.drafters.get(row.label)
        if i == 0 and hasattr(drafter, "forget_requests"):
            drafter.forget_requests()
        tokens, seconds, stats = self.decode(row, self.prompts[i], self.decoding.max_new_tokens,
                                             self.decoding.seed + i)
        return seconds, (tokens.tolist(), stats, seconds)

    def alone(self, row: Row, i: int):
        """The draft model's passes timed alone, as one more run in the rotation: at prompt i's mean context
        (prompt + half the new tokens), in the same minutes as the loop that paid them."""
        with fast_paths(self.paths if row.fast else {}):
            context = len(self.prompts[i]) + self.decoding.max_new_tokens // 2
            return 0.0, costs_alone(self.target, self.draft, context, row.k + 1, seed=self.decoding.seed + i)


def measured(row: Row, repeats: list[tuple], reference: list | None, temperature: float,
             alone: list[tuple] | None = None) -> BenchRow:
    """The BenchRow of `row` from its timed repeats ((seconds, [(tokens, stats, seconds) per prompt]) each):
    the median repeat's totals (of an even number, the slower middle one), whether its greedy outputs equal
    `reference` (target-only's), and the medians of its passes timed alone."""
    runs = [(seconds, *map(list, zip(*results))) for seconds, results in repeats]
    times = [r[0] for r in runs]
    seconds, outputs, stats, per_prompt = runs[sorted(range(len(times)), key=times.__getitem__)[len(times) // 2]]
    out = BenchRow(row.label, new_tokens=sum(len(o) for o in outputs), seconds=seconds, repeat_seconds=times,
                   stats=GenerationStats.combine(stats) if stats[0] is not None else None, prompt_seconds=per_prompt,
                   row=row)
    if reference is not None and not (row.target_only and not row.fast) and temperature == 0:
        out.matches_target_only = outputs == reference
    if alone is not None:
        samples = [costs for _, per_prompt in alone for costs in per_prompt]
        out.alone_ms = {key: statistics.median(c[key] for c in samples) for key in samples[0]}
    return out


def run_plan(bench: Bench, repeats: int = 1, warmup: bool = True, time_alone: bool = False,
             progress: Callable[[str], None] | None = None) -> list[BenchRow]:
    """Each row of the plan over every prompt, `repeats` times, interleaved prompt by prompt (time_interleaved);
    a BenchRow per row. time_alone: the draft model's row's passes also timed alone (BenchRow.alone_ms)."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if warmup:
        start = time.perf_counter()
        bench.warm_up()
        if progress:  # a fast row's graphs are recorded (or compiled) here: what "graphs" makes seconds
            progress(f"warm-up, each row once: {time.perf_counter() - start:.1f} s")
    rows = bench.plan.rows
    alone = [row for row in rows if time_alone and row.alone]
    timed = time_interleaved({**{row.label: partial(bench.run, row) for row in rows},
                              **{(ALONE, row.label): partial(bench.alone, row) for row in alone}},
                             len(bench.prompts), repeats, progress)
    base = next((row for row in rows if row.target_only and not row.fast), None)  # the outputs all compare with
    reference = [tokens for tokens, _, _ in timed[base.label][0][1]] if base is not None else None
    return [measured(row, timed[row.label], reference, bench.decoding.temperature,
                     timed[(ALONE, row.label)] if row in alone else None) for row in rows]


def run_bench(target, draft, prompts: list[torch.Tensor], k: int = 4, max_new_tokens: int = 128,
              temperature: float = 0.0, seed: int = 0, methods: Sequence[str] = METHODS, *, repeats: int = 1,
              warmup: bool = True, weights: Mapping[str, str | Path] | None = None,
              paths: Mapping[torch.nn.Module, FastPath] | None = None, block: bool = False,
              time_alone: bool = False, eos_token_id: int | None = None,
              progress: Callable[[str], None] | None = None, **sweeps) -> list[BenchRow]:
    """Each of `methods` over every prompt, `repeats` times, interleaved prompt by prompt; a row per method (a
    row per setting of a swept one) with the totals over the prompts from the median repeat. `sweeps`:
    lookup_k, adaptive_k and the registered sweeps' values by name (Settings.of: lookahead, lookup_choices,
    layer_skip, k_sweep, confidence_thresholds); weights: method name -> its trained weights' directory (default: those shipped);
    paths: every speclab row again on those fast paths as "<row> (fast)"; block: every chain row under the
    rejection rule again with block verification as "<row> (block)" (chapter 13); time_alone: the draft
    model's row's passes also timed alone; eos_token_id: stop each prompt there (None: max_new_tokens past it)."""
    the_plan = plan_bench(methods, target, draft, Settings.of(k=k, **sweeps), weights, block, bool(paths))
    decoding = Decoding(max_new_tokens, temperature, seed, eos_token_id)
    bench = Bench(target, draft, list(prompts), the_plan, decoding, paths)
    return run_plan(bench, repeats, warmup, time_alone, progress)


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
    target pass), "passes" (drafter passes a round), "nodes" (drafts verified a round) and "width" (positions
    a verify pass reads: the pending token, the drafts and any side tokens, lookahead's window). The speedup
    is about tpr / (draft + verify + other): tokens per pass belong to the drafter and the text, the
    round's cost in decode steps to the machine, which is why one drafter's ratio moves between
    machines while its tokens per pass do not."""
    if not row.has_drafts or base.stats is None or base.stats.k or not base.stats.rounds:
        raise ValueError(f"round_costs needs a row that drafted ({row.method!r}) and a target-only base row "
                         f"({base.method!r})")
    st, step = row.stats, base.stats.target_s / base.stats.rounds
    per_round = lambda seconds: seconds / st.rounds / step  # noqa: E731
    return dict(tpr=st.mean_tokens_per_round, draft=per_round(st.draft_s), verify=per_round(st.target_s),
                other=per_round(st.other_s), passes=st.draft_calls / st.rounds, nodes=st.drafted / st.rounds,
                width=st.verified_positions / st.rounds)


def row_label(method: str) -> str:
    """A row's name in a table: speclab's rows without the "speclab " prefix (transformers' keep "hf ")."""
    return method.removeprefix("speclab ")


def format_table(rows: list[BenchRow], baseline: str = TARGET_ONLY) -> str:
    """The rows as a table at most 88 characters wide (a book page's code column) for names of up to 22
    characters: tokens/s, the speedup over `baseline` and its 95% range over the prompts (speedup_interval;
    the column is left out where no row has one), acceptance (of drafts; alpha, per token), tokens a target
    pass emits, drafts and verified positions a round, and whether the greedy output equals target-only; a
    legend under it says which is which, and a row marked * decodes with a rule that is not lossless."""
    base = next((r for r in rows if r.method == baseline), rows[0])
    # a row whose rule does not keep the target's distribution (typical acceptance) is marked
    label = {r.method: row_label(r.method) + ("*" if r.stats is not None and not r.stats.lossless else "")
             for r in rows}
    name = max([12] + [len(n) for n in label.values()])  # sweeps' rows carry their setting in the name
    intervals = {r.method: speedup_interval(r, base) for r in rows if r is not base}
    ranged = any(intervals.values())  # too few prompts: no row has a range, and the footer says why
    lines = [f"{'method':{name}} {'tok/s':>6} {'speedup':>7}" + (f" {'95% range':>11}" if ranged else "")
             + f" {'accept':>6} {'alpha':>5} {'tok/pass':>8} {'drafts':>6} {'width':>5} {'same':>4}"]
    for r in rows:
        accept = f"{r.acceptance_rate:.3f}" if r.acceptance_rate is not None else "-"
        alpha = f"{r.alpha:.3f}" if r.alpha is not None else "-"
        tpr = f"{r.tokens_per_round:.2f}" if r.tokens_per_round is not None else "-"
        per_round = f"{r.stats.drafted / r.stats.rounds:.1f}" if r.has_drafts else "-"
        width = f"{r.stats.verified_positions / r.stats.rounds:.1f}" if r.has_drafts else "-"
        same = "-" if r.matches_target_only is None else ("yes" if r.matches_target_only else "no")
        interval = intervals.get(r.method)
        spread = f"{interval[0]:.2f}-{interval[1]:.2f}x" if interval else "-"
        speedup = f"{r.tokens_per_s / base.tokens_per_s:.2f}x"
        lines.append(f"{label[r.method]:{name}} {r.tokens_per_s:6.1f} {speedup:>7}"
                     + (f" {spread:>11}" if ranged else "")
                     + f" {accept:>6} {alpha:>5} {tpr:>8} {per_round:>6} {width:>5} {same:>4}")
    tokens = ", ".join(str(n) for n in sorted({r.new_tokens for r in rows}))
    prompts = len(base.prompt_seconds)
    lines += [f"speedup: tokens/s over {row_label(base.method)}"
              + ("; 95% range: a bootstrap over the prompts;" if ranged else ";"),
              "accept: of drafted tokens; alpha: per token; tok/pass: tokens a target pass emits;",
              "drafts, width: drafted tokens and verified positions a round; same: greedy output",
              f"equals target-only; new tokens a row, summed over its {prompts} prompts: {tokens}"]
    if any(n.endswith("*") for n in label.values()):
        lines.append("*: not lossless: its rule changes the sampled distribution (typical acceptance)")
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
    def modelled_with_other(self) -> float:
        """The same, with the per-round `other` the formula leaves out priced into every round."""
        return theory.speedup(self.alpha, self.k, self.c, self.verify_cost + self.other)

    @property
    def ratio(self) -> float:
        return self.measured / self.modelled

    def __str__(self) -> str:
        return (f"model check (costs in target-only tokens of {self.unit_ms:.2f} ms, as paid in the loop): "
                f"alpha {self.alpha:.3f} -> E(alpha, K={self.k}) = {theory.expected_tokens(self.alpha, self.k):.2f} "
                f"tokens/round (measured {self.tokens_per_round:.2f}); verify pass {self.verify_cost:.2f}, "
                f"draft step c = {self.c:.3f}, other {self.other:.2f} per round\n"
                f"speedup: measured {self.measured:.2f}x, modelled {self.modelled:.2f}x "
                f"(measured/modelled {self.ratio:.2f}; {self.modelled_with_other:.2f}x with other)")


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
