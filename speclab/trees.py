"""Token trees: how a tree of draft tokens is written down and laid out for one target pass.

A tree of N draft nodes is a list `parents`: node i's parent index, or -1 for a child of the pending token
(the root). A parent comes before its children and siblings are tried in index order; a chain of K tokens
is [-1, 0, ..., K-2]. Medusa and EAGLE-2 propose wider trees (Cai et al. 2024; Li et al. 2024), SpecInfer
(Miao et al. 2024) merges several sequences into one. The target checks every node in one pass over
[root, node 0, ..., node N-1], node i seeing the prefix, the root, its ancestors and itself at position
prefix + depth(i) (tree_attention_mask, tree_position_ids); kept_positions names the cache rows to keep
after the rule picks a path. tree_from_choices reads the Medusa reference's `medusa_choices`.
"""
from __future__ import annotations

import heapq
from collections.abc import Sequence

import torch


def chain_parents(n: int) -> list[int]:
    """The parents of a chain of n nodes: [-1, 0, 1, ..., n-2]."""
    return list(range(-1, n - 1))


def check_parents(parents: Sequence[int], n: int | None = None) -> list[int]:
    """`parents` as a list of ints, or a ValueError that says what is wrong with it."""
    parents = [int(p) for p in (parents.tolist() if isinstance(parents, torch.Tensor) else parents)]
    if n is not None and len(parents) != n:
        raise ValueError(f"parents must have one entry per draft node: {n} nodes, {len(parents)} parents")
    for i, p in enumerate(parents):
        if not -1 <= p < i:
            raise ValueError(f"parents[{i}] = {p}: a node's parent must be -1 (the pending token) or an earlier node "
                             f"(0..{i - 1}); order the nodes so that every parent comes before its children")
    return parents


def is_chain(parents: Sequence[int]) -> bool:
    return all(p == i - 1 for i, p in enumerate(parents))


def depths(parents: Sequence[int]) -> list[int]:
    """Depth of each node: 1 for a child of the root, 1 + the parent's depth otherwise."""
    out: list[int] = []
    for p in parents:
        out.append(1 if p < 0 else out[p] + 1)
    return out


def children(parents: Sequence[int]) -> list[list[int]]:
    """children[j + 1]: the children of node j in index order; children[0]: those of the root."""
    kids: list[list[int]] = [[] for _ in range(len(parents) + 1)]
    for i, p in enumerate(parents):
        kids[p + 1].append(i)
    return kids


def path_to(parents: Sequence[int], node: int) -> list[int]:
    """The nodes from the root's child down to `node` (empty for the root, -1)."""
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


def leaf_paths(parents: Sequence[int]) -> list[list[int]]:
    """One path (root's child .. leaf) per leaf, in index order of the leaves: Medusa's retrieve indices."""
    has_child = set(p for p in parents if p >= 0)
    return [path_to(parents, i) for i in range(len(parents)) if i not in has_child]


def prune_to_depth(parents: Sequence[int], max_depth: int) -> tuple[list[int], list[int]]:
    """The subtree of nodes at depth <= max_depth: (kept node indices, their parents renumbered).
    A node's ancestors are shallower than it, so what is kept is still a tree in parent-first order."""
    keep = [i for i, d in enumerate(depths(parents)) if d <= max_depth]
    new_index = {old: new for new, old in enumerate(keep)}
    return keep, [new_index[parents[i]] if parents[i] >= 0 else -1 for i in keep]


def ancestor_matrix(parents: Sequence[int]) -> torch.Tensor:
    """(N+1, N+1) bool over [root, node 0, ..., node N-1]: entry [j, i] says whether row j may attend
    to row i, that is whether i is j itself or one of its ancestors (the root is everyone's)."""
    n = len(parents)
    sees = torch.zeros(n + 1, n + 1, dtype=torch.bool)
    sees[:, 0] = True
    sees[0, 0] = True
    for i, p in enumerate(parents):
        sees[i + 1] = sees[p + 1]  # the parent's ancestors (a parent's row is complete before its children's)
        sees[i + 1, i + 1] = True
    return sees


def pass_visibility(parents: Sequence[int], side_sees: torch.Tensor | None = None) -> torch.Tensor:
    """(N+1 [+ M], N+1 [+ M]) bool over one pass's own rows [root, nodes, side rows]: row i sees row j.
    A node sees the root and its ancestors (and itself); a side row sees the root and the side rows
    `side_sees` names, never a node, and no node sees a side row."""
    sees = ancestor_matrix(parents)
    if side_sees is None:
        return sees
    m, n1 = len(side_sees), len(sees)
    both = torch.zeros(n1 + m, n1 + m, dtype=torch.bool)
    both[:n1, :n1] = sees
    both[n1:, 0] = True
    both[n1:, n1:] = side_sees.to(torch.bool).cpu()
    return both


