"""Speculation under load (chapter 11): batched decoding over batch sizes and K, side by side in one
process, and the K a batch size calls for.

Every row decodes the same held-out prompts in batches of B (at least MIN_PROMPTS), EOS ignored, and
reports total tokens/s over the batch's decode time (after its prefill), its ratio to target-only at the
same B, the inter-token latency (a round's time shared by its tokens; mean and 95th percentile, the first
round left out) and `tail`: how many more rounds the slowest sequence took than the average. `predict`
models the crossover from per-batch pass costs (pass_costs) and batch-1 acceptance through
theory.speedup, and k_policy gives the K it predicts best (0: off); the measured policy (measured_policy)
is tuned instead on other held-out prompts, in the same interleaved rotation, never on those it is timed
on, as a deployment would tune vLLM's num_speculative_tokens_per_batch_size.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import torch

from speclab import theory
from speclab.decoding import generate, speculative_generate
from speclab.devices import timer
from speclab.drafting import Drafter
from speclab.methods import current_row, eagle, load_drafter
from speclab.methods.draft_model import ModelDrafter
from speclab.methods.ngram import PromptLookupDrafter
from speclab.measure.profiling import attainable_tflops
from speclab.runner import Pass, fast_path_of, model_device, runner_for
from speclab.stats import GenerationResult

BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)
KS = (1, 2, 4, 8)
TARGET_ONLY = "target-only"
EAGLE = eagle.NAME  # its chain: EAGLE-1's head
DRAFT_MODEL, PROMPT_LOOKUP, EAGLE_CHAIN = ModelDrafter.name, PromptLookupDrafter.name, f"{EAGLE} chain"
# the chain drafters the sweep times, each row named as its drafter is (the registry's name and variant):
# (target, draft model) -> a drafter, built once
DRAFTERS: dict[str, Callable[[torch.nn.Module, torch.nn.Module | None], Drafter]] = {
    DRAFT_MODEL: lambda target, draft: ModelDrafter(draft),
    PROMPT_LOOKUP: lambda target, draft: PromptLookupDrafter(),
    EAGLE_CHAIN: lambda target, draft: load_drafter(EAGLE, target, tree="chain"),
}
# a record's tables keyed by method (each its rows' methods)
BY_METHOD = ("alpha", "naive", "predicted", "modelled_policy", "policy", "summary")


def current_names(record: dict) -> dict:
    """A sweep's record with its methods named as the sweep names them now (methods.current_row: an older
    record's "draft model" reads as "draft_model"), in its rows and as the keys of its tables by method."""
    rows = {key: [{**r, "method": current_row(r["method"])} for r in record[key]]
            for key in ("rows", "calibration_rows") if key in record}
    tables = {key: {current_row(m): value for m, value in record[key].items()} for key in BY_METHOD if key in record}
    return {**record, **rows, **tables}


def make_drafters(target: torch.nn.Module, draft: torch.nn.Module | None, methods: Sequence[str],
                  log: Callable[[str], None] = print) -> dict[str, Drafter]:
    """One drafter per method, reused by every decode (each starts afresh with its batch). A method whose
    trained weights do not ship for this target is left out, and said."""
    drafters = {}
    for method in methods:
        try:
            drafters[method] = DRAFTERS[method](target, draft)
        except FileNotFoundError as missing:
            log(f"left out {method}: {missing}")
    return drafters


@dataclass
class BatchRow:
    """One method at one K and one batch size: the median of its repeats."""

    method: str
    k: int
    batch: int
    new_tokens: int
    decode_s: float  # the batch's time after its prefill (the prefill is the same work for every row)
    itl_mean_ms: float
    itl_p95_ms: float
    tokens_per_round: float = 0.0  # per sequence (1 for target-only)
    alpha: float = 0.0
    equal_rows: int = 0  # sequences whose greedy tokens equal target-only's in the same batches
    tail: float = 1.0  # rounds the batch ran over the rounds its sequences needed on average
    draft_ms: float = 0.0  # drafting time of a round (the whole batch's)
    verify_ms: float = 0.0  # the verify pass of a round (the whole batch's)
    speedup: float = float("nan")  # tokens/s over target-only's at this batch size
    spread: float = 0.0  # (slowest - fastest repeat) / median: how far the machine moved this row's time
    prompt_set: str = "timed"  # or "calibration": the other prompts the K policy is tuned on (sweep)

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.decode_s


