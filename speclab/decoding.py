"""The decode loop: target-only generation and speculative generation on one engine and one sampler.

The target keeps a KV cache holding every token but the last one (the "pending" token); each
speculative round feeds [pending, d_1, ..., d_N] in one forward pass, which yields the N + 1 target
distributions the rule needs (N checks and the bonus). The drafts form a chain or a tree
(speclab.trees); a tree is verified under a tree attention mask, and only the accepted path's cache rows
are kept. Every drafter plugs into this one loop.

A batch (chapter 11) is a dimension of the same loop, not a second one: pass a list of prompts and each
round drafts for every unfinished sequence, verifies them all in one target pass (each in its own cache
row, at its own length), and settles each sequence on its own: its accepted count, its length, its stop.
Finished sequences leave the batch. One prompt is a batch of one.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import import_module

import torch

from speclab.adaptive import FixedK, check_confidence_threshold, make_schedule
from speclab.devices import timer
from speclab.drafting import Draft, Drafter
from speclab.runner import Runner, context_length, runner_for
from speclab.sampling import SamplingParams, check_finite, pad_vocab, pick
from speclab.stats import GenerationResult, GenerationStats, Round
from speclab.verification import (LOSSLESS_RULES, medusa_typical_accept_tree, typical_accept_tree, verify_block,
                                  verify_tree)


# ---------------------------------------------------------------- input checks
def as_prompt(input_ids: torch.Tensor | Sequence[int], device: torch.device, vocab_size: int | None,
              which: str = "the prompt") -> torch.Tensor:
    """The prompt as a 1-D long tensor on `device`, or a ValueError that says what to change."""
    ids = torch.as_tensor(input_ids)
    if ids.dim() == 2:
        if ids.shape[0] != 1:
            raise ValueError(f"{which} has shape {tuple(ids.shape)}: pass one sequence as (n,) or (1, n)")
        ids = ids[0]
    if ids.dim() != 1:
        raise ValueError(f"input_ids must have shape (n,) or (1, n), or be a list of prompts; got {tuple(ids.shape)}")
    if ids.numel() == 0:
        raise ValueError(f"{which} is empty: pass at least one token id (for example the tokenizer's BOS or EOS)")
    if ids.is_floating_point() or ids.is_complex():
        raise ValueError(f"input_ids must be integer token ids, got dtype {ids.dtype}")
    if ids.min() < 0 or (vocab_size is not None and ids.max() >= vocab_size):
        raise ValueError(f"token ids must lie in [0, {vocab_size}); {which} has {int(ids.min())}..{int(ids.max())}")
    return ids.long().to(device)


Prompts = torch.Tensor | Sequence[int] | Sequence[torch.Tensor | Sequence[int]]


def as_prompts(input_ids: Prompts, device: torch.device, vocab_size: int | None) -> tuple[list[torch.Tensor], bool]:
    """(the prompts as 1-D tensors, whether a batch was passed). A batch is a list (or tuple) of prompts,
    each a 1-D tensor or a list of ids, of any lengths, or a (B, n) tensor with B > 1; a 1-D tensor, a list
    of ints or a (1, n) tensor is one prompt."""
    if isinstance(input_ids, torch.Tensor):
        if input_ids.dim() == 2 and input_ids.shape[0] > 1:
            input_ids = list(input_ids)
        else:
            return [as_prompt(input_ids, device, vocab_size)], False
    elif not (isinstance(input_ids, (list, tuple)) and input_ids and
              all(isinstance(p, (torch.Tensor, list, tuple)) for p in input_ids)):
        return [as_prompt(input_ids, device, vocab_size)], False
    devices = {p.device for p in input_ids if isinstance(p, torch.Tensor)}
    if len(devices) > 1:
        raise ValueError(f"the prompts are on different devices ({sorted(str(d) for d in devices)}): put every prompt "
                         f"on one device, or pass lists of ids")
    return [as_prompt(p, device, vocab_size, f"prompt {i}") for i, p in enumerate(input_ids)], True


def check_length(model: torch.nn.Module, prompt_len: int, max_new_tokens: int) -> None:
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    limit = context_length(model)
    if limit is not None and prompt_len > limit:
        raise ValueError(f"the prompt ({prompt_len} tokens) is longer than the model's context of {limit} positions: "
                         "shorten the prompt")
    if limit is not None and prompt_len + max_new_tokens > limit:
        raise ValueError(f"prompt + max_new_tokens ({prompt_len} + {max_new_tokens}) exceeds the model's context of "
                         f"{limit} positions: lower max_new_tokens to at most {limit - prompt_len}")


def stop_ids(eos_token_id: int | Iterable[int] | None) -> set[int]:
    if eos_token_id is None:
        return set()
    return {int(eos_token_id)} if isinstance(eos_token_id, int) else {int(t) for t in eos_token_id}


def vocab_size(model: torch.nn.Module) -> int:
    return model.get_output_embeddings().weight.shape[0]


def make_generator(seed: int | None, device: torch.device) -> torch.Generator | None:
    return None if seed is None else torch.Generator(device=device).manual_seed(seed)


def cut_at_stop(tokens: list[int], stops: set[int]) -> tuple[list[int], bool]:
    """tokens up to and including the first stop token, and whether one was found."""
    for i, t in enumerate(tokens):
        if t in stops:
            return tokens[:i + 1], True
    return tokens, False


# ---------------------------------------------------------------- one sequence of a batch
@dataclass
class LiveSequence:
    """One sequence being decoded: its cache row, its ids so far (prompt and output), what it has produced,
    its own K schedule and its own stats and trace. `done` once it stopped (EOS or max_new_tokens)."""

    row: int
    ids: torch.Tensor
    stats: GenerationStats
    schedule: FixedK | None = None
    out: list[int] = field(default_factory=list)
    trace: list[Round] = field(default_factory=list)
    done: bool = False

    def emit(self, tokens: list[int], stops: set[int], max_new_tokens: int, now: float) -> None:
        """Append this round's new tokens (up to a stop token or the budget) and note when they came."""
        tokens, stopped = cut_at_stop(tokens[:max_new_tokens - len(self.out)], stops)
        self.out.extend(tokens)
        self.stats.token_s.extend([now] * len(tokens))
        self.done = stopped or len(self.out) >= max_new_tokens

    def result(self, wall_s: float) -> GenerationResult:
        self.stats.wall_s, self.stats.new_tokens = wall_s, len(self.out)
        return GenerationResult(torch.tensor(self.out, dtype=torch.long), self.stats, self.trace)