def tree_attention_mask(parents: Sequence[int], cached: int, dtype: torch.dtype,
                        device: torch.device | str = "cpu", side_sees: torch.Tensor | None = None) -> torch.Tensor:
    """Additive 4-D mask (1, 1, N+1, cached + N+1) in `dtype` for the pass over [root, nodes]: 0 where a
    row may attend, the dtype's most negative number where it may not. Every row sees the whole cached
    prefix. transformers 5 hands a 4-D mask to eager and SDPA attention as it is, and eager attention
    adds it to the scores, so it must be additive and in the model's dtype, not boolean.

    `side_sees` (M, M) bool appends M side rows after the nodes (a drafter's extra tokens, such as
    lookahead's Jacobi window): each sees the prefix, the root and the side rows `side_sees` names; no
    node sees a side row and no side row sees a node."""
    sees = pass_visibility(parents, side_sees).to(device)
    visible = torch.cat([torch.ones(len(sees), cached, dtype=torch.bool, device=device), sees], dim=1)
    mask = torch.zeros(visible.shape, dtype=dtype, device=device).masked_fill_(~visible, torch.finfo(dtype).min)
    return mask[None, None]


def tree_position_ids(parents: Sequence[int], cached: int, device: torch.device | str = "cpu",
                      side_depths: Sequence[int] = ()) -> torch.Tensor:
    """(1, N+1 [+ M]) positions for [root, nodes, side rows]: the root at `cached`, a node at cached + its
    depth, so that siblings share a position as the alternatives they are; a side row at cached + its
    entry in `side_depths`."""
    return torch.tensor([[cached] + [cached + d for d in depths(parents)] + [cached + int(d) for d in side_depths]],
                        dtype=torch.long, device=device)


def kept_positions(cached: int, path: Sequence[int]) -> list[int]:
    """Cache rows to keep after a tree pass that appended [root, nodes] at row `cached`: the prefix,
    the root and the accepted path's nodes, in order."""
    return list(range(cached + 1)) + [cached + 1 + i for i in path]


def tree_from_choices(choices: Sequence[Sequence[int]]) -> tuple[list[int], list[int]]:
    """A Medusa tree from `medusa_choices` (one tuple of top-k ranks per node): (parents, ranks), nodes
    sorted by depth and then by ranks, as the reference implementation sorts them. ranks[i] is the
    rank node i takes among its head's top-k. Every prefix of a choice must itself be a choice."""
    nodes = sorted({tuple(int(r) for r in c) for c in choices}, key=lambda c: (len(c), c))
    if any(len(c) == 0 or min(c) < 0 for c in nodes):
        raise ValueError("each medusa choice is a non-empty tuple of top-k ranks >= 0, e.g. (0,), (0, 1), (1,)")
    index = {c: i for i, c in enumerate(nodes)}
    missing = [c for c in nodes if len(c) > 1 and c[:-1] not in index]
    if missing:
        raise ValueError(f"choice {missing[0]} has no parent {missing[0][:-1]} among the choices; add it")
    parents = [index[c[:-1]] if len(c) > 1 else -1 for c in nodes]
    return parents, [c[-1] for c in nodes]


def tree_from_accuracies(accuracies: Sequence[Sequence[float]], budget: int) -> list[tuple[int, ...]]:
    """The `budget`-node tree (as medusa_choices) with the most expected accepted tokens, when head d's
    rank-r candidate is right with probability accuracies[d][r], independently (the construction of
    the Medusa paper). A node's value is the product along its path, which is the chance that it is
    accepted; a tree's expected accepted length is the sum of its nodes' values. A child is worth no
    more than its parent, so taking the best nodes greedily keeps every parent in the tree."""
    frontier = [(-float(accuracies[0][r]), (r,)) for r in range(len(accuracies[0]))]
    heapq.heapify(frontier)
    chosen: list[tuple[int, ...]] = []
    while frontier and len(chosen) < budget:
        neg_value, node = heapq.heappop(frontier)
        chosen.append(node)
        depth = len(node)
        if depth < len(accuracies):
            for r, acc in enumerate(accuracies[depth]):
                heapq.heappush(frontier, (neg_value * float(acc), node + (r,)))
    return chosen


def expected_accepted(choices: Sequence[Sequence[int]], accuracies: Sequence[Sequence[float]]) -> float:
    """Expected accepted drafts per round of a tree under the same independence model."""
    total = 0.0
    for node in choices:
        value = 1.0
        for depth, r in enumerate(node):
            value *= accuracies[depth][r]
        total += value
    return total


def best_tree(accuracies: Sequence[Sequence[float]], pass_cost: dict[int, float], draft_cost: float = 0.0
              ) -> tuple[int, list[dict]]:
    """The node budget whose tree_from_accuracies tree is modelled fastest: tokens per round
    (1 + expected accepted) over the round's cost, pass_cost[budget] (a verify pass over budget + 1
    positions, in units of a one-token target step) plus draft_cost. Returns the best budget and the
    table it was chosen from (one row per budget)."""
    rows = []
    for budget, cost in sorted(pass_cost.items()):
        tree = tree_from_accuracies(accuracies, budget)
        tokens = 1 + expected_accepted(tree, accuracies)
        rows.append({"budget": budget, "depth": max(len(c) for c in tree), "tokens_per_pass": round(tokens, 3),
                     "pass_cost": round(cost, 3), "modelled_speedup": round(tokens / (cost + draft_cost), 3)})
    best = max(rows, key=lambda r: r["modelled_speedup"])
    return best["budget"], rows