def itl_gaps(token_s: Sequence[float]) -> list[float]:
    """One sequence's inter-token gaps (seconds) from the times its tokens were ready (GenerationStats
    .token_s): each round's time after the previous round shared by the tokens it produced; the first
    round's tokens, which wait for the prefill, are left out."""
    rounds: list[tuple[float, int]] = []
    for t in token_s:
        if rounds and rounds[-1][0] == t:
            rounds[-1] = (t, rounds[-1][1] + 1)
        else:
            rounds.append((t, 1))
    return [(t - before) / m for (before, _), (t, m) in zip(rounds, rounds[1:]) for _ in range(m)]


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def decode(target: torch.nn.Module, drafter: Drafter | None, k: int, prompts: list[torch.Tensor],
           max_new_tokens: int) -> tuple[float, list[GenerationResult]]:
    """(decode seconds: the batch's wall time after its prefill, one result per prompt) of one batched greedy
    decode; K 0 or target-only: the target alone."""
    if drafter is None or k == 0:
        rows = generate(target, prompts, max_new_tokens=max_new_tokens)
    else:
        rows = speculative_generate(target, drafter, prompts, k=k, max_new_tokens=max_new_tokens)
    return rows[0].stats.wall_s - rows[0].stats.prefill_s, rows


def summarise(method: str, k: int, batch: int, walls: list[float], batches: list[list[GenerationResult]],
              reference: list[list[int]] | None) -> BatchRow:
    """One row from the median of its repeats' times and the last repeat's batches of results."""
    rows = [r for group in batches for r in group]
    gaps = [g for r in rows for g in itl_gaps(r.stats.token_s)]
    accepted = sum(r.stats.accepted for r in rows)
    rounds = sum(r.stats.rounds for r in rows)
    tested = accepted + sum(r.stats.rejections for r in rows)
    equal = sum(r.tokens.tolist() == ref for r, ref in zip(rows, reference)) if reference is not None else len(rows)
    tails = [max(r.stats.rounds for r in g) / (sum(r.stats.rounds for r in g) / len(g)) for g in batches]
    draft_ms, verify_ms = zip(*(per_round_ms(g) for g in batches))
    return BatchRow(method, k, batch, sum(r.stats.new_tokens for r in rows), statistics.median(walls),
                    1000 * statistics.fmean(gaps) if gaps else float("nan"), 1000 * percentile(gaps, 95),
                    sum(r.stats.new_tokens for r in rows) / rounds if rounds else 0.0,
                    accepted / tested if tested else 0.0, equal, statistics.fmean(tails),
                    statistics.fmean(draft_ms), statistics.fmean(verify_ms),
                    spread=(max(walls) - min(walls)) / statistics.median(walls))


def per_round_ms(rows: list[GenerationResult]) -> tuple[float, float]:
    """(drafting, verifying) ms of a batch's round: the longest-running sequence's stats carry every round's
    pass times (each sequence's stats hold the batch's times for the rounds it was in)."""
    longest = max(rows, key=lambda r: r.stats.rounds).stats
    return (1000 * longest.draft_s / longest.rounds, 1000 * longest.target_s / longest.rounds) \
        if longest.rounds else (0.0, 0.0)


# every batch size decodes at least this many prompts (batch 1: thirty-two batches of one). Eight were too
# few: at batches 1-8 the same eight prompts decided every row, and the calibration set's eight accepted
# 1.6 tokens a round with prompt lookup at K=1 where the timed set's accepted 1.3 (record of 2026-11-27)
MIN_PROMPTS = 32


