"""EAGLE heads for a frozen Llama-family target (speclab.methods.eagle): their losses, the unrolled
training-time test, short in-memory runs for the chapters, and the resumable trainer, which also
trains MTP modules (speclab.train.mtp).

    python -m speclab train eagle --target DIR --out runs/eagle    # EAGLE-1: feature regression
    python -m speclab train eagle3 --target DIR --out runs/eagle   # EAGLE-3: fused layers, training-time test
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import PreTrainedModel

from speclab.methods import REGISTRY
from speclab.methods.eagle import NAME, NAME3, VERSIONS, Eagle3Head, EagleHead, FeatureHead, draft_vocabulary, eagle3_layers
from speclab.train.chat_data import summary as chat_summary
from speclab.train.data import check_resumed_rows, choose_preset, hardware, target_features
from speclab.train.frozen import frozen_start
from speclab.train.loop import loss_function, precision_name, save_whole, step_precision, train_loop


# The registered methods by head version: their names, folders beside the bundled target, train commands.
METHODS = {1: REGISTRY[NAME], 3: REGISTRY[NAME3]}


@dataclass
class EaglePreset:
    corpus_rows: int = 1024   # the corpus windows of Medusa's rows (out/features.pt is shared when all rows agree)
    # The target's own continuations, half greedy, half sampled: the text the head drafts in at decode time.
    # 1024 of them and 12000 steps, against 128 and 6000, lifted the EAGLE-1 head from 5.33 to 6.65 tokens a pass
    # (a 10-deep chain, held-out code prompts; not measured apart: chapter 8.3). The shipped EAGLE-3 head and MTP
    # module were trained on the same rows (their records).
    generated: int = 1024
    heldout_rows: int = 64
    seq_len: int = 256
    prompt_len: int = 64
    batch: int = 8
    steps: int = 12000       # EAGLE-1 (the features computed once beforehand)
    eagle3_steps: int = 4000  # EAGLE-3: each step unrolls ttt_steps head passes
    mtp_steps: int = 3000     # MTP: one head pass a step, trained one step deep
    lr: float = 1e-3
    warmup: int = 50
    noise: float = 0.1        # U(-noise, noise) on the input features (Li et al. 2024); EAGLE-1 only
    ce_weight: float = 0.1    # EAGLE-1 only: EAGLE-3 has the cross-entropy alone
    clip: float = 0.5         # gradient norm clip, as in the reference recipe
    eval_every: int = 100
    ttt_steps: int = 4        # EAGLE-3: steps the head is unrolled on its own outputs in training
    decay: float = 0.8        # EAGLE-3: weight of unrolled step j is decay ** j
    eval_depth: int = 6       # steps of the held-out unrolled accuracy (acceptance by draft position)
    # Chat rows: train only where the target's next token is an answer's (the reference's loss mask over the
    # assistant's turns); False trains on every position, the requests and passages included.
    answers_only: bool = False
    # The training steps' forward under bfloat16 autocast (speclab.train.loop.step_precision; None: where the
    # device has bf16 units). SmolLM2's EAGLE-3 head, 300 steps on 700 conversations, same rows and batches, on a
    # 2-core AMD EPYC with AVX512-BF16: 1.15 s a step against 2.85 in float32, held-out loss 9.979 against 9.992
    # and answers' top-1 by position 0.420 0.369 0.332 0.299 against 0.420 0.365 0.333 0.301. Held-out
    # evaluation stays float32.
    bf16: bool | None = False
    # The soft cross-entropy compiled (speclab.train.loop.loss_function): SmolLM2's EAGLE-3 head step (batch 8 x
    # 256, 4 unrolled, 8k draft vocabulary, bf16 autocast, the target frozen) took 0.78 s against 1.28 eager and
    # 1.67 for the loss written -sum(teacher * log_softmax) (medians of 12 steps in one run, 2-core Intel Xeon
    # family 6 model 167).
    compile_loss: bool = False
    # EAGLE-3's draft vocabulary: the lm_head's tokens, the most frequent of the training rows (None: all of
    # the target's). The reference keeps 32k of Llama 3's 128k.
    draft_vocab: int | None = None
    # EAGLE-2's settings, chosen by timing after training (choose_eagle_tree): how many prompts of the tuning
    # set (held-out code prompts speclab bench never times, at most 8; chat requests for a chat corpus), new
    # tokens each, and timed repeats.
    # More prompts make the choice steadier: a setting picked on few can gain far less on the bench's.
    tree_prompts: int = 8
    tree_tokens: int = 128
    tree_repeats: int = 3
    tree_candidates: str = "deep"  # speclab.train.tuning.CANDIDATES: "short" for a head rarely accepted
    # Where the rows come from (speclab.train.data.cached_features): "stdlib", the library and the target's
    # continuations of it (the fields above); "chat", `conversations` chat conversations the target answers
    # (speclab.train.chat_data), for a chat target such as SmolLM2.
    corpus: str = "stdlib"
    conversations: int = 0
    requests: str = "library"  # chat rows' first messages (speclab.train.chat_data.first_messages)


EAGLE_PRESETS = {
    "stdlib": EaglePreset(),
    # SmolLM2-135M-Instruct: chat rows, and a draft vocabulary (8,192 of its 49,152 tokens; the reference
    # keeps a quarter of Llama 3's), because a full lm_head would be most of the head's cost here.
    "micro-chat": EaglePreset(corpus="chat", conversations=8, heldout_rows=2, seq_len=16, batch=2, steps=4,
                              eagle3_steps=4, mtp_steps=4, warmup=1, eval_every=2, ttt_steps=2, eval_depth=2,
                              draft_vocab=16, tree_prompts=1, tree_tokens=4, tree_repeats=1, tree_candidates="short"),
    # EAGLE-2's settings are timed on chat requests (the corpus is chat), short candidates, 64 new tokens
    # once: a SmolLM2 step is ~5x the bundled target's, and the deep candidates never pay at its acceptance.
    "smollm2": EaglePreset(corpus="chat", conversations=640, heldout_rows=32, batch=8, eagle3_steps=3000,
                           draft_vocab=8192, eval_every=250, tree_tokens=64, tree_repeats=1,
                           tree_candidates="short", compile_loss=True),
    # the rows of the shared draft's preset of the same name (one features file serves both); its training
    # log (time, held-out accuracy) is the record.json a trained head keeps beside its weights
    "smollm2-everyday": EaglePreset(corpus="chat", conversations=1400, requests="everyday", heldout_rows=32,
                                    batch=8, eagle3_steps=1500, draft_vocab=8192, eval_every=250, tree_tokens=64,
                                    tree_repeats=1, tree_candidates="short", bf16=None, compile_loss=True),
    "micro": EaglePreset(corpus_rows=16, generated=4, heldout_rows=4, seq_len=32, prompt_len=8, batch=4, steps=6,
                         eagle3_steps=6, mtp_steps=6, warmup=2, eval_every=3, ttt_steps=2, eval_depth=3,
                         tree_prompts=1, tree_tokens=8, tree_repeats=1),
}

EAGLE_INPUTS = ("feature+token", "feature", "token")


# ---------------------------------------------------------------- the losses
def eagle_predict(head: torch.nn.Module, embed: torch.nn.Module, tokens: torch.Tensor, h: torch.Tensor,
                  noise: float = 0.0, generator: torch.Generator | None = None) -> torch.Tensor:
    """The head's outputs (B, T-1, H) for rows `tokens` (B, T) with the target's features h (B, T, H),
    teacher-forced: from pair (f_t, x_{t+1}) it predicts f_{t+1}. `noise`: U(-noise, noise) added to
    the input features."""
    inputs = h[:, :-1].float()
    if noise:
        inputs = inputs + (torch.rand(inputs.shape, generator=generator, device=inputs.device) * 2 - 1) * noise
    return head(embed(tokens[:, 1:].to(h.device)), inputs)


def unroll_visible(n: int, step: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Which rows the rows of unrolled step `step` see (n, n * (step + 1)) bool, over the head's cache,
    which holds the step-0 rows of anchors 0..n-1 and then each later step's n rows: the row of anchor
    t sees the step-0 rows of anchors <= t (the true prefix) and its own rows of steps 1..step (its
    chain of drafts), exactly what it sees when drafting step `step` after true pair t."""
    return torch.cat([torch.ones(n, n, dtype=torch.bool).tril()] + [torch.eye(n, dtype=torch.bool)] * step,
                     dim=1).to(device)


