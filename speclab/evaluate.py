"""How well a draft matches a target: teacher-forced overlap and acceptance measured in decoding."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from speclab.decoding import speculative_generate
from speclab.sampling import logits_to_probs


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


def acceptance_table(target, draft, prompts: list[torch.Tensor], ks: Iterable[int] = range(1, 9),
                     temperatures: Iterable[float] = (0.0, 1.0), max_new_tokens: int = 128,
                     seed: int = 0) -> list[AcceptanceRow]:
    rows = []
    for temperature in temperatures:
        for k in ks:
            accepted = drafted = rejections = rounds = new = 0
            seconds = 0.0
            for i, prompt in enumerate(prompts):
                s = speculative_generate(target, draft, prompt, k=k, max_new_tokens=max_new_tokens,
                                         temperature=temperature, seed=seed + i).stats
                accepted, drafted, rejections = accepted + s.accepted, drafted + s.drafted, rejections + s.rejections
                rounds, new, seconds = rounds + s.rounds, new + s.new_tokens, seconds + s.wall_s
            rows.append(AcceptanceRow(k, temperature, accepted / drafted, accepted / max(1, accepted + rejections),
                                      new / rounds, 1000 * seconds / new))
    return rows


def format_acceptance_table(rows: list[AcceptanceRow]) -> str:
    lines = ["| temperature | K | acceptance rate | alpha | tokens/round | ms/token |", "|---|---|---|---|---|---|"]
    lines += [f"| {r.temperature:g} | {r.k} | {r.acceptance_rate:.3f} | {r.alpha:.3f} | {r.tokens_per_round:.2f} | "
              f"{r.ms_per_token:.2f} |" for r in rows]
    return "\n".join(lines)