def batches_of(prompts: list[torch.Tensor], batch: int, min_prompts: int | None = None) -> list[list[torch.Tensor]]:
    """The prompts a batch size decodes, in batches of `batch`: the first max(batch, min_prompts), by
    default MIN_PROMPTS. Prompts differ more than anything else measured here (one accepts 4 tokens a
    round, the next 2), so a small batch size is timed on several batches in turn, never on its first
    prompt alone."""
    count = max(batch, MIN_PROMPTS if min_prompts is None else min_prompts)
    if count > len(prompts):
        raise ValueError(f"batch {batch} needs {count} prompts and {len(prompts)} were given: pass more prompts "
                         "(--num-prompts) or smaller batch sizes")
    return [prompts[i:i + batch] for i in range(0, count - count % batch, batch)]


def sweep(target: torch.nn.Module, drafters: dict[str, Drafter], prompts: list[torch.Tensor],
          runs: Sequence[tuple[str, int]], batch_sizes: Sequence[int] = BATCH_SIZES, max_new_tokens: int = 64,
          repeats: int = 2, log: Callable[[str], None] = print, min_prompts: int | None = None,
          calibration: list[torch.Tensor] | None = None) -> list[BatchRow]:
    """Every (method, K) of `runs` at every batch size, greedy, EOS ignored. At each batch size the runs are
    interleaved: each repeat takes them in an order rotated from the last, so a slow stretch of the machine
    slows every run alike. Each row's ratio is to target-only at the same batch size, on the same prompts.

    With `calibration` (other prompts), every run is made on those prompts too, in the same rotation, and
    those rows come back with prompt_set "calibration": what the K policy is tuned on. Timed minutes
    apart, two sweeps met different machines (target-only ran 30% slower in the second sweep of
    2026-11-27's record, and the ratio of prompt lookup at batch 8, K=1, read 0.99 in one and 1.13 in the
    other): side by side, the policy is tuned under the conditions it is then timed in."""
    sets = {"timed": prompts, **({"calibration": calibration} if calibration is not None else {})}
    table: list[BatchRow] = []
    for batch in batch_sizes:
        base_plan = [(TARGET_ONLY, 0)] + [r for r in runs if r != (TARGET_ONLY, 0)]
        plan = [(name, method, k) for method, k in base_plan for name in sets]
        groups = {name: batches_of(chosen, batch, min_prompts) for name, chosen in sets.items()}
        walls: dict[int, list[float]] = {i: [] for i in range(len(plan))}
        outputs: dict[int, list[list[GenerationResult]]] = {}
        for repeat in range(repeats):
            for shift in range(len(plan)):
                i = (repeat + shift) % len(plan)
                name, method, k = plan[i]
                timed = [decode(target, drafters.get(method), k, group, max_new_tokens) for group in groups[name]]
                walls[i].append(sum(seconds for seconds, _ in timed))
                outputs[i] = [rows for _, rows in timed]
        for name in sets:
            mine = [(i, method, k) for i, (n, method, k) in enumerate(plan) if n == name]
            reference = [r.tokens.tolist() for group in outputs[mine[0][0]] for r in group]
            base = None
            for i, method, k in mine:
                row = summarise(method, k, batch, walls[i], outputs[i], reference)
                row.prompt_set = name
                base = base or row.tokens_per_s
                row.speedup = row.tokens_per_s / base
                table.append(row)
                if name == "timed":
                    log(f"batch {batch:3d}  {method:32s} K={k}  {row.tokens_per_s:8.1f} tok/s  {row.speedup:5.2f}x  "
                        f"ITL {row.itl_mean_ms:6.1f} ms (p95 {row.itl_p95_ms:6.1f})  "
                        f"{row.tokens_per_round:4.2f} tok/round  tail {row.tail:4.2f}  equal {row.equal_rows}/"
                        f"{len(reference)}")
    return table


def of_set(table: list[BatchRow], name: str) -> list[BatchRow]:
    """The rows of one prompt set of a sweep ("timed" or "calibration")."""
    return [r for r in table if r.prompt_set == name]


