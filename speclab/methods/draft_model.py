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
from speclab.methods.engines import Options, by_batch, confidence, no_confidence
from speclab.methods.flags import Flag, Setting, Sweep, int_list, named

NAME = "draft_model"  # the method's name in the registry (vLLM's)


class ModelDrafter(ChainDrafter):
    """A separate, smaller causal LM that shares the target's tokenizer: the classic draft model.

    It keeps its own KV cache. Proposing feeds what it has not seen yet (the last round's
    correction, and the last draft if everything was accepted), then k - 1 of its own samples
    (fewer with a confidence threshold). For a batch, each sequence has its own row of the draft's
    cache (the fast path's, max_batch rows), and each draft step is one pass over every sequence
    still drafting.
    """

    name = NAME

    @property
    def batched(self) -> bool:
        """Drafts batches, unless a subclass changed how one sequence is drafted (overrode start, propose or
        update: its batch would silently skip the change); one sequence always goes through those."""
        return all(getattr(type(self), hook) is getattr(ModelDrafter, hook) for hook in ("start", "propose", "update"))

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.runner = runner_for(model, who="draft model")
        self.forward_calls = 0

    @property
    def device(self) -> torch.device:
        return self.runner.device

    def start(self, prompt: torch.Tensor) -> None:
        self.prefill_rows([0], [prompt])

    def start_rows(self, rows: list[int], prompts: list[torch.Tensor]) -> None:
        if rows == [0]:  # through start(), which a subclass may override (see batched): same tokens
            self.start(prompts[0])
        else:
            self.prefill_rows(rows, prompts)

    def follow_target(self) -> None:  # noqa: B027 (optional hook)
        """Called as each sequence (or batch) starts, before the runner is chosen: a drafter whose network
        is a view of the target's puts it on the target's path here (speclab.methods.layer_skip)."""

    def prefill_rows(self, rows: list[int], prompts: list[torch.Tensor]) -> None:
        self.follow_target()
        # the runner the model is set up for now (the fast path may have been switched on since)
        self.runner = runner_for(self.model, who="draft model")
        self.forward_calls = 0  # draft steps; the prefill below is not one
        filled = [(row, prompt[:-1]) for row, prompt in zip(rows, prompts) if len(prompt) > 1]
        if filled:
            # Prefill now, as the target does: the loop times start() with the prefill, so each round's
            # drafting time is draft steps alone (the first round's step used to carry the whole prompt).
            self.runner.forward_rows([r for r, _ in filled], [p for _, p in filled], last_only=True)

    def propose(self, ids: torch.Tensor, k: int, sampling: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        return self.draft_rows([0], [ids], [k], sampling, generator)[0]

    def propose_rows(self, rows: list[int], ids: list[torch.Tensor], ks: list[int], sampling: SamplingParams,
                     generator: torch.Generator | None = None) -> list[Draft]:
        if rows == [0]:  # through propose(), which a subclass may override (see batched): same tokens
            return [self.propose(ids[0], ks[0], sampling, generator)]
        return self.draft_rows(rows, ids, ks, sampling, generator)

    def draft_rows(self, rows: list[int], ids: list[torch.Tensor], ks: list[int], sampling: SamplingParams,
                   generator: torch.Generator | None = None) -> list[Draft]:
        ks = list(ks)
        tokens: list[list[torch.Tensor]] = [[] for _ in rows]
        probs: list[list[torch.Tensor]] = [[] for _ in rows]
        new = [seq[self.runner.lengths[row]:] for row, seq in zip(rows, ids)]
        drafting = [i for i, k in enumerate(ks) if k > 0]
        while drafting:  # one pass of the draft model per step, over every sequence still drafting
            logits = self.runner.forward_rows([rows[i] for i in drafting], [new[i] for i in drafting],
                                              last_only=True)
            self.forward_calls += 1
            for i, row_logits in zip(drafting, logits):
                check_finite(row_logits[-1], "draft model")
                token, q = pick(row_logits[-1], sampling, generator)
                tokens[i].append(token)
                probs[i].append(q)
                new[i] = token.view(1)
                if stops_here(row_logits[-1], self.confidence_threshold):
                    ks[i] = len(tokens[i])  # this sequence's round ends here
            drafting = [i for i in drafting if len(tokens[i]) < ks[i]]
        return [Draft(torch.stack(t), None if sampling.greedy else torch.stack(q)) for t, q in zip(tokens, probs)]

    def update(self, ids: torch.Tensor, num_accepted: int) -> None:
        self.roll_back([0], [ids])

    def update_rows(self, rows: list[int], ids: list[torch.Tensor], num_accepted: list[int]) -> None:
        if rows == [0]:  # through update(), which a subclass may override (see batched): same tokens
            self.update(ids[0], num_accepted[0])
        else:
            self.roll_back(rows, ids)

    def roll_back(self, rows: list[int], ids: list[torch.Tensor]) -> None:
        # Everything but the last token of ids was either seen before this round or an accepted draft.
        for row, seq in zip(rows, ids):
            self.runner.rollback(min(self.runner.lengths[row], len(seq) - 1), row)


def load_draft_model(target: torch.nn.Module | None, draft: torch.nn.Module | str | Path) -> ModelDrafter:
    """A draft-model drafter from a model, or from a directory loaded in float32 on the target's device."""
    if isinstance(draft, (str, Path)):
        draft = load_model(draft, model_device(target) if target is not None else None, torch.float32)
    return ModelDrafter(draft)


# ---------------------------------------------------------------- engine settings
def engine_settings(engine: str, o: Options) -> dict:
    """The draft model's settings as `engine` takes them (speclab.serving.settings.engine_settings)."""
    path = o.path or "DRAFT_DIR"
    if engine == "speclab":
        return {"method": NAME, "draft": path, "k": o.k, **confidence(o), **by_batch(engine, o)}
    if engine == "vllm":
        no_confidence(engine, o)
        return {"method": NAME, "model": path, "num_speculative_tokens": o.k, **by_batch(engine, o)}
    if engine == "sglang":
        no_confidence(engine, o)
        by_batch(engine, o)
        return {"--speculative-algorithm": "STANDALONE", "--speculative-draft-model-path": path,
                "--speculative-num-steps": o.k, "--speculative-eagle-topk": 1, "--speculative-num-draft-tokens": o.k + 1}
    if engine == "tensorrt-llm":
        no_confidence(engine, o)
        return {"decoding_type": "DraftTarget", "max_draft_len": o.k, "speculative_model": path, **by_batch(engine, o)}
    if engine == "llama.cpp":
        by_batch(engine, o)
        # llama.cpp's p_min stops the draft below the draft's own probability (speclab's confidence stop)
        return {"--spec-type": "draft-simple", "--spec-draft-model": path, "--spec-draft-n-max": o.k,
                "--spec-draft-n-min": 0, "--spec-draft-p-min": o.confidence_threshold or 0.0}
    by_batch(engine, o)
    # transformers' defaults (20 tokens, a 0.4 confidence stop) are not speclab's: both written out
    return {"assistant_model": path, "num_assistant_tokens": o.k, "num_assistant_tokens_schedule": "constant",
            "assistant_confidence_threshold": o.confidence_threshold or 0.0}


# ================================================================ its bench sweeps
def k_rows(values) -> tuple[Setting, ...]:
    """The draft model's own row, then a fixed-K row per K of the sweep: "K=2"."""
    return (Setting(), *(Setting(f"K={k}", k=int(k)) for k in values))


def confidence_rows(values) -> tuple[Setting, ...]:
    """An adaptive-confidence row per stop: "0.2" when there are several."""
    return named(values, lambda t: f"{t:g}", lambda t, text: Setting(text, decode=dict(confidence_threshold=float(t))))


K_SWEEP = Sweep("k_sweep", Flag("--k-sweep", dict(
    type=int_list, metavar="K,K,...",
    help="also run the draft model at each of these fixed K, a row each (adaptive K is measured against the best "
         "of them)")), k_rows, default=())
# the adaptive-confidence rows' stop: 0.1 was the fastest in chapter 9's sweep (transformers' default, 0.4, stops
# this small draft too early)
CONFIDENCE_SWEEP = Sweep("confidence_thresholds", Flag("--confidence-threshold", dict(
    type=float, nargs="+", metavar="T",
    help="the adaptive-confidence row's stop (default 0.1, the fastest in chapter 9's sweep; transformers' default "
         "is 0.4); several give a row each, side by side")), confidence_rows, default=(0.1,))
