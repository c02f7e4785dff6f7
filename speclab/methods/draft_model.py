"""The classic draft model (Leviathan et al. 2023; Chen et al. 2023): a smaller causal LM that shares
the target's tokenizer, with its own KV cache, drafting a chain token by token."""
from __future__ import annotations

from pathlib import Path

import torch

from speclab.adaptive import stops_here
from speclab.drafting import ChainDrafter, Draft
from speclab.models import load_model
from speclab.runner import model_device, runner_for
from speclab.sampling import SamplingParams, check_finite, pick

NAME = "draft_model"  # the method's name in the registry (vLLM's)


class ModelDrafter(ChainDrafter):
    """A separate, smaller causal LM that shares the target's tokenizer: the classic draft model.

    It keeps its own KV cache. Proposing feeds what it has not seen yet (the last round's
    correction, and the last draft if everything was accepted), then k - 1 of its own samples
    (fewer with a confidence threshold).
    """

    name = "draft model"

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.runner = runner_for(model, who="draft model")
        self.forward_calls = 0

    @property
    def device(self) -> torch.device:
        return self.runner.device

    def start(self, prompt: torch.Tensor) -> None:
        # the runner the model is set up for now (the fast path may have been switched on since)
        self.runner = runner_for(self.model, who="draft model")
        self.forward_calls = 0  # draft steps; the prefill below is not one
        if len(prompt) > 1:
            # Prefill now, as the target does: the loop times start() with the prefill, so each round's
            # drafting time is draft steps alone (the first round's step used to carry the whole prompt).
            self.runner.forward(prompt[:-1], last_only=True)

    def propose(self, ids: torch.Tensor, k: int, sampling: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        tokens, probs = [], []
        new = ids[self.runner.length:]
        for _ in range(k):
            logits = self.runner.forward(new, last_only=True)[-1]
            self.forward_calls += 1
            check_finite(logits, "draft model")
            token, q = pick(logits, sampling, generator)
            tokens.append(token)
            probs.append(q)
            if stops_here(logits, self.confidence_threshold):
                break
            new = token.view(1)
        return Draft(torch.stack(tokens), None if sampling.greedy else torch.stack(probs))

    def update(self, ids: torch.Tensor, num_accepted: int) -> None:
        # Everything but the last token of ids was either seen before this round or an accepted draft.
        self.runner.rollback(min(self.runner.length, len(ids) - 1))


def load_draft_model(target: torch.nn.Module | None, draft: torch.nn.Module | str | Path) -> ModelDrafter:
    """A draft-model drafter from a model, or from a directory loaded in float32 on the target's device."""
    if isinstance(draft, (str, Path)):
        draft = load_model(draft, model_device(target) if target is not None else None, torch.float32)
    return ModelDrafter(draft)
