"""The accept/reject rule of speculative sampling (Leviathan et al. 2023; Chen et al. 2023).

For draft token x_i drawn from q_i: accept with probability min(1, p_i(x_i) / q_i(x_i)). At the first
rejection, draw the replacement from the residual max(0, p_i - q_i), renormalised. If all K drafts
pass, draw a bonus token from p_{K+1}. The tokens that come out are distributed exactly as if drawn
from p one at a time. With one-hot (greedy) p and q the same rule becomes "accept the longest prefix
that matches the target's argmax, then take the target's argmax".
"""
from __future__ import annotations

import torch

from speclab.sampling import sample


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """max(0, p - q) renormalised: what is left of p once q's proposals have had their chance.

    Its mass is the total variation distance between p and q; it is zero only when p == q, and a
    rejection is then impossible, so p itself is returned for that (measure-zero) float case.
    """
    residual = torch.clamp(p - q, min=0.0)
    mass = residual.sum()
    return residual / mass if mass > 0 else p


def emitted_distribution(target_probs: torch.Tensor, sampled_probs: torch.Tensor,
                         reported_probs: torch.Tensor | None = None) -> torch.Tensor:
    """Exact distribution of the token one position of the rule emits, for a target row p and a draft
    that samples from `sampled_probs` but tells the rule `reported_probs` (by default the truth).

    accepted: q_s(x) min(1, p(x) / q_r(x)); otherwise the residual of (p, q_r). With q_r = q_s this is
    p exactly, the lemma behind losslessness; with q_r != q_s (a draft reporting its raw softmax while
    sampling from top-k, say) it is not, and the difference is the bias. Same edge rule as
    accepted_mask: a token reported with q = 0 is accepted wherever p > 0.
    """
    q_r = sampled_probs if reported_probs is None else reported_probs
    ratio = torch.where(q_r > 0, (target_probs / q_r.clamp(min=1e-30)).clamp(max=1), (target_probs > 0).to(q_r.dtype))
    accepted = sampled_probs * ratio
    return accepted + (1 - accepted.sum(-1, keepdim=True)) * residual_distribution(target_probs, q_r)


def accepted_mask(target_probs: torch.Tensor, draft_probs: torch.Tensor, draft_tokens: torch.Tensor,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """For each draft position, whether its token passes the test u < p(x) / q(x), u ~ U[0, 1).

    Written as u * q(x) < p(x): a token the target gives no mass is always refused, and one the draft
    gave no mass (it cannot have been sampled from q, but a deterministic drafter may propose it) is
    accepted wherever the target gives it mass.
    """
    rows = torch.arange(len(draft_tokens), device=draft_tokens.device)
    p = target_probs[rows, draft_tokens]
    q = draft_probs[rows, draft_tokens]
    u = torch.rand(len(draft_tokens), generator=generator, device=target_probs.device)
    return u * q < p


def verify(target_probs: torch.Tensor, draft_probs: torch.Tensor, draft_tokens: torch.Tensor,
           generator: torch.Generator | None = None) -> tuple[int, int]:
    """One round of the rule on explicit distributions.

    target_probs: (K+1, V) served target distributions, row i predicting the token after draft i-1
    (row K gives the bonus). draft_probs: (K, V) served draft distributions the drafts were drawn from.
    draft_tokens: (K,) ids. Returns (number of accepted drafts, next token id): the correction drawn
    from the residual at the first rejection, or the bonus token when all K are accepted.
    """
    k = draft_tokens.shape[0] if draft_tokens.dim() == 1 else -1
    if k < 0 or target_probs.dim() != 2 or draft_probs.dim() != 2:
        raise ValueError("verify expects draft_tokens of shape (K,), target_probs (K+1, V), draft_probs (K, V); "
                         f"got {tuple(draft_tokens.shape)}, {tuple(target_probs.shape)}, {tuple(draft_probs.shape)}")
    if target_probs.shape[0] != k + 1 or draft_probs.shape[0] != k or draft_probs.shape[1] != target_probs.shape[1]:
        raise ValueError(f"with K = {k} draft tokens, target_probs must be ({k + 1}, V) and draft_probs ({k}, V) "
                         f"over the same V; got {tuple(target_probs.shape)} and {tuple(draft_probs.shape)}")
    if k and (draft_tokens.min() < 0 or draft_tokens.max() >= target_probs.shape[1]):
        raise ValueError(f"draft token ids must lie in [0, {target_probs.shape[1]}); got {draft_tokens.tolist()}")
    accepted = accepted_mask(target_probs, draft_probs, draft_tokens, generator) if k else draft_tokens.bool()
    n = int(accepted.long().cumprod(0).sum()) if k else 0  # length of the all-accepted prefix
    if n < k:
        next_probs = residual_distribution(target_probs[n], draft_probs[n])
    else:
        next_probs = target_probs[k]
    return n, int(sample(next_probs, generator))
