"""The accept/reject rule of speculative sampling (Leviathan et al. 2023; Chen et al. 2023).

For draft token x_i drawn from q_i: accept with probability min(1, p_i(x_i) / q_i(x_i)). At the first
rejection, draw the replacement from the residual max(0, p_i - q_i), renormalised. If all K drafts
pass, draw a bonus token from p_{K+1}. The tokens that come out are distributed exactly as if drawn
from p one at a time. With one-hot (greedy) p and q the same rule becomes "accept the longest prefix
that matches the target's argmax, then take the target's argmax".
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from speclab.sampling import sample
from speclab.trees import chain_parents, check_parents, children, depths, path_to


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
    verify_tree: a token reported with q = 0 is accepted wherever p > 0.
    """
    q_r = sampled_probs if reported_probs is None else reported_probs
    ratio = torch.where(q_r > 0, (target_probs / q_r.clamp(min=1e-30)).clamp(max=1), (target_probs > 0).to(q_r.dtype))
    accepted = sampled_probs * ratio
    return accepted + (1 - accepted.sum(-1, keepdim=True)) * residual_distribution(target_probs, q_r)


# the lossless rules, named as speculative_generate's `acceptance` names them
LOSSLESS_RULES = ("rejection", "block")


def verify(target_probs: torch.Tensor, draft_probs: torch.Tensor, draft_tokens: torch.Tensor,
           generator: torch.Generator | None = None, acceptance: str = "rejection") -> tuple[int, int]:
    """One round of the rule on explicit distributions, for a chain of K drafts.

    target_probs: (K+1, V) served target distributions, row i predicting the token after draft i-1
    (row K gives the bonus). draft_probs: (K, V) served draft distributions the drafts were drawn from.
    draft_tokens: (K,) ids. Returns (number of accepted drafts, next token id): the correction drawn
    from the residual at the first rejection, or the bonus token when all K are accepted.
    acceptance "rejection": the token-wise rule; a chain is the tree whose node i hangs under node i - 1,
    so this is `verify_tree` on that tree. "block": block verification (`verify_block`), which judges the
    drafts jointly and accepts at least as many in expectation; both are lossless (speculative_generate's
    `acceptance` names them alike).
    """
    if acceptance not in LOSSLESS_RULES:
        raise ValueError(f"acceptance must be one of {LOSSLESS_RULES}, got {acceptance!r}")
    k = draft_tokens.shape[0] if draft_tokens.dim() == 1 else -1
    if k < 0 or target_probs.dim() != 2 or draft_probs.dim() != 2:
        raise ValueError("verify expects draft_tokens of shape (K,), target_probs (K+1, V), draft_probs (K, V); "
                         f"got {tuple(draft_tokens.shape)}, {tuple(target_probs.shape)}, {tuple(draft_probs.shape)}")
    if acceptance == "block":
        return verify_block(target_probs, draft_probs, draft_tokens, generator)
    path, next_token = verify_tree(target_probs, draft_probs, draft_tokens, chain_parents(k), generator)
    return len(path), next_token