def since(clock: dict) -> float:
    """Seconds since a devices.timer block began."""
    return time.perf_counter() - clock["start"]


def results(seqs: list[LiveSequence], wall_s: float, batched: bool) -> GenerationResult | list[GenerationResult]:
    """One result per sequence (a list for a batch, the result itself for one prompt). Each sequence's
    stats carry the batch's pass times; its wall time is the batch's."""
    out = [s.result(wall_s) for s in seqs]
    return out if batched else out[0]


# ---------------------------------------------------------------- target-only decoding
def generate(target: torch.nn.Module, input_ids: Prompts, *, max_new_tokens: int,
             temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
             seed: int | None = None, eos_token_id: int | Iterable[int] | None = None
             ) -> GenerationResult | list[GenerationResult]:
    """Autoregressive decoding with the target alone: the baseline every speedup is measured against.
    A list of prompts decodes them as one batch (on the fast path: enable_fast_path(target, max_batch=B)),
    each step one token for every unfinished sequence; the result is then a list, one per prompt."""
    sampling = SamplingParams(temperature, top_k, top_p)
    runner = runner_for(target, who="target model")
    prompts, batched = as_prompts(input_ids, runner.device, vocab_size(target))
    for prompt in prompts:
        check_length(target, len(prompt), max_new_tokens)
    stops, generator = stop_ids(eos_token_id), make_generator(seed, runner.device)
    seqs = [LiveSequence(row, prompt, GenerationStats(method="target only", device=str(runner.device),
                                                      batch=len(prompts))) for row, prompt in enumerate(prompts)]
    with timer(runner.device) as total:
        with timer(runner.device) as took:
            logits = runner.forward_rows([s.row for s in seqs], prompts, last_only=True)
        for s in seqs:
            s.stats.target_calls, s.stats.prefill_s = 1, took["seconds"]
        live = seqs
        while True:
            tokens = []
            for s, row_logits in zip(live, logits):
                check_finite(row_logits[-1], "target model")
                token, _ = pick(row_logits[-1], sampling, generator)
                tokens.append(token.view(1))
                s.stats.rounds += 1
                s.emit([int(token)], stops, max_new_tokens, since(total))
            tokens = [t for s, t in zip(live, tokens) if not s.done]
            live = [s for s in live if not s.done]
            if not live:
                break
            with timer(runner.device) as step:
                logits = runner.forward_rows([s.row for s in live], tokens, last_only=True)
            for s in live:
                s.stats.target_s += step["seconds"]
                s.stats.target_calls += 1
    return results(seqs, total["seconds"], batched)