# ---------------------------------------------------------------- the model: costs by batch size
def pass_costs(model: torch.nn.Module, batch_sizes: Sequence[int], widths: Sequence[int], context: int,
               repeats: int = 5) -> dict[int, dict[int, float]]:
    """Median ms of one pass of `widths` tokens for each of B sequences (their caches holding `context`
    tokens each), on the model's fast path: {B: {width: ms}}. Interleaved over the widths, as pass_ms."""
    path = fast_path_of(model)
    if path is None:
        raise ValueError("pass_costs times batched passes, which run on the fast path: enable_fast_path(model, "
                         "max_batch=...) first")
    runner = runner_for(model)
    vocab = model.get_output_embeddings().weight.shape[0]
    g = torch.Generator().manual_seed(0)
    costs: dict[int, dict[int, float]] = {}
    for batch in batch_sizes:
        rows = list(range(batch))
        prefix = [torch.randint(0, vocab, (context,), generator=g).to(runner.device) for _ in rows]
        new = torch.randint(0, vocab, (max(widths),), generator=g).to(runner.device)
        runner.reset()
        runner.run_rows([Pass(r, p) for r, p in zip(rows, prefix)], last_only=True)
        samples: dict[int, list[float]] = {w: [] for w in widths}
        for i in range(repeats + 1):
            for shift in range(len(widths)):
                w = widths[(i + shift) % len(widths)]
                with timer(runner.device) as t:
                    runner.verify_rows(rows, [new[:w]] * batch)
                for r in rows:
                    runner.rollback(context, r)
                if i:  # the first round warms up
                    samples[w].append(1000 * t["seconds"])
        costs[batch] = {w: statistics.median(s) for w, s in samples.items()}
    return costs


def predict(alpha: float, target_ms: dict[int, dict[int, float]], draft_ms: dict[int, float] | None,
            ks: Sequence[int]) -> dict[int, dict[int, float]]:
    """Predicted speedup over target-only, {B: {K: speedup}}: theory.speedup with the verify pass over
    K + 1 tokens a sequence and the draft step (None: a drafter without a network, free) both in target
    steps at that batch size."""
    out: dict[int, dict[int, float]] = {}
    for batch, by_width in target_ms.items():
        step = by_width[1]
        c = 0.0 if draft_ms is None else draft_ms[batch] / step
        out[batch] = {k: theory.speedup(alpha, k, c, by_width[k + 1] / step) for k in ks}
    return out


def predict_from_rounds(calibration_rows: list[BatchRow], target_ms: dict[int, dict[int, float]]
                        ) -> dict[str, dict[int, dict[int, float]]]:
    """Predicted speedup, {method: {B: {K: speedup}}}, from parts measured apart from the timed sweep: a
    round yields the tokens a sequence got a round in the calibration sweep, over its tail (the batch runs
    as long as its slowest sequence), and costs the verify pass over B x (K + 1) tokens from the cost grid
    plus the drafting time the calibration rounds took; target-only costs one step a token."""
    out: dict[str, dict[int, dict[int, float]]] = {}
    for r in calibration_rows:
        if r.method == TARGET_ONLY:
            continue
        step = target_ms[r.batch][1]
        speedup = (r.tokens_per_round / r.tail) * step / (target_ms[r.batch][r.k + 1] + r.draft_ms)
        out.setdefault(r.method, {}).setdefault(r.batch, {})[r.k] = speedup
    return out


def k_policy(predicted: dict[int, dict[int, float]]) -> dict[int, int]:
    """The K each batch size is predicted to do best with; 0 where no K is predicted to beat the target
    alone (speculation off: plain target-only decoding)."""
    return {batch: max(by_k, key=by_k.get) if max(by_k.values()) > 1 else 0 for batch, by_k in predicted.items()}


def crossover(speedups: dict[int, float]) -> int | None:
    """The smallest batch size from which on speculation no longer pays (speedup at most 1 there and at
    every larger size measured); None if it pays at every size."""
    sizes = sorted(speedups)
    for i, batch in enumerate(sizes):
        if all(speedups[b] <= 1 for b in sizes[i:]):
            return batch
    return None


def rows_to_dicts(rows: list[BatchRow]) -> list[dict]:
    return [dict(asdict(r), tokens_per_s=r.tokens_per_s) for r in rows]


def rows_from_dicts(dicts: list[dict]) -> list[BatchRow]:
    """The rows a record holds (rows_to_dicts), back as BatchRows: tokens_per_s is derived again."""
    return [BatchRow(**{k: v for k, v in d.items() if k != "tokens_per_s"}) for d in dicts]


