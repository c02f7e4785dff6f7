"""How well a draft matches a target: teacher-forced overlap, acceptance measured in decoding (by K and
temperature, by draft position), and the chi-square test every losslessness claim rests on."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import chisquare

from speclab.corpus import split_texts
from speclab.decoding import speculative_generate
from speclab.sampling import logits_to_probs
from speclab.stats import GenerationResult, GenerationStats


def chi_square_pvalue(counts, probs, min_expected: float = 5.0) -> float:
    """Pearson chi-square p-value of observed counts against exact probabilities: is this what p
    would produce? Cells expected fewer than min_expected times are pooled into one (the test's
    approximation needs it); a count in a zero-probability cell is an outright failure (p = 0)."""
    counts = np.asarray(counts, float).ravel()
    probs = np.asarray(probs.double().cpu() if torch.is_tensor(probs) else probs, float).ravel()
    if len(counts) != len(probs):
        raise ValueError(f"counts ({len(counts)} cells) and probs ({len(probs)}) must cover the same outcomes")
    if counts[probs == 0].sum() > 0:
        return 0.0
    expected = probs / probs.sum() * counts.sum()  # float32 probabilities sum to 1 only up to rounding
    big = expected >= min_expected
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    keep = exp > 0
    if keep.sum() < 2:  # one possible outcome: nothing to test beyond the zero cells above
        return 1.0
    return float(chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum()).pvalue)


@torch.inference_mode()
def teacher_forced_overlap(target: torch.nn.Module, draft: torch.nn.Module, ids: torch.Tensor,
                           temperature: float = 1.0) -> dict[str, float]:
    """On a text both models read (ids: (batch, n)), per position: how often the argmaxes agree, and
    the expected acceptance sum_x min(p(x), q(x)) at `temperature` (Leviathan et al.'s alpha)."""
    p_logits, q_logits = target(ids).logits.float(), draft(ids).logits.float()
    width = min(p_logits.shape[-1], q_logits.shape[-1])
    agree = (p_logits.argmax(-1) == q_logits.argmax(-1)).float().mean().item()
    p = logits_to_probs(p_logits[..., :width], temperature)
    q = logits_to_probs(q_logits[..., :width], temperature)
    return {"greedy_agreement": agree, "expected_acceptance": torch.minimum(p, q).sum(-1).mean().item()}


@dataclass
class AcceptanceRow:
    k: int
    temperature: float
    acceptance_rate: float   # accepted / drafted
    alpha: float             # per-token acceptance (accepted / tested)
    tokens_per_round: float
    ms_per_token: float
    stats: GenerationStats   # the runs over all prompts, combined


def acceptance_table(target, draft, prompts: list[torch.Tensor], ks: Iterable[int] = range(1, 9),
                     temperatures: Iterable[float] = (0.0, 1.0), max_new_tokens: int = 128,
                     seed: int = 0) -> list[AcceptanceRow]:
    rows = []
    for temperature in temperatures:
        for k in ks:
            s = GenerationStats.combine([
                speculative_generate(target, draft, prompt, k=k, max_new_tokens=max_new_tokens,
                                     temperature=temperature, seed=seed + i).stats
                for i, prompt in enumerate(prompts)])
            rows.append(AcceptanceRow(k, temperature, s.acceptance_rate, s.alpha, s.mean_tokens_per_round,
                                      s.ms_per_token, s))
    return rows


def format_acceptance_table(rows: list[AcceptanceRow]) -> str:
    lines = ["| temperature | K | acceptance rate | alpha | tokens/round | ms/token |", "|---|---|---|---|---|---|"]
    lines += [f"| {r.temperature:g} | {r.k} | {r.acceptance_rate:.3f} | {r.alpha:.3f} | {r.tokens_per_round:.2f} | "
              f"{r.ms_per_token:.2f} |" for r in rows]
    return "\n".join(lines)


def acceptance_by_position(results: Iterable[GenerationResult], depth: int) -> list[float]:
    """From chain-drafting runs: a[j], of the rounds whose draft reached position j + 1 with the j
    drafts before it accepted, the share that accepted draft j + 1 too. Under greedy decoding this is
    how often the drafter names the target's own token j + 1 steps into a round, from its own
    guesses: the acceptance that decides how deep drafting pays. nan where no round got that far."""
    reached, accepted = [0] * depth, [0] * depth
    for result in results:
        for r in result.trace:
            if r.parents is not None and not all(p == i - 1 for i, p in enumerate(r.parents)):
                raise ValueError("acceptance_by_position needs chain drafts (a tree's positions are not one row)")
            for j in range(min(depth, len(r.drafted), r.accepted + 1)):
                reached[j] += 1
                accepted[j] += int(j < r.accepted)
    return [a / n if n else float("nan") for a, n in zip(accepted, reached)]


def position_acceptance(target, drafters: dict, prompts: list[torch.Tensor], k: int, max_new_tokens: int = 64
                        ) -> dict[str, dict]:
    """Greedy chain drafting with each drafter (name -> Drafter or draft model) at depth k on the same
    prompts: {name: {"by_position": acceptance_by_position, "tokens_per_round": ...}}. Drafters that
    cannot draft k deep (Medusa: one head per position) report as far as they go."""
    table = {}
    for name, drafter in drafters.items():
        results = [speculative_generate(target, drafter, p, k=k, max_new_tokens=max_new_tokens) for p in prompts]
        stats = GenerationStats.combine([r.stats for r in results])
        table[name] = {"by_position": acceptance_by_position(results, k),
                       "tokens_per_round": stats.mean_tokens_per_round}
    return table


def heldout_windows(tokenizer, n: int = 8, length: int = 256, seed: int = 0) -> torch.Tensor:
    """(n, length) ids from held-out standard-library files, for teacher-forced measurements."""
    _, heldout = split_texts()
    stream = torch.tensor([t for text in heldout for t in tokenizer(text).input_ids + [tokenizer.eos_token_id]])
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(stream) - length, (n,), generator=g).tolist()
    return torch.stack([stream[s:s + length] for s in starts])


def reliability(confidence: torch.Tensor, outcome: torch.Tensor, bins: int = 10) -> list[dict]:
    """A reliability table: the predictions grouped by `confidence` into `bins` equal-width bins on
    [0, 1], each with its count, mean confidence and mean `outcome` (1/0 or a probability). A
    calibrated predictor has mean outcome = mean confidence in every bin; empty bins are left out."""
    confidence, outcome = confidence.flatten().float(), outcome.flatten().float()
    if confidence.shape != outcome.shape:
        raise ValueError(f"confidence and outcome must hold as many values, got {confidence.numel()} and "
                         f"{outcome.numel()}")
    if not bins >= 1 or confidence.numel() == 0:
        raise ValueError("reliability needs at least one bin and one prediction")
    which = (confidence * bins).long().clamp(max=bins - 1)
    table = []
    for b in range(bins):
        chosen = which == b
        if chosen.any():
            table.append({"low": b / bins, "high": (b + 1) / bins, "count": int(chosen.sum()),
                          "confidence": float(confidence[chosen].mean()), "outcome": float(outcome[chosen].mean())})
    return table


def calibration_error(table: list[dict]) -> float:
    """The expected calibration error of a reliability table: the count-weighted mean gap between
    mean confidence and mean outcome over the bins."""
    total = sum(row["count"] for row in table)
    return sum(row["count"] * abs(row["confidence"] - row["outcome"]) for row in table) / total