def unroll_mask(n: int, step: int, dtype: torch.dtype, device: torch.device | str = "cpu") -> torch.Tensor:
    """unroll_visible as the additive mask (1, 1, n, n * (step + 1)) a transformers model takes: 0 where
    a row sees, the dtype's minimum where it does not."""
    visible = unroll_visible(n, step)
    mask = torch.zeros(visible.shape, dtype=dtype).masked_fill_(~visible, torch.finfo(dtype).min)
    return mask[None, None].to(device)


def unroll(head: FeatureHead, embed: torch.nn.Module, tokens: torch.Tensor, first: torch.Tensor,
           steps: int) -> list[torch.Tensor]:
    """The head drafting `steps` steps on its own outputs from every true pair at once: the
    training-time test of EAGLE-3 (Li et al. 2025), and the measure of how a head does at depth.
    tokens (B, T); first (B, T-1, H): the first step's input feature of pair t (head.fuse of what the
    target hands over). Returns [h_0, ..., h_{steps-1}], h_j (B, n, H) with n = T - steps: h_j[:, t]
    is the head's output after j steps from true pair t, fed the true tokens x_{t+1..t+1+j} and its
    own outputs; the head's logits of it are its draft of x_{t+j+2}."""
    batch, length = tokens.shape
    n = length - steps
    if n < 1:
        raise ValueError(f"rows of {length} tokens are too short to unroll {steps} steps")
    cache, g, outputs = head.new_cache(), first[:, :n], []
    for j in range(steps):
        positions = (torch.arange(n, device=first.device) + j).expand(batch, n)
        g = head(embed(tokens[:, 1 + j:1 + j + n].to(first.device)), g, cache, positions=positions,
                 visible=unroll_visible(n, j, first.device))
        outputs.append(g)
    return outputs