def verify_block(target_probs: torch.Tensor, draft_probs: torch.Tensor | None, draft_tokens: torch.Tensor,
                 generator: torch.Generator | None = None) -> tuple[int, int]:
    """Block verification (Sun et al., ICLR 2025; vLLM's rejection_sample_method="block") of a chain of K
    drafts; arguments and result as `verify` (draft_probs None: point masses).

    Where the token-wise rule stops at its first refusal, this keeps a running weight w_i = min(1,
    w_{i-1} p_i(x_i) / q_i(x_i)), w_0 = 1, and with r_i the mass of max(0, w_i p_{i+1} - q_{i+1}) keeps the
    prefix of length i with probability h_i = r_i / (r_i + 1 - w_i) (i < K), h_K = w_K: one uniform a
    position, the longest prefix whose uniform fell under its h_i. The next token comes from the target's
    row after the block when all K are kept, else from max(0, w_tau p_{tau+1} - q_{tau+1}) renormalised.
    The paper proves the output distributed as the target's and the expected number kept at least the
    token-wise rule's (its Theorems 1 and 2); greedy p and q give the same longest match.
    """
    k = draft_tokens.shape[0] if draft_tokens.dim() == 1 else -1
    check_tree_inputs(target_probs, draft_probs, draft_tokens, chain_parents(max(k, 0)))
    vocab = target_probs.shape[1]
    q = draft_probs if draft_probs is not None else torch.nn.functional.one_hot(draft_tokens, vocab).to(target_probs)
    positions = torch.arange(k, device=draft_tokens.device)
    p_x, q_x = target_probs[positions, draft_tokens], q[positions, draft_tokens]
    # a token the draft reported with q = 0 is treated as the token-wise rule treats it: kept where p > 0
    ratio = torch.where(q_x > 0, p_x / q_x.clamp(min=1e-30), (p_x > 0).to(p_x.dtype) * float("inf"))
    weights = [1.0]
    for r in ratio.tolist():
        weights.append(0.0 if weights[-1] == 0 else min(1.0, weights[-1] * r))
    keep = [weights[k]] * k  # h_i for i = 1..K; the last keeps its weight
    for i in range(1, k):
        residual = float(block_residual(weights[i], target_probs[i], q[i]).sum())
        denominator = residual + 1.0 - weights[i]
        keep[i - 1] = residual / denominator if denominator > 0 else 1.0
    u = torch.rand(k, generator=generator, device=target_probs.device).tolist()
    tau = max((i + 1 for i in range(k) if u[i] < keep[i]), default=0)  # u < h: h = 0 never passes
    if tau == k:
        return k, int(sample(target_probs[k], generator))
    left = block_residual(weights[tau], target_probs[tau], q[tau])
    return tau, int(sample(left if left.sum() > 0 else target_probs[tau], generator))  # sample normalises