@dataclass
class Calibration:
    """What the model needs, measured before the sweep: pass costs by batch size and acceptance at batch 1."""

    target_ms: dict[int, dict[int, float]]
    draft_ms: dict[int, float] | None
    alpha: dict[str, float] = field(default_factory=dict)
    policy: dict[str, dict[int, int]] = field(default_factory=dict)  # measured_policy on the calibration prompts
    rows: list[BatchRow] = field(default_factory=list)  # the calibration sweep

    def tuned(self, rows: list[BatchRow]) -> None:
        """Take the calibration prompts' rows of a sweep, and the policy measured on them alone."""
        self.rows = of_set(rows, "calibration")
        self.policy = measured_policy(self.rows, list(self.alpha))


# ---------------------------------------------------------------- the whole measurement
def calibrate(target: torch.nn.Module, draft: torch.nn.Module | None, drafters: dict[str, Drafter],
              prompts: list[torch.Tensor], batch_sizes: Sequence[int], ks: Sequence[int], context: int,
              max_new_tokens: int, k: int = 4) -> Calibration:
    """Measured on other prompts than the sweep's (calibration prompts), before it: pass costs by batch size
    and width, and each method's acceptance at batch 1 with K = k, for the model. The calibration sweep
    (the rounds model's input and the policy's, `measured_policy`) runs inside the timed sweep, side by side
    with it (`sweep(..., calibration=prompts)`), and is added with `tuned`."""
    methods = list(drafters)
    widths = sorted({1, *(kk + 1 for kk in ks)})
    target_ms = pass_costs(target, batch_sizes, widths, context)
    draft_ms = None
    if draft is not None and DRAFT_MODEL in drafters:
        draft_ms = {b: by_width[1] for b, by_width in pass_costs(draft, batch_sizes, [1], context).items()}
    alpha = {}
    for method in methods:
        runs = [speculative_generate(target, drafters[method], p, k=k, max_new_tokens=max_new_tokens)
                for p in prompts[:4]]
        accepted = sum(r.stats.accepted for r in runs)
        alpha[method] = accepted / max(1, accepted + sum(r.stats.rejections for r in runs))
    return Calibration(target_ms, draft_ms, alpha)


# Two K whose speedups differ by less than this are a tie, won by the smaller K. Timed and calibration
# prompts come from one workload and accept alike, so the calibration's fastest K is the estimate to take
TIE = 0.0


def measured_policy(table: list[BatchRow], methods: Sequence[str], tie: float = TIE) -> dict[str, dict[int, int]]:
    """Each method's K at each batch size from a sweep: the smallest K whose speedup is within `tie` of the
    fastest, where K 0 (speculation off: plain target-only decoding) counts as 1.0x; an engine's K = 0 keeps
    its speculative machinery and can cost more (chapter 12 measured vLLM's at 0.86x). The per-batch-size K
    that vLLM's num_speculative_tokens_per_batch_size writes down by hand."""
    if tie < 0:
        raise ValueError(f"tie is a fraction of a speedup, >= 0; got {tie}")
    policy: dict[str, dict[int, int]] = {}
    for method in methods:
        rows = [r for r in table if r.method == method]
        policy[method] = {}
        for b in sorted({r.batch for r in rows}):
            speedups = {0: 1.0, **{r.k: r.speedup for r in rows if r.batch == b}}
            fastest = max(speedups.values())
            policy[method][b] = min(k for k, x in speedups.items() if x >= fastest - tie)
    return policy


def batch_of_one_pairs(target: torch.nn.Module, prompt: torch.Tensor, max_new_tokens: int,
                       pairs: int = 5) -> list[float]:
    """Per pair of back-to-back target-only runs of one prompt, passed alone and as a batch of one (a list:
    the batched call), the list's time over the alone one. Which runs first alternates, so neither always
    meets the warmer machine. The two calls run the same loop: how far the ratios spread is the host's noise."""
    ratios = []
    for i in range(pairs):
        seconds = {}
        for kind in (("alone", "listed") if i % 2 == 0 else ("listed", "alone")):
            with timer(model_device(target)) as t:
                generate(target, prompt if kind == "alone" else [prompt], max_new_tokens=max_new_tokens)
            seconds[kind] = t["seconds"]
        ratios.append(seconds["listed"] / seconds["alone"])
    return ratios