# ---------------------------------------------------------------- speculative decoding
ACCEPTANCE_RULES = (*LOSSLESS_RULES, "typical", "typical-medusa")


# The loop never imports a method: a bare model passed as the draft is wrapped by the registry's
# draft-model method, looked up only when one is passed (speclab.methods.drafter_for_model).
METHODS_PACKAGE = "speclab.methods"


def as_drafter(draft: torch.nn.Module | Drafter, device: torch.device) -> Drafter:
    """A Drafter (a bare model becomes a draft-model drafter) whose network runs on `device`."""
    drafter = draft if isinstance(draft, Drafter) else import_module(METHODS_PACKAGE).drafter_for_model(draft)
    if drafter.device is not None and drafter.device != device:
        raise ValueError(f"target is on {device} but the {drafter.name} is on {drafter.device}: move both to the "
                         "same device (model.to(device))")
    return drafter


def round_depth(k: int | None, drafter: Drafter) -> int:
    """k, the draft tokens (or tree depth) a round may propose: as given, or the drafter's own depth."""
    if k is None:
        k = drafter.own_depth
        if k is None:
            raise ValueError(f"pass k, the draft tokens per round (for example k=4): the {drafter.name} drafter "
                             "has no depth of its own")
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k (draft tokens per round, or tree depth) must be an integer >= 1, got {k!r}")
    return k


