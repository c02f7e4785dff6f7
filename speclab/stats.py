"""What every generation run reports: one result object, easy to print and to plot."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch


@dataclass
class Round:
    """One draft-verify round: what was proposed, how many were kept, and the target's own token."""

    drafted: list[int]
    accepted: int
    next_token: int
    parents: list[int] | None = None  # a tree draft's shape (None: a chain)
    path: list[int] | None = None     # a tree draft's accepted nodes, root to leaf

    @property
    def new_tokens(self) -> list[int]:
        kept = self.drafted[:self.accepted] if self.path is None else [self.drafted[i] for i in self.path]
        return kept + [self.next_token]


@dataclass
class GenerationStats:
    method: str = "target only"
    k: int = 0
    new_tokens: int = 0
    target_calls: int = 0       # target forward passes, the prefill included
    draft_calls: int = 0        # draft model forward passes (0 for model-free drafters)
    rounds: int = 0             # verify rounds (for target-only decoding: decode steps)
    drafted: int = 0            # draft tokens verified (for trees: every node)
    accepted: int = 0
    verified_positions: int = 0  # positions in the verify passes: pending + nodes + side tokens (lookahead)
    rejections: int = 0         # rounds that ended with a draft refused (a tree: the path stopped above a leaf)
    empty_rounds: int = 0       # rounds whose drafter proposed nothing (prompt lookup without a match)
    accepted_lengths: list[int] = field(default_factory=list)  # histogram: rounds that kept 0, 1, ..., K drafts
    prefill_s: float = 0.0
    draft_s: float = 0.0        # time in the drafter after the prefill (its forward passes and sampling)
    target_s: float = 0.0       # time in target forward passes after the prefill
    wall_s: float = 0.0         # everything, the prefill included
    device: str = "cpu"
    lossless: bool = True       # False when an acceptance rule that changes the distribution was used
    batch: int = 1              # sequences decoded together (each has its own stats; pass times are the batch's)
    # seconds from the call's start at which each new token was ready (a round's tokens share one time)
    token_s: list[float] = field(default_factory=list, repr=False)

    def add_round(self, drafted: int, path: list[int], parents: list[int], side: int, draft_s: float,
                  verify_s: float) -> None:
        """Count one round: `drafted` nodes under `parents` verified with `side` tokens riding along, the
        accepted `path`, and the seconds spent drafting and verifying."""
        self.rounds += 1
        self.target_calls += 1
        self.drafted += drafted
        self.empty_rounds += int(drafted == 0)
        self.accepted += len(path)
        self.verified_positions += drafted + 1 + side
        # a refusal: some node was offered below the path's end (for a chain, the next draft)
        self.rejections += int(any(parent == (path[-1] if path else -1) for parent in parents))
        self.accepted_lengths[len(path)] += 1
        self.draft_s += draft_s
        self.target_s += verify_s

    @property
    def acceptance_rate(self) -> float:
        """Accepted drafts / drafted tokens (the fraction of the target's checking that paid off)."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def alpha(self) -> float:
        """Per-token acceptance estimated as the theory defines it: each draft is tested only while all
        before it passed, so alpha = accepted / (accepted + rejections). With this alpha,
        theory.expected_tokens(alpha, K) is the geometric model's tokens per round."""
        tested = self.accepted + self.rejections
        return self.accepted / tested if tested else 0.0

    @property
    def mean_tokens_per_round(self) -> float:
        return self.new_tokens / self.rounds if self.rounds else 0.0

    @property
    def other_s(self) -> float:
        """Time outside the prefill and the models' passes: sampling, the rule, cache rollback, Python."""
        return self.wall_s - self.prefill_s - self.draft_s - self.target_s

    @property
    def ms_per_token(self) -> float:
        return 1000 * self.wall_s / self.new_tokens if self.new_tokens else float("nan")

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s else float("nan")

    @classmethod
    def combine(cls, runs: list[GenerationStats]) -> GenerationStats:
        """One record for several runs (prompts) of the same method: counts and times summed."""
        if not runs:
            raise ValueError("combine needs at least one GenerationStats")
        total = cls(method=runs[0].method, k=runs[0].k, device=runs[0].device,
                    accepted_lengths=[0] * len(runs[0].accepted_lengths))
        for s in runs:
            total.lossless = total.lossless and s.lossless
            if (s.method, s.k) != (total.method, total.k):
                raise ValueError(f"cannot combine runs of {s.method!r} (K={s.k}) with {total.method!r} (K={total.k})")
            for name in ("new_tokens", "target_calls", "draft_calls", "rounds", "drafted", "accepted", "rejections",
                         "empty_rounds", "verified_positions",
                         "prefill_s", "draft_s", "target_s", "wall_s"):
                setattr(total, name, getattr(total, name) + getattr(s, name))
            total.accepted_lengths = [a + b for a, b in zip(total.accepted_lengths, s.accepted_lengths)]
        return total

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("token_s")  # one number per token: summarised where latency is measured, not stored per run
        d.update(acceptance_rate=self.acceptance_rate, alpha=self.alpha,
                 mean_tokens_per_round=self.mean_tokens_per_round, ms_per_token=self.ms_per_token,
                 tokens_per_s=self.tokens_per_s, other_s=self.other_s)
        return d

    def __str__(self) -> str:
        # lines of at most about 88 characters: what a book page's code column shows without scrolling
        lines = [f"{self.method}: {self.new_tokens} new tokens in {self.wall_s * 1000:.1f} ms on {self.device}",
                 f"  {self.ms_per_token:.2f} ms/token, {self.tokens_per_s:.1f} tokens/s; "
                 f"target forward calls {self.target_calls}",
                 f"  time: prefill {1000 * self.prefill_s:.1f} ms, target {1000 * self.target_s:.1f} ms, "
                 f"drafting {1000 * self.draft_s:.1f} ms, other {1000 * self.other_s:.1f} ms"]
        if self.k:
            lines += [f"  K={self.k}: drafted {self.drafted}, accepted {self.accepted} "
                      f"(acceptance rate {self.acceptance_rate:.3f}, alpha {self.alpha:.3f})",
                      f"  {self.mean_tokens_per_round:.2f} tokens per round, draft calls {self.draft_calls}",
                      f"  accepted-length histogram (0..K): {self.accepted_lengths}"]
        if not self.lossless:
            lines.append("  NOT LOSSLESS: typical acceptance does not preserve the target's distribution")
        return "\n".join(lines)


@dataclass
class GenerationResult:
    tokens: torch.Tensor            # the new token ids (1-D), prompt excluded
    stats: GenerationStats
    trace: list[Round] = field(default_factory=list)

    def __str__(self) -> str:
        return str(self.stats)
