"""The decode loop: target-only generation and speculative generation on one engine and one sampler.

Both functions take a batch of one sequence. The target keeps a KV cache holding every token but the
last one (the "pending" token); each speculative round feeds [pending, d_1, ..., d_N] in one forward
pass, which yields the N + 1 target distributions the rule needs (N checks and the bonus). The drafts
form a chain or a tree (speclab.trees); a tree is verified under a tree attention mask, and only the
accepted path's cache rows are kept. Every drafter plugs into this one loop.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from speclab.adaptive import check_confidence_threshold, make_schedule
from speclab.devices import timer
from speclab.drafting import Draft, Drafter
from speclab.methods.draft_model import ModelDrafter
from speclab.runner import context_length, runner_for
from speclab.sampling import SamplingParams, check_finite, pad_vocab, pick
from speclab.stats import GenerationResult, GenerationStats, Round
from speclab.verification import medusa_typical_accept_tree, typical_accept_tree, verify_tree


# ---------------------------------------------------------------- input checks
def as_prompt(input_ids: torch.Tensor | Sequence[int], device: torch.device, vocab_size: int | None) -> torch.Tensor:
    """The prompt as a 1-D long tensor on `device`, or a ValueError that says what to change."""
    ids = torch.as_tensor(input_ids)
    if ids.dim() == 2:
        if ids.shape[0] != 1:
            raise ValueError(f"speclab decodes one sequence at a time: pass input_ids of shape (1, n) or (n,), "
                             f"got {tuple(ids.shape)}")
        ids = ids[0]
    if ids.dim() != 1:
        raise ValueError(f"input_ids must have shape (n,) or (1, n); got {tuple(ids.shape)}")
    if ids.numel() == 0:
        raise ValueError("the prompt is empty: pass at least one token id (for example the tokenizer's BOS or EOS)")
    if ids.is_floating_point() or ids.is_complex():
        raise ValueError(f"input_ids must be integer token ids, got dtype {ids.dtype}")
    if ids.min() < 0 or (vocab_size is not None and ids.max() >= vocab_size):
        raise ValueError(f"token ids must lie in [0, {vocab_size}); the prompt has {int(ids.min())}..{int(ids.max())}")
    return ids.long().to(device)


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


# ---------------------------------------------------------------- target-only decoding
def generate(target: torch.nn.Module, input_ids: torch.Tensor | Sequence[int], *, max_new_tokens: int,
             temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
             seed: int | None = None, eos_token_id: int | Iterable[int] | None = None) -> GenerationResult:
    """Autoregressive decoding with the target alone: the baseline every speedup is measured against."""
    sampling = SamplingParams(temperature, top_k, top_p)
    runner = runner_for(target, who="target model")
    prompt = as_prompt(input_ids, runner.device, vocab_size(target))
    check_length(target, len(prompt), max_new_tokens)
    stops, generator = stop_ids(eos_token_id), make_generator(seed, runner.device)
    stats = GenerationStats(method="target only", device=str(runner.device))
    out: list[int] = []
    with timer(runner.device) as total:
        with timer(runner.device) as prefill:
            logits = runner.forward(prompt, last_only=True)[-1]
        stats.target_calls = 1
        while True:
            check_finite(logits, "target model")
            token, _ = pick(logits, sampling, generator)
            out.append(int(token))
            stats.rounds += 1
            if len(out) == max_new_tokens or out[-1] in stops:
                break
            with timer(runner.device) as step:
                logits = runner.forward(token.view(1), last_only=True)[-1]
            stats.target_s += step["seconds"]
            stats.target_calls += 1
    stats.prefill_s, stats.wall_s, stats.new_tokens = prefill["seconds"], total["seconds"], len(out)
    return GenerationResult(torch.tensor(out, dtype=torch.long), stats)


# ---------------------------------------------------------------- speculative decoding
ACCEPTANCE_RULES = ("rejection", "typical", "typical-medusa")


def as_drafter(draft: torch.nn.Module | Drafter, device: torch.device) -> Drafter:
    """A Drafter (a bare model becomes a draft-model drafter) whose network runs on `device`."""
    drafter = draft if isinstance(draft, Drafter) else ModelDrafter(draft)
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


def speculative_generate(target: torch.nn.Module, draft: torch.nn.Module | Drafter,
                         input_ids: torch.Tensor | Sequence[int], *, k: int | None = None, max_new_tokens: int,
                         temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
                         seed: int | None = None, eos_token_id: int | Iterable[int] | None = None,
                         acceptance: str = "rejection", typical_epsilon: float = 0.09,
                         typical_delta: float = 0.3, k_schedule: str = "fixed",
                         confidence_threshold: float | None = None) -> GenerationResult:
    """Speculative decoding: `draft` (a model sharing the target's tokenizer, or any Drafter) proposes up to k
    tokens (a chain) or a tree at most k deep, the target checks them all in one forward pass, and the
    rejection rule decides. k None: the depth of the drafter's own tree (EAGLE-2's, measured for its head:
    Drafter.own_depth); drafters without one need k. Greedy output equals `generate`'s; sampled output has
    the same distribution. acceptance="typical" swaps in typical acceptance (speclab's variant of the
    Medusa paper's rule: verification.typical_accept_tree; typical_epsilon, typical_delta), and
    "typical-medusa" the Medusa reference's own decision (verification.medusa_typical_accept_tree, with
    medusa_generate's fast=True): they accept more when sampling, and they are NOT lossless; the stats
    say so. Adaptive K
    (speclab.adaptive), k the upper bound: k_schedule="heuristic" is transformers' schedule (+2 after a
    fully accepted round, -1 otherwise); confidence_threshold stops a chain drafter's round at the first
    token its draft was less sure of (top probability below it). Both lossless.

    What the loop asks of a drafter is the Drafter interface (speclab.drafting): start, propose, update,
    and take_features / take_side_logits for those that read the target's features or ride along in
    its pass; its device, depth and pass count are declared there too."""
    runner = runner_for(target, who="target model")
    drafter = as_drafter(draft, runner.device)
    k = round_depth(k, drafter)
    if acceptance not in ACCEPTANCE_RULES:
        raise ValueError(f"acceptance must be one of {ACCEPTANCE_RULES}, got {acceptance!r}")
    schedule = make_schedule(k_schedule, k)
    sampling = SamplingParams(temperature, top_k, top_p)
    drafter.set_confidence_threshold(check_confidence_threshold(confidence_threshold))
    vocab = vocab_size(target)
    prompt = as_prompt(input_ids, runner.device, vocab)
    check_length(target, len(prompt), max_new_tokens)
    stops, generator = stop_ids(eos_token_id), make_generator(seed, runner.device)
    lossless = acceptance == "rejection"
    adaptive = ("" if k_schedule == "fixed" else f", {k_schedule} K") + \
        ("" if confidence_threshold is None else f", confidence stop {confidence_threshold:g}")
    stats = GenerationStats(method=f"speculative ({drafter.name})" + adaptive +
                            ("" if lossless else f", {acceptance} acceptance"),
                            k=k, device=str(runner.device), accepted_lengths=[0] * (k + 1), lossless=lossless)
    features = drafter.feature_layers
    trace: list[Round] = []
    ids = prompt
    out: list[int] = []
    with timer(runner.device) as total:
        with timer(runner.device) as prefill:
            drafter.start(prompt)
            if len(prompt) > 1:  # the cache holds all but the pending last token
                if features:
                    drafter.take_features(runner.verify_pass(prompt[:-1], feature_layers=features)[1])
                else:
                    runner.forward(prompt[:-1], last_only=True)
                stats.target_calls += 1
        while True:
            k_round = min(schedule.k, max_new_tokens - len(out) - 1)  # never produce more than asked
            with timer(runner.device) as drafting:
                proposal = drafter.propose(ids, k_round, sampling, generator) if k_round > 0 else None
            proposal = proposal.cut(k_round) if proposal is not None else Draft(ids.new_empty(0))
            n_drafted, tree, side = len(proposal), proposal.tree, proposal.side

            cached = runner.length
            with timer(runner.device) as verifying:  # N + 1 rows: a check for every node, and the bonus
                logits, hidden = runner.verify_pass(
                    torch.cat([ids[-1:], proposal.tokens] + ([side.tokens] if side is not None else [])),
                    None if proposal.is_chain else tree, features, side)
            if side is not None:  # rows the drafter added for their logits alone (lookahead's window)
                drafter.take_side_logits(logits[n_drafted + 1:])
                logits = logits[:n_drafted + 1]
            check_finite(logits, "target model")
            width = max(logits.shape[-1], proposal.vocab_width)
            p = pad_vocab(sampling.probs(logits), width)
            if lossless:
                path, next_token = verify_tree(p, proposal.proposal_probs(width), proposal.tokens, tree, generator)
            else:  # typical acceptance, speclab's variant or the Medusa reference's rule
                typical = typical_accept_tree if acceptance == "typical" else medusa_typical_accept_tree
                path, next_token = typical(p, proposal.tokens, tree, typical_epsilon, typical_delta,
                                           generator=generator)

            runner.keep_path(cached, path)  # the prefix, the pending token, the accepted path
            new = proposal.tokens[path].tolist() + [next_token]
            ids = torch.cat([ids, torch.tensor(new, dtype=torch.long, device=ids.device)])
            if features:
                drafter.take_features(hidden[[0] + [1 + i for i in path]])
            drafter.update(ids, len(path))

            schedule.update(n_drafted, len(path))
            stats.add_round(n_drafted, path, tree, len(side) if side is not None else 0,
                            drafting["seconds"], verifying["seconds"])
            trace.append(Round(proposal.tokens.tolist(), len(path), next_token,
                               None if proposal.is_chain else tree, None if proposal.is_chain else path))
            new, stopped = cut_at_stop(new, stops)
            out.extend(new)
            if stopped or len(out) >= max_new_tokens:
                break
    stats.prefill_s, stats.wall_s, stats.new_tokens = prefill["seconds"], total["seconds"], len(out)
    stats.draft_calls = drafter.forward_calls
    return GenerationResult(torch.tensor(out, dtype=torch.long), stats, trace)