def speculative_generate(target: torch.nn.Module, draft: torch.nn.Module | Drafter, input_ids: Prompts, *,
                         k: int | None = None, max_new_tokens: int,
                         temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
                         seed: int | None = None, eos_token_id: int | Iterable[int] | None = None,
                         acceptance: str = "rejection", typical_epsilon: float = 0.09,
                         typical_delta: float = 0.3, k_schedule: str = "fixed",
                         confidence_threshold: float | None = None) -> GenerationResult | list[GenerationResult]:
    """Speculative decoding: `draft` (a model sharing the target's tokenizer, or any Drafter) proposes up to k
    tokens (a chain) or a tree at most k deep, the target checks them in one pass, and the rule decides.
    k None: the drafter's own depth (Drafter.own_depth). Greedy output equals generate's; sampled output
    has the same distribution. acceptance: "rejection" (token-wise), "block" (a chain judged jointly: Sun et
    al. 2025, verification.verify_block; lossless), or "typical" / "typical-medusa" (Medusa's typical
    acceptance, speclab's variant and the reference's: NOT lossless, and the stats say so). Adaptive K, k
    the upper bound (speclab.adaptive): k_schedule="heuristic", confidence_threshold; both lossless.

    A list of prompts decodes as one batch (chapter 11) on the fast path (enable_fast_path(model,
    max_batch=B)) with a drafter that drafts batches; each sequence keeps its own length, accepted count,
    K schedule and stop, and the result is a list. The loop asks of a drafter only speclab.drafting's
    interface."""
    runner = runner_for(target, who="target model")
    drafter = as_drafter(draft, runner.device)
    k = round_depth(k, drafter)
    if acceptance not in ACCEPTANCE_RULES:
        raise ValueError(f"acceptance must be one of {ACCEPTANCE_RULES}, got {acceptance!r}")
    make_schedule(k_schedule, k)  # checks the name before any work
    sampling = SamplingParams(temperature, top_k, top_p)
    drafter.set_confidence_threshold(check_confidence_threshold(confidence_threshold))
    vocab = vocab_size(target)
    prompts, batched = as_prompts(input_ids, runner.device, vocab)
    for prompt in prompts:
        check_length(target, len(prompt), max_new_tokens)
    drafter.check_batch(len(prompts))
    stops, generator = stop_ids(eos_token_id), make_generator(seed, runner.device)
    method = method_label(drafter.name, k_schedule, confidence_threshold, acceptance)
    seqs = [LiveSequence(row, prompt, GenerationStats(method=method, k=k, device=str(runner.device),
                                                      accepted_lengths=[0] * (k + 1),
                                                      lossless=acceptance in LOSSLESS_RULES, batch=len(prompts)),
                         make_schedule(k_schedule, k))
            for row, prompt in enumerate(prompts)]
    features = drafter.feature_layers
    with timer(runner.device) as total:
        prefill(runner, drafter, seqs)
        live = seqs
        while live:
            # never produce more than asked: a sequence one token short of its budget drafts nothing
            ks = [min(s.schedule.k, max_new_tokens - len(s.out) - 1) for s in live]
            drafting_seqs = [(s, kr) for s, kr in zip(live, ks) if kr > 0]
            with timer(runner.device) as drafting:
                drafts = drafter.propose_rows([s.row for s, _ in drafting_seqs], [s.ids for s, _ in drafting_seqs],
                                              [kr for _, kr in drafting_seqs], sampling, generator) \
                    if drafting_seqs else []
            by_row = {s.row: d.cut(kr).to(runner.device) for (s, kr), d in zip(drafting_seqs, drafts)
                      if d is not None}
            proposals = [by_row[s.row] if s.row in by_row else Draft(s.ids.new_empty(0)) for s in live]

            cached = [runner.lengths[s.row] for s in live]
            with timer(runner.device) as verifying:  # N + 1 rows a sequence: a check for every node, the bonus
                passes = runner.verify_rows(
                    [s.row for s in live],
                    [torch.cat([s.ids[-1:], d.tokens] + ([d.side.tokens] if d.side is not None else []))
                     for s, d in zip(live, proposals)],
                    [None if d.is_chain else d.tree for d in proposals], features, [d.side for d in proposals])
            sided = [(s, d, logits) for s, d, (logits, _) in zip(live, proposals, passes) if d.side is not None]
            if sided:  # rows the drafter added for their logits alone (lookahead's window)
                drafter.take_side_logits_rows([s.row for s, _, _ in sided],
                                              [logits[len(d) + 1:] for _, d, logits in sided])
            kept = []
            for s, d, (logits, hidden), c in zip(live, proposals, passes, cached):
                path = settle(s, d, logits[:len(d) + 1], c, runner, sampling, generator, acceptance,
                              typical_epsilon, typical_delta)
                kept.append(hidden[[0] + [1 + i for i in path]] if features else None)
                s.stats.add_round(len(d), path, d.tree, len(d.side) if d.side is not None else 0,
                                  drafting["seconds"], verifying["seconds"])
                s.emit(s.trace[-1].new_tokens, stops, max_new_tokens, since(total))
            rows = [s.row for s in live]
            if features:
                drafter.take_features_rows(rows, kept)
            drafter.update_rows(rows, [s.ids for s in live], [s.trace[-1].accepted for s in live])
            live = [s for s in live if not s.done]
    for s in seqs:
        s.stats.draft_calls = drafter.forward_calls
    return results(seqs, total["seconds"], batched)