def one_against_a_batch_of_one(target: torch.nn.Module, prompt: torch.Tensor, max_new_tokens: int,
                               repeats: int = 5) -> float:
    """Target-only time of one prompt as a batch of one (a list) over the same prompt passed alone: the
    batched path's cost at batch 1 against the single-sequence call (the median of batch_of_one_pairs)."""
    return statistics.median(batch_of_one_pairs(target, prompt, max_new_tokens, repeats))


def summary(table: list[BatchRow], predicted: dict[str, dict[int, dict[int, float]]], policy: dict[str, dict[int, int]],
            naive: dict[str, dict[int, dict[int, float]]] | None = None) -> dict[str, dict]:
    """Per method: the measured speedup at each batch size with the best fixed K and that K, the measured and
    predicted crossovers, and the K policy's speedup (the fixed-K row its K names; K 0: target-only, 1.0)
    beside the best fixed K's and K = 4's."""
    out = {}
    for method, by_batch in policy.items():
        fixed = [r for r in table if r.method == method]
        sizes = sorted({r.batch for r in fixed})
        best = {b: max((r for r in fixed if r.batch == b), key=lambda r: r.speedup) for b in sizes}
        chosen = {b: 1.0 if by_batch[b] == 0 else next(r.speedup for r in fixed if r.batch == b and r.k == by_batch[b])
                  for b in sizes}
        out[method] = {
            "best_k": {b: best[b].k for b in sizes},
            "best_speedup": {b: best[b].speedup for b in sizes},
            "crossover_measured": crossover({b: best[b].speedup for b in sizes}),
            "predicted_best": {b: max(predicted[method][b].values()) for b in sizes},
            "predicted_k": {b: max(predicted[method][b], key=predicted[method][b].get) for b in sizes},
            "crossover_predicted": crossover({b: max(predicted[method][b].values()) for b in sizes}),
            **({} if naive is None else {
                "naive_best": {b: max(naive[method][b].values()) for b in sizes},
                "crossover_naive": crossover({b: max(naive[method][b].values()) for b in sizes})}),
            "policy_k": {b: by_batch[b] for b in sizes},
            "policy_speedup": chosen,
            "k4_speedup": {r.batch: r.speedup for r in fixed if r.k == 4},
            # how far repeats moved the method's rows at each batch size (median of their spreads)
            "spread": {b: statistics.median(r.spread for r in fixed if r.batch == b) for b in sizes},
        }
    return out


# ---------------------------------------------------------------- the roofline
def roofline_ms(weight_bytes: float, params: float, tokens: int, bandwidth_gbs: float, gflops: float) -> float:
    """A pass over `tokens` tokens (B x width) as the roofline has it (profiling.attainable_tflops): two FLOPs per
    weight per token, every weight read once, so the pass's intensity is its FLOPs over the weights' bytes;
    attention and overhead are left out. Below the ridge that is the weights' read time, above it the FLOPs
    at the compute peak."""
    flops = 2 * params * tokens
    return 1000 * flops / (attainable_tflops(flops / weight_bytes, gflops / 1000, bandwidth_gbs) * 1e12)


# ---------------------------------------------------------------- rows that differ from their own run
@torch.inference_mode()
def first_difference(target: torch.nn.Module, prompt: torch.Tensor, a: Sequence[int], b: Sequence[int]
                     ) -> tuple[int, float] | None:
    """Where two greedy decodings of `prompt` part (the index of the first differing token) and the target's
    logit margin there, between its two most likely tokens, computed afresh in float32 on the common prefix
    (a margin within float rounding says the two runs met a near-tie and each took one side); None when they
    agree wherever both have tokens."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            ids = torch.cat([prompt.cpu(), torch.tensor(list(a[:i]), dtype=torch.long)]).view(1, -1)
            logits = target(ids.to(model_device(target))).logits[0, -1].float()
            top = logits.topk(2).values
            return i, float(top[0] - top[1])
    return None