def block_residual(weight: float, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """max(0, w p - q), unnormalised: what the target still wants at a position once the block before it
    has used all but w of the target's probability, beyond what the draft offers there. With w = 1 it is
    the token-wise rule's residual."""
    return torch.clamp(weight * p - q, min=0)


def check_tree_inputs(target_probs: torch.Tensor, draft_probs: torch.Tensor | None, draft_tokens: torch.Tensor,
                      parents: Sequence[int]) -> list[int]:
    """The parents as a list, once every shape and id is consistent; otherwise a ValueError saying what to fix."""
    if draft_tokens.dim() != 1 or target_probs.dim() != 2:
        raise ValueError(f"expected draft_tokens of shape (N,) and target_probs (N+1, V); "
                         f"got {tuple(draft_tokens.shape)} and {tuple(target_probs.shape)}")
    n, vocab = draft_tokens.shape[0], target_probs.shape[1]
    if target_probs.shape[0] != n + 1:
        raise ValueError(f"with N = {n} draft nodes, target_probs must have N + 1 = {n + 1} rows (row 0 after the "
                         f"pending token, row i + 1 after node i); got {tuple(target_probs.shape)}")
    if draft_probs is not None and tuple(draft_probs.shape) != (n, vocab):
        raise ValueError(f"draft_probs must be (N, V) = ({n}, {vocab}), one row per node over the same V as "
                         f"target_probs, or None for deterministic proposals; got {tuple(draft_probs.shape)}")
    if n and (draft_tokens.min() < 0 or draft_tokens.max() >= vocab):
        raise ValueError(f"draft token ids must lie in [0, {vocab}); got {draft_tokens.tolist()}")
    return check_parents(parents, n)


def verify_tree(target_probs: torch.Tensor, draft_probs: torch.Tensor | None, draft_tokens: torch.Tensor,
                parents: Sequence[int], generator: torch.Generator | None = None) -> tuple[list[int], int]:
    """The rejection rule on a tree of N draft nodes (multi-candidate speculative sampling, SpecInfer, Miao et
    al. 2024). Returns (path, next token): the accepted nodes from the root down and the token after them.
    target_probs (N+1, V): row 0 after the pending token, row i + 1 after node i; draft_probs (N, V): the
    distribution node i was drawn from, or None (a point mass); parents: see speclab.trees.

    From the root, with p its target row, children are tried in index order: child x is accepted with
    probability min(1, p(x) / q(x)) and p becomes its row; after a rejection p becomes normalise(max(0,
    p - q)) before the next sibling. With no child left the next token is drawn from p: the residual, or
    the bonus row. Each sibling must report the q it was really drawn from (with or without replacement,
    or a point mass); then every emitted token is distributed as the target's p.
    """
    parents = check_tree_inputs(target_probs, draft_probs, draft_tokens, parents)
    n = len(parents)
    kids = children(parents)
    if n:
        # Every node's test against its parent's row as it stands before any sibling is refused; one
        # uniform per node, drawn at once, tested as u * q(x) < p(x): a token the target gives no
        # mass is always refused, one a deterministic drafter proposes with q = 0 never is.
        nodes = torch.arange(n, device=draft_tokens.device)
        p_at = target_probs[torch.tensor(parents, device=draft_tokens.device) + 1, draft_tokens]
        q_at = draft_probs[nodes, draft_tokens] if draft_probs is not None else torch.ones_like(p_at)
        u = torch.rand(n, generator=generator, device=target_probs.device)
        first_try = (u * q_at < p_at).tolist()
    path: list[int] = []
    node, p = -1, target_probs[0]
    while True:
        chosen, p_changed = None, False
        for child in kids[node + 1]:
            x = draft_tokens[child]
            q = draft_probs[child] if draft_probs is not None else point_mass(x, p.shape[-1], p)
            accepted = bool(u[child] * q[x] < p[x]) if p_changed else first_try[child]
            if accepted:
                chosen = child
                break
            p, p_changed = residual_distribution(p, q), True
        if chosen is None:
            return path, int(sample(p, generator))
        path.append(chosen)
        node, p = chosen, target_probs[chosen + 1]


def point_mass(token: torch.Tensor, vocab: int, like: torch.Tensor) -> torch.Tensor:
    """q for a deterministic proposal: all mass on `token`."""
    return torch.zeros(vocab, dtype=like.dtype, device=like.device).index_fill_(0, token.view(1), 1.0)


def typical_threshold(p: torch.Tensor, epsilon: float, delta: float) -> float:
    """Typical acceptance's bar for a candidate under target row p: min(epsilon, delta * exp(-H(p)))."""
    entropy = -(p * torch.log(p.clamp(min=1e-30))).sum()
    return min(epsilon, delta * float(torch.exp(-entropy)))


def typical_accept_tree(target_probs: torch.Tensor, draft_tokens: torch.Tensor, parents: Sequence[int],
                        epsilon: float = 0.09, delta: float = 0.3,
                        generator: torch.Generator | None = None) -> tuple[list[int], int]:
    """Typical acceptance (an extension in the Medusa paper, Cai et al. 2024), speclab's variant, on a
    tree: at each accepted node, take the first child x with p(x) > min(epsilon, delta * exp(-H(p))),
    p the target's row there; when none passes, draw the next token from that row. (The reference's
    evaluate_posterior thresholds every path at once, keeps the longest accepted prefix, ties by
    likelihood, and takes the next token by argmax or from p cut to the tokens above the threshold.) It accepts more than the rejection rule at a
    temperature above 0, and it is NOT lossless: the emitted tokens are not distributed as p.
    Defaults are the reference generate()'s posterior_threshold 0.09 and posterior_alpha 0.3."""
    parents = check_tree_inputs(target_probs, None, draft_tokens, parents)
    kids = children(parents)
    path: list[int] = []
    node = -1
    while True:
        p = target_probs[node + 1]
        threshold = typical_threshold(p, epsilon, delta)
        chosen = next((c for c in kids[node + 1] if p[draft_tokens[c]] > threshold), None)
        if chosen is None:
            return path, int(sample(p, generator))
        path.append(chosen)
        node = chosen


def medusa_typical_accept_tree(target_probs: torch.Tensor, draft_tokens: torch.Tensor, parents: Sequence[int],
                               epsilon: float = 0.09, delta: float = 0.3, fast: bool = True,
                               generator: torch.Generator | None = None) -> tuple[list[int], int]:
    """Typical acceptance as the Medusa reference decides it (FasterDecoding/Medusa,
    medusa/model/utils.py: evaluate_posterior, then generate_candidates): every node passes when
    p(x) > min(epsilon, delta * exp(-H(p))), p the target's row at its parent; the accepted path is
    the deepest node whose whole path passes, ties broken by the path's likelihood (the sum of log
    p(x) along it); the next token is the argmax of the target's row at the path's end (fast=True,
    medusa_generate's default) or a draw from that row cut to the tokens at or above its threshold
    (fast=False: get_typical_one_token). NOT lossless, like speclab's variant (typical_accept_tree),
    which takes the first passing child level by level and draws the next token from the whole row."""
    parents = check_tree_inputs(target_probs, None, draft_tokens, parents)
    bars = [typical_threshold(row, epsilon, delta) for row in target_probs]
    passed: list[bool] = []          # the node and all its ancestors pass (parents come first)
    likelihood: list[float] = []     # the sum of log p(x) along the node's path
    for node, parent in enumerate(parents):
        prob = float(target_probs[parent + 1][draft_tokens[node]])
        passed.append(prob > bars[parent + 1] and (parent < 0 or passed[parent]))
        likelihood.append(math.log(max(prob, 1e-30)) + (likelihood[parent] if parent >= 0 else 0.0))
    depth = depths(parents)
    accepted = [node for node in range(len(parents)) if passed[node]]
    best = max(accepted, key=lambda node: (depth[node], likelihood[node]), default=-1)
    p = target_probs[best + 1]
    if fast:
        return path_to(parents, best), int(p.argmax())
    kept = torch.where(p >= bars[best + 1], p, torch.zeros_like(p))
    return path_to(parents, best), int(sample(kept / kept.sum(), generator))


def typical_emitted_distribution(p: torch.Tensor, candidates: list[int], epsilon: float = 0.09,
                                 delta: float = 0.3, rule: str = "speclab", fast: bool = True) -> torch.Tensor:
    """Exact distribution of the token typical acceptance emits at one node whose children are the
    deterministic `candidates` (in order). rule "speclab" (typical_accept_tree): all mass on the first
    candidate that passes the threshold, or p itself when none does. rule "reference", the Medusa
    reference's (medusa_typical_accept_tree): all mass on the passing candidate of highest p (the
    likeliest of the longest paths), or, when none passes, on p's argmax (fast) or on p cut to the tokens at or above
    the threshold. Compare it with p (what the rejection rule emits) to see the bias."""
    if rule not in ("speclab", "reference"):
        raise ValueError(f"rule must be 'speclab' or 'reference' (Medusa's), got {rule!r}")
    threshold = typical_threshold(p, epsilon, delta)
    passing = [x for x in candidates if p[x] > threshold]
    if passing:
        chosen = passing[0] if rule == "speclab" else max(passing, key=lambda x: float(p[x]))
        return torch.zeros_like(p).index_fill_(0, torch.tensor([chosen]), 1.0)
    if rule == "speclab":
        return p.clone()
    if fast:
        return torch.zeros_like(p).index_fill_(0, p.argmax().view(1), 1.0)
    kept = torch.where(p >= threshold, p, torch.zeros_like(p))
    return kept / kept.sum()


def sibling_emitted_distribution(p: torch.Tensor, candidates: list[int]) -> torch.Tensor:
    """Exact distribution of the token `verify_tree` emits at one node whose children are the
    deterministic `candidates` (point masses, tried in order): the first is accepted with probability
    p(x), otherwise the rule goes on with the residual. It equals p: the claim of multi-candidate
    rejection sampling, computed rather than sampled (compare typical_emitted_distribution)."""
    if not candidates:
        return p
    q = point_mass(torch.tensor(candidates[0]), len(p), p)
    accept = p[candidates[0]]
    return accept * q + (1 - accept) * sibling_emitted_distribution(residual_distribution(p, q), candidates[1:])