def method_label(name: str, k_schedule: str, confidence_threshold: float | None, acceptance: str) -> str:
    """The stats' name for a run: "speculative (eagle3), heuristic K, block verification"."""
    adaptive = ("" if k_schedule == "fixed" else f", {k_schedule} K") + \
        ("" if confidence_threshold is None else f", confidence stop {confidence_threshold:g}")
    rule = "" if acceptance == "rejection" else ", block verification" if acceptance == "block" else \
        f", {acceptance} acceptance"
    return f"speculative ({name})" + adaptive + rule


def prefill(runner: Runner, drafter: Drafter, seqs: list[LiveSequence]) -> None:
    """Every prompt but its last token into the target's cache (the last is the first round's pending
    token), the drafter started on the prompts and handed the target's features where it reads them."""
    with timer(runner.device) as took:
        drafter.start_rows([s.row for s in seqs], [s.ids for s in seqs])
        filled = [s for s in seqs if len(s.ids) > 1]
        if filled:
            rows, context = [s.row for s in filled], [s.ids[:-1] for s in filled]
            if drafter.feature_layers:
                passes = runner.verify_rows(rows, context, feature_layers=drafter.feature_layers)
                drafter.take_features_rows(rows, [hidden for _, hidden in passes])
            else:
                runner.forward_rows(rows, context, last_only=True)
    for s in seqs:
        s.stats.prefill_s, s.stats.target_calls = took["seconds"], int(len(s.ids) > 1)


def settle(seq: LiveSequence, proposal: Draft, logits: torch.Tensor, cached: int, runner: Runner,
           sampling: SamplingParams, generator: torch.Generator | None, acceptance: str, typical_epsilon: float,
           typical_delta: float) -> list[int]:
    """One sequence's share of a round: the acceptance rule over its N + 1 target rows, its cache cut back
    to the prefix, the pending token and the accepted path, its ids extended by the path and the target's
    own next token, its K schedule told, its trace appended. Returns the accepted path."""
    check_finite(logits, "target model")
    tree = proposal.tree
    width = max(logits.shape[-1], proposal.vocab_width)
    p = pad_vocab(sampling.probs(logits), width)
    if acceptance == "rejection":
        path, next_token = verify_tree(p, proposal.proposal_probs(width), proposal.tokens, tree, generator)
    elif acceptance == "block":  # a chain judged as a whole (verification.verify_block)
        if not proposal.is_chain:
            raise ValueError("block verification judges a chain of drafts; this drafter proposed a tree: draft "
                             "a chain (tree=\"chain\") or use acceptance=\"rejection\"")
        kept, next_token = verify_block(p, proposal.proposal_probs(width), proposal.tokens, generator)
        path = list(range(kept))
    else:  # typical acceptance, speclab's variant or the Medusa reference's rule
        typical = typical_accept_tree if acceptance == "typical" else medusa_typical_accept_tree
        path, next_token = typical(p, proposal.tokens, tree, typical_epsilon, typical_delta, generator=generator)
    runner.keep_path(cached, path, seq.row)  # the prefix, the pending token, the accepted path
    new = proposal.tokens[path].tolist() + [next_token]
    seq.ids = torch.cat([seq.ids, torch.tensor(new, dtype=torch.long, device=seq.ids.device)])
    seq.schedule.update(len(proposal), len(path))
    chain = proposal.is_chain
    seq.trace.append(Round(proposal.tokens.tolist(), len(path), next_token, None if chain else tree,
                           None if chain else path))
    return path