def soft_cross_entropy(logits: torch.Tensor, teacher_logits: torch.Tensor, mask: torch.Tensor | None = None
                       ) -> torch.Tensor:
    """Cross-entropy of softmax(logits) against the target's own distribution softmax(teacher_logits),
    averaged over the positions `mask` keeps (all by default). -sum(teacher * log_softmax(logits)) is
    written logsumexp(logits) - sum(teacher * logits), equal because the teacher sums to 1: no
    log-probabilities are kept for the backward, which is softmax(logits) - teacher."""
    teacher = torch.softmax(teacher_logits.detach().float(), -1)
    logits = logits.float()
    ce = torch.logsumexp(logits, -1) - torch.linalg.vecdot(teacher, logits)
    return ce.mean() if mask is None else (ce * mask).sum() / mask.sum().clamp(min=1)


def draft_space(head: FeatureHead, lm_head: torch.nn.Module, h: torch.Tensor, teacher_logits: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The head's logits and the teacher's over the vocabulary the head drafts from, and the positions
    to train on. A draft vocabulary (EAGLE-3's d2t) gets the teacher's logits of its tokens, and, as
    in the reference (cnets.py), only the positions whose target token is in it."""
    logits, ids = head.vocab_logits(h, lm_head)
    if ids is None:
        return logits, teacher_logits, None
    kept = head.t2d[teacher_logits.argmax(-1)].float()
    return logits, teacher_logits[..., ids], kept


def eagle3_loss(head: FeatureHead, embed: torch.nn.Module, lm_head: torch.nn.Module, tokens: torch.Tensor,
                layer_h: torch.Tensor, final_h: torch.Tensor, steps: int = 4, decay: float = 0.8,
                next_tokens: torch.Tensor | None = None, answers: torch.Tensor | None = None,
                ce: Callable = soft_cross_entropy) -> tuple[torch.Tensor, list[float]]:
    """EAGLE-3's loss (Li et al. 2025): the head unrolled `steps` steps on its own outputs (`unroll`,
    the training-time test), step j's cross-entropy against the target's distribution of the token
    it drafts weighted decay ** j; no feature loss. layer_h (B, T, 3H): the fused layers' hidden
    states; final_h (B, T, H): the target's last features, whose lm_head rows are the teacher;
    next_tokens (B, T), the target's greedy tokens (cached_features), if known: with a draft vocabulary
    the teacher is then computed over its rows alone (the same loss, cheaper). answers (B, T) bool, if
    given: train only where the target's next token is an answer's (chat_data.answer_next), as the
    reference's loss mask does. `ce`: soft_cross_entropy, or a compiled fusion of it (loop.loss_function).
    Returns the loss and each step's cross-entropy."""
    outputs = unroll(head, embed, tokens, head.fuse(layer_h[:, :-1].float()), steps)
    n = tokens.shape[1] - steps
    total, per_step = 0.0, []
    reduced = (next_tokens is not None and getattr(head, "d2t", None) is not None  # (an MTP module has none)
               and len(head.d2t) < len(head.t2d) and getattr(lm_head, "bias", None) is None)
    with torch.no_grad():
        if reduced:  # only the draft vocabulary's rows: 8k of SmolLM2's 49k, the step's largest product
            teacher = torch.nn.functional.linear(final_h.float(), lm_head.weight[head.draft_ids])
            kept = head.t2d[next_tokens.long()].float()
        else:
            teacher = lm_head(final_h.float())
    for j, h in enumerate(outputs):
        window = slice(1 + j, 1 + j + n)
        if reduced:
            logits, taught, mask = head.vocab_logits(h, lm_head)[0], teacher[:, window], kept[:, window]
        else:
            logits, taught, mask = draft_space(head, lm_head, h, teacher[:, window])
        if answers is not None:
            mask = answers[:, window].float() if mask is None else mask * answers[:, window]
        step_ce = ce(logits, taught, mask)
        total = total + decay ** j * step_ce
        per_step.append(step_ce.item())
    return total, per_step


@torch.no_grad()
def unrolled_accuracy(head: FeatureHead, embed: torch.nn.Module, lm_head: torch.nn.Module, tokens: torch.Tensor,
                      inputs: torch.Tensor, final_h: torch.Tensor, steps: int,
                      positions: torch.Tensor | None = None) -> list[float]:
    """acc[j]: how often the head, j steps into drafting on its own outputs (fed the true tokens),
    names the target's own greedy token: the chance draft j + 1 is accepted given the earlier ones
    were, under greedy decoding. inputs: what the target hands over (final_h for EAGLE-1, the fused
    layers' hidden states for EAGLE-3). positions (B, T) bool, if given: count only the drafts of the
    tokens after them (chat_data.answer_next: an answer's tokens, the ones drafted at decode time)."""
    return unrolled_accuracies(head, embed, lm_head, tokens, inputs, final_h, steps, [positions])[0]


@torch.no_grad()
def unrolled_accuracies(head: FeatureHead, embed: torch.nn.Module, lm_head: torch.nn.Module, tokens: torch.Tensor,
                        inputs: torch.Tensor, final_h: torch.Tensor, steps: int,
                        selections: list[torch.Tensor | None]) -> list[list[float]]:
    """unrolled_accuracy over each of several `positions` (None: all), from one unrolled pass."""
    outputs = unroll(head, embed, tokens, head.fuse(inputs[:, :-1].float()), steps)
    n = tokens.shape[1] - steps
    truth = lm_head(final_h.float()).argmax(-1)
    right = [head.logits(h, lm_head).argmax(-1) == truth[:, 1 + j:1 + j + n] for j, h in enumerate(outputs)]
    return [[round(float(r.float().mean() if kept is None else r[kept[:, 1 + j:1 + j + n]].float().mean()), 4)
             for j, r in enumerate(right)] for kept in selections]


@torch.no_grad()
def unrolled_confidence(head: torch.nn.Module, embed: torch.nn.Module, lm_head: torch.nn.Module,
                        tokens: torch.Tensor, inputs: torch.Tensor, final_h: torch.Tensor, steps: int,
                        temperature: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """What EAGLE-2's calibration claim is about, at every held-out position and draft step j (the
    head drafting on its own outputs, fed the true tokens: `unroll`): the head's probability of its
    top token (its confidence) and whether the target accepts that token given the earlier steps
    were accepted. Greedy (temperature 0) acceptance is 1 or 0, the token being the target's argmax
    or not; at a temperature it is the chance the rejection rule accepts the point mass, the target's
    probability of the token there. Returns (confidence, acceptance), each (steps, B, n). Under greedy
    decoding the cumulative products over steps stand for a path's score e^score and whether the whole
    path is accepted; exactly so only where the rows are the target's own greedy text (an accepted path is
    then the one the head was fed), since the head is fed the rows' tokens, not its drafts."""
    outputs = unroll(head, embed, tokens, head.fuse(inputs[:, :-1].float()), steps)
    n = tokens.shape[1] - steps
    target_logits = lm_head(final_h.float())
    confidence, accepted = [], []
    for j, h in enumerate(outputs):
        top = torch.softmax(head.logits(h, lm_head).float(), -1).max(-1)
        teacher = target_logits[:, 1 + j:1 + j + n]
        if temperature == 0:
            accepted.append((teacher.argmax(-1) == top.indices).float())
        else:
            accepted.append(torch.softmax(teacher / temperature, -1).gather(-1, top.indices[..., None])[..., 0])
        confidence.append(top.values)
    return torch.stack(confidence), torch.stack(accepted)


def eagle_loss(head: torch.nn.Module, embed: torch.nn.Module, lm_head: torch.nn.Module, tokens: torch.Tensor,
               h: torch.Tensor, noise: float = 0.1, ce_weight: float = 0.1,
               generator: torch.Generator | None = None, inputs: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, float, float]:
    """EAGLE-1's loss (Li et al. 2024): smooth L1 from the predicted to the true next feature, plus
    ce_weight times the cross-entropy of lm_head(prediction) against the target's own distribution
    lm_head(f_{t+1}) (the token after x_{t+1}). The noise on the input features teaches the head to
    draft on from its own imperfect predictions. `inputs`: the features the head reads, when they
    differ from the features it must predict (h). Returns (loss, feature loss, cross-entropy)."""
    predicted = eagle_predict(head, embed, tokens, h if inputs is None else inputs, noise, generator)
    truth = h[:, 1:].float()
    feature_loss = torch.nn.functional.smooth_l1_loss(predicted, truth)
    ce = soft_cross_entropy(lm_head(predicted), lm_head(truth))
    return feature_loss + ce_weight * ce, feature_loss.item(), ce.item()


# ---------------------------------------------------------------- a short in-memory run (chapter 8)
class ZeroEmbedding(torch.nn.Module):
    """An embedding that hides the token: zeros of the embedding's width (the "feature" ablation)."""

    def __init__(self, embed: torch.nn.Module):
        super().__init__()
        self.embed = embed

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(self.embed(ids))


def quick_eagle(target: PreTrainedModel, rows: torch.Tensor, steps: int, inputs: str = "feature+token",
                heldout: torch.Tensor | None = None, batch: int = 4, lr: float = 1e-3, seed: int = 0,
                eval_every: int = 0) -> tuple[torch.nn.Module, list[list[float]], list[tuple[int, float]]]:
    """A short, in-memory EAGLE-1 training on token `rows` (n, T), for watching a head learn (chapter
    8); `train eagle` makes the real head. `inputs` is the EAGLE paper's ablation of what the head
    reads: "feature+token" (EAGLE: the feature and the token that follows it), "feature" (the
    features alone: the head must guess which token was sampled) or "token" (the tokens alone: a
    one-layer draft model on the target's embeddings). Returns the head, [feature loss, ce] at every
    step, and (step, held-out top-1) every eval_every steps when `heldout` rows are given."""
    if inputs not in EAGLE_INPUTS:
        raise ValueError(f"inputs must be one of {EAGLE_INPUTS}, got {inputs!r}")
    device = next(target.parameters()).device
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    features = target_features(target, rows, device)
    held_h = target_features(target, heldout, device).float() if heldout is not None else None
    torch.manual_seed(seed)
    head = EagleHead.for_target(target)
    opt = torch.optim.AdamW(head.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    token_embed = embed if inputs != "feature" else ZeroEmbedding(embed)
    g = torch.Generator().manual_seed(seed)
    losses, accuracy = [], []

    def held_out_top1() -> float:
        seen = held_h if inputs != "token" else torch.zeros_like(held_h)
        predicted = eagle_predict(head, token_embed, heldout.long().to(device), seen)
        truth = lm_head(held_h[:, 1:]).argmax(-1)
        return float((lm_head(predicted).argmax(-1) == truth).float().mean())

    with torch.enable_grad():
        for step in range(steps):
            if heldout is not None and eval_every and step % eval_every == 0:
                with torch.no_grad():
                    accuracy.append((step, held_out_top1()))
            pick = torch.randint(0, len(features), (batch,), generator=g)
            h = features[pick].to(device, torch.float32)
            seen = h if inputs != "token" else torch.zeros_like(h)
            loss, feature_loss, ce = eagle_loss(head, token_embed, lm_head, rows[pick].long().to(device), h,
                                                noise=0.0, inputs=seen)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append([feature_loss, ce])
    if heldout is not None and eval_every:
        with torch.no_grad():
            accuracy.append((steps, held_out_top1()))
    return head.eval(), losses, accuracy


# ---------------------------------------------------------------- the trainer
def eagle3_features(target: PreTrainedModel, out: Path, features: dict, layers: Sequence[int], dev: torch.device
                    ) -> dict:
    """The fused layers' hidden states over the same rows as `features` (cached_features), computed
    once into out/features_layers.pt: {"train", "heldout": (n, T, len(layers) * H) float16, "layers"}."""
    path = out / "features_layers.pt"
    cached = torch.load(path, mmap=True) if path.exists() else None  # mapped, as cached_features' file
    if cached is not None and cached["layers"] == list(layers) and len(cached["train"]) == len(features["train_rows"]):
        return cached
    started = time.perf_counter()
    cached = {"train": target_features(target, features["train_rows"], dev, layers=layers),
              "heldout": target_features(target, features["heldout_rows"], dev, layers=layers),
              "layers": list(layers)}
    cached["seconds"] = time.perf_counter() - started
    save_whole(cached, path)
    return cached


def train_eagle(target_dir: str | Path, out: Path, preset: str = "stdlib", device: str | None = None, seed: int = 0,
                stop_after_minutes: float | None = None, version: int = 1, inputs: str = "feature+token",
                stop_after_steps: int | None = None, **overrides) -> dict:
    """An EAGLE head for a frozen Llama-family target, trained on the target's features over
    standard-library windows and its own continuations (cached_features: shared with Medusa when the
    rows agree).
    version 1 (train eagle): EAGLE-1's feature regression plus 0.1 x cross-entropy, noisy inputs.
    version 3 (train eagle3): EAGLE-3's fused low/middle/high layers and the training-time test
    (eagle3_loss). Resumable (stop_after_minutes or stop_after_steps end this run early,
    checkpointed). Writes out/eagle/ or out/eagle3/ (head, config and record.json: loss curves,
    held-out accuracy, and accuracy by draft position). `inputs` (EAGLE-1 only): the EAGLE paper's
    ablation of what the head reads (see quick_eagle); "feature" or "token" train a head that is only
    measured, written to out/eagle-feature/ or out/eagle-token/. MTP modules: speclab.train.mtp."""
    if version not in VERSIONS:
        raise ValueError(f"version must be 1 or 3 (EAGLE; MTP modules: speclab.train.mtp.train_mtp), got {version!r}")
    if inputs not in EAGLE_INPUTS or (version != 1 and inputs != "feature+token"):
        raise ValueError(f"inputs must be one of {EAGLE_INPUTS} (EAGLE-1 only), got {inputs!r}")
    m = choose_preset(EAGLE_PRESETS, preset, overrides)
    if version == 3 and overrides.get("steps") is None:
        m.steps = m.eagle3_steps
    folder = METHODS[version].bundled
    if inputs != "feature+token":
        m.eval_depth = 1  # a head that never read its own outputs is measured one step deep
        folder = f"{folder}-{inputs}"
    return train_feature_head(target_dir, out, m, preset, folder, version,
                              lambda target, rows: new_head(target, version, rows, m.draft_vocab), inputs=inputs,
                              device=device,
                              seed=seed, stop_after_minutes=stop_after_minutes, stop_after_steps=stop_after_steps)


def new_head(target: PreTrainedModel, version: int, rows: torch.Tensor, draft_vocab: int | None = None
             ) -> FeatureHead:
    """A fresh head for `target`: EAGLE-1's, or EAGLE-3's with a draft vocabulary of the `draft_vocab`
    tokens most frequent in the training `rows` (None: the whole vocabulary)."""
    if version == 1:
        return EagleHead.for_target(target)
    head = Eagle3Head.for_target(target, draft_vocab_size=draft_vocab)
    if draft_vocab is not None:
        head.set_vocabulary(*draft_vocabulary(rows, draft_vocab, target.config.vocab_size),
                            target.get_output_embeddings())
    return head


def train_feature_head(target_dir: str | Path, out: Path, m: EaglePreset, preset: str, name: str, version,
                       make_head: Callable[[PreTrainedModel, torch.Tensor], FeatureHead],
                       inputs: str = "feature+token",
                       device: str | None = None, seed: int = 0, stop_after_minutes: float | None = None,
                       stop_after_steps: int | None = None) -> dict:
    """Train the head make_head(target, training rows) on the frozen target's cached features and write out/<name>/ (head,
    config, record.json), resuming from out/<name>.ckpt. version 1: EAGLE-1's loss (eagle_loss); 3:
    EAGLE-3's, on the fused layers (eagle3_loss); any other (MTP's, speclab.train.mtp): EAGLE-3's
    loss, m.ttt_steps deep, on the last features. The record keeps `version` as given."""
    start = frozen_start(target_dir, out, preset, m, device, seed, stop_after_minutes)
    dev, deadline, target, features = start.device, start.deadline, start.target, start.features
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    train_h, train_rows, train_next = features["train"], features["train_rows"].long(), features.get("train_next")
    held_h, held_rows = features["heldout"].to(dev, torch.float32), features["heldout_rows"].long().to(dev)
    feature_seconds = features["seconds"]
    if version == 3:  # the inputs are the fused layers; the last features stay the teacher
        layered = eagle3_features(target, out, features, eagle3_layers(target.config.num_hidden_layers), dev)
        train_in, held_in = layered["train"], layered["heldout"].to(dev, torch.float32)
        feature_seconds += layered["seconds"]
    else:
        train_in, held_in = train_h, held_h

    if inputs == "feature":  # the ablation: the head does not see the token that follows the feature
        embed = ZeroEmbedding(embed)
    torch.manual_seed(seed)
    head = make_head(target, train_rows)
    opt = torch.optim.AdamW(head.parameters(), lr=m.lr, betas=(0.9, 0.95), weight_decay=0.0)
    ckpt_file = out / f"{name}.ckpt"

    def seen(features: torch.Tensor) -> torch.Tensor:  # the ablation without features reads zeros
        return torch.zeros_like(features) if inputs == "token" else features

    # chat rows: where the target's next token is an answer's (the loss's positions with m.answers_only)
    train_answers, held_answers = features.get("train_answers"), features.get("heldout_answers")
    if m.answers_only and (train_answers is None or version == 1):
        raise ValueError("answers_only needs chat rows (corpus 'chat') and a head trained with EAGLE-3's loss "
                         "(eagle3, mtp): EAGLE-1's and library rows have no answers to restrict it to")
    held_answers = None if held_answers is None else held_answers.to(dev)

    def loss_of(rows, layer_in, final, g=None, nxt=None, answers=None) -> tuple[torch.Tensor, list[float]]:
        # answers: the positions to train on (m.answers_only), else None: every position
        if version == 1:
            loss, feature_loss, ce = eagle_loss(head, embed, lm_head, rows, final, m.noise if g else 0.0,
                                                m.ce_weight, g, inputs=seen(final))
            return loss, [round(feature_loss, 4), round(ce, 4)]
        loss, per_step = eagle3_loss(head, embed, lm_head, rows, layer_in, final, m.ttt_steps, m.decay, nxt, answers,
                                     soft_ce)
        return loss, [round(x, 4) for x in per_step]

    precision = step_precision(m.bf16, dev)  # checked before the first step
    soft_ce = loss_function(soft_cross_entropy, m.compile_loss, dev)

    def step_fn(step: int):
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        pick = torch.randint(0, len(train_h), (m.batch,), generator=g)
        with precision:
            return loss_of(train_rows[pick].to(dev), train_in[pick].to(dev, torch.float32),
                           train_h[pick].to(dev, torch.float32), g,
                           None if train_next is None else train_next[pick].to(dev),
                           train_answers[pick].to(dev) if m.answers_only else None)

    def evaluate(step: int, _):
        head.eval()
        with torch.no_grad():
            loss, parts = loss_of(held_rows, held_in, held_h, answers=held_answers if m.answers_only else None)
        by_position, on_answers = unrolled_accuracies(head, embed, lm_head, held_rows, seen(held_in), held_h,
                                                      m.eval_depth, [None, held_answers])
        head.train()
        entry = {"step": step, "heldout_loss": round(float(loss), 4), "heldout_top1": by_position[0],
                 "heldout_top1_by_step": by_position}
        if held_answers is not None:  # the drafts an answer needs: what decoding a reply will meet
            entry["heldout_answer_top1_by_step"] = on_answers
        if version == 1:
            entry.update(heldout_feature_loss=parts[0], heldout_ce=parts[1])
        else:
            entry.update(heldout_ce_by_step=parts)
        return entry, f"held-out loss {entry['heldout_loss']:.4f}, top-1 by draft position {by_position}"

    log = train_loop(name, head, opt, m.steps, step_fn, ckpt_file=ckpt_file, key="head",
                     log={"evals": [], "seconds": 0.0, "feature_seconds": feature_seconds, "rows": features["rows"]},
                     schedule=m, device=dev, evaluate=evaluate, eval_every=m.eval_every, evaluate_first=True,
                     clip=m.clip, deadline=deadline, stop_after_steps=stop_after_steps,
                     check_resume=lambda saved: check_resumed_rows(saved, features, ckpt_file))
    head.eval()
    report = {"version": version, "method": name, "inputs": inputs, "preset": asdict(m), "target_from": str(target_dir),
              "device": str(dev), "hardware": hardware(dev), "torch": torch.__version__, "seed": seed,
              "step_precision": precision_name(precision), "training_rows": features["rows"],
              "rows_spec": features.get("spec"), "chat": chat_summary(out),
              "feature_layers": list(head.feature_layers),
              "parameters": sum(p.numel() for p in head.parameters()), "log": log}
    if isinstance(head, Eagle3Head):  # how often the target's own next token is one the head can draft
        with torch.no_grad():
            report["draft_vocab"] = {"size": len(head.d2t), "heldout_coverage": round(float(
                head.t2d[lm_head(held_h).argmax(-1)].float().mean()), 4)}
    head.save(out / name)
    (out / name / "record.json").write_text(json.dumps(report, indent=1))
    return report
