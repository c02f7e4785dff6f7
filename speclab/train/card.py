"""The bundled pair's model card (`python -m speclab card`): how each model and each trained drafter was
made (from its training record) and how well it drafts, measured now on this machine. One section per
registered method with weights for the bundled target: its registry entry's `card` names the writer here
(card_sections)."""
from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import torch

from speclab.corpus import HELDOUT_EVERY, stdlib_root
from speclab.decoding import generate, speculative_generate
from speclab.measure.acceptance import (
    acceptance_table,
    format_acceptance_table,
    heldout_windows,
    teacher_forced_overlap,
)
from speclab.measure.bench import model_check
from speclab.measure.profiling import decode_ms_per_token
from speclab.measure.workloads import load_prompts
from speclab.methods import REGISTRY, Method, draft_model_method, load_drafter
from speclab.methods.eagle import describe_tree, measured_settings
from speclab.models import load_model, load_pair, load_tokenizer
from speclab.stats import GenerationStats
from speclab.train.eagle import EAGLE_PRESETS


def model_card(pair_dir, num_prompts: int = 4, max_new_tokens: int = 128) -> str:
    """The bundled pair's model card, measured now on this machine (see `python -m speclab card`).

    training.json says how each model was trained: by `train pair` (target and drafts in one run), or
    a target from `train pair` and drafts from a later `train draft` (install_pair keeps both records).
    """
    pair_dir = Path(pair_dir)
    training = json.loads((pair_dir / "training.json").read_text())
    target, draft, tok, device = load_pair(str(pair_dir / "target"), draft=pair_dir / "draft")
    plain = load_pair(str(pair_dir / "target"), draft=pair_dir / "draft-plain").draft
    models = {"target": target, "draft": draft, "draft-plain": plain}
    n_params = {name: sum(p.numel() for p in m.parameters()) for name, m in models.items()}
    windows = heldout_windows(tok).to(device)
    overlap = {name: teacher_forced_overlap(target, models[name], windows, 1.0) for name in ("draft", "draft-plain")}
    ms = {name: decode_ms_per_token(models[name]) for name in ("target", "draft")}
    prompts = [tok(p, return_tensors="pt").input_ids[0].to(device) for p in load_prompts("code", num_prompts)]
    rows = acceptance_table(target, draft, prompts, max_new_tokens=max_new_tokens)
    plain_rows = acceptance_table(target, plain, prompts, ks=[4], temperatures=[0.0], max_new_tokens=max_new_tokens)
    base = GenerationStats.combine([generate(target, p, max_new_tokens=max_new_tokens).stats for p in prompts])
    in_loop = model_check(base, next(r.stats for r in rows if r.k == 4 and r.temperature == 0))
    target_preset = training.get("target_preset", training["preset"])
    p = training["preset"]

    def last(stage):
        return training[stage]["evals"][-1]

    def shape(name):
        cfg = models[name].config
        return f"{cfg.num_hidden_layers} | {cfg.hidden_size}"

    generated = training.get("generated")
    distilled_on = "corpus windows" + (f" and {generated['sequences']:,} continuations written by the target "
                                       f"({int(100 * generated['share_of_distillation_rows'])}% of the rows)"
                                       if generated else "")
    draft_cmd = (f"`python -m speclab train draft --target {Path(training['target_from']).as_posix()} --out runs/draft`"
                 if "target_from" in training else "`python -m speclab train pair --out runs/stdlib` (the same run)")
    lines = [
        "# The bundled pair: a target and a draft trained on the Python standard library", "",
        "Trained and measured by speclab itself; regenerate this card with `python -m speclab card`.", "",
        "## Corpus and split",
        f"- The `.py` files of the standard library of Python {platform.python_version()} ({stdlib_root()}), "
        f"site-packages excluded; one file in {HELDOUT_EVERY} held out, chosen by a hash of its path.",
        f"- {training['train_tokens']:,} training tokens, {training['heldout_tokens']:,} held-out tokens "
        f"(byte-level BPE, {target_preset['vocab_size']} pieces, trained on the training split).", "",
        "## Models (Llama architecture, Hugging Face format, float16 safetensors)",
        "| model | layers | hidden | parameters | training | held-out loss |", "|---|---|---|---|---|---|",
        f"| target | {shape('target')} | {n_params['target'] / 1e6:.2f}M | {last('target')['step']} steps of "
        f"{target_preset['batch']}x{target_preset['seq_len']} tokens, cross-entropy | {last('target')['heldout_loss']:.3f} |",
        f"| draft | {shape('draft')} | {n_params['draft'] / 1e6:.2f}M | initialised from the target's embedding, first "
        f"{draft.config.num_hidden_layers} layer(s) and head; {last('draft')['step']} steps of {p['batch']}x{p['seq_len']} "
        f"tokens of distillation (KL to the target) on {distilled_on} | {last('draft')['heldout_loss']:.3f} |",
        f"| draft-plain | {shape('draft-plain')} | {n_params['draft-plain'] / 1e6:.2f}M | random init, "
        f"{last('draft_plain')['step']} steps of cross-entropy on the data | {last('draft_plain')['heldout_loss']:.3f} |", "",
        f"Target: trained on {training.get('target_device', training['device'])} "
        f"({training.get('target_hardware') or training.get('hardware', 'see training.json')}) in "
        f"{training['target']['seconds'] / 60:.1f} min by `python -m speclab train pair --out runs/stdlib`"
        + (f" ({training['target_history']})" if training.get("target_history") else "") + ".",
        f"Drafts: trained on {training['device']} ({training.get('hardware', 'see training.json')}), torch "
        f"{training['torch']}, bf16 autocast {training['bf16_autocast']}, in {training['draft']['seconds'] / 60:.1f} min "
        f"(draft) and {training['draft_plain']['seconds'] / 60:.1f} min (draft-plain) by {draft_cmd}. "
        "Training is seeded and resumable.", "",
        "## Agreement with the target (teacher-forced, 8 held-out windows of 256 tokens)",
        "| draft | greedy agreement | expected acceptance at T=1 (sum min(p, q)) |", "|---|---|---|",
    ]
    for name in ("draft", "draft-plain"):
        lines.append(f"| {name} | {overlap[name]['greedy_agreement']:.3f} | {overlap[name]['expected_acceptance']:.3f} |")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines += ["", f"## Acceptance in speculative decoding ({num_prompts} held-out code prompts, {max_new_tokens} new tokens each)",
              "acceptance rate = accepted / drafted; alpha = per-token acceptance (accepted / tested).", "",
              format_acceptance_table(rows), "",
              f"draft-plain at temperature 0, K=4: acceptance rate {plain_rows[0].acceptance_rate:.3f}, "
              f"alpha {plain_rows[0].alpha:.3f}, {plain_rows[0].tokens_per_round:.2f} tokens/round.", "",
              f"## Cost here ({platform.machine()}, {torch.get_num_threads()} threads, {device}, target in "
              f"{str(target.dtype).removeprefix('torch.')}, drafts in {str(draft.dtype).removeprefix('torch.')}; "
              f"1-minute load average {load:.1f} when measured: other work on the machine inflates these times)",
              f"- Alone: target {ms['target']:.2f} ms per decode step, draft {ms['draft']:.2f} ms: cost ratio "
              f"c = {ms['draft'] / ms['target']:.3f}.",
              f"- In the loop (greedy, K=4, in target-only tokens of {in_loop.unit_ms:.2f} ms): a draft step costs "
              f"c = {in_loop.c:.3f}, a verify pass {in_loop.verify_cost:.2f}; speedup {in_loop.measured:.2f}x "
              f"(the model with these costs: {in_loop.modelled:.2f}x). A draft step costs more in the loop than alone "
              "because each target pass evicts the draft's weights from the CPU's caches (chapter 4).", ""]
    return "\n".join(lines)


def measure_drafting(pair_dir, runs: dict, num_prompts: int, max_new_tokens: int
                     ) -> tuple[torch.nn.Module, dict[str, GenerationStats], str]:
    """What the model card's sections measure now: the bundled target (pair_dir/target, float32 on the
    CPU) decoding held-out code prompts greedily with each drafter of `runs` ({name: (make, k)}, make
    builds the drafter from the target). Returns the target, {name: combined stats}, and "equal to"
    or "DIFFERENT FROM", as every output did or did not equal target-only decoding's."""

    target = load_model(Path(pair_dir) / "target", "cpu", torch.float32)
    tok = load_tokenizer(Path(pair_dir) / "target", plain_fast=True)
    room = target.config.max_position_embeddings - max_new_tokens  # a small model's context may be short
    prompts = [tok(p, return_tensors="pt").input_ids[0][-room:] for p in load_prompts("code", num_prompts)]
    reference = [generate(target, p, max_new_tokens=max_new_tokens).tokens.tolist() for p in prompts]
    stats, exact = {}, True
    for name, (make, k) in runs.items():
        drafter = make(target)
        results = [speculative_generate(target, drafter, p, k=k, max_new_tokens=max_new_tokens) for p in prompts]
        exact = exact and [r.tokens.tolist() for r in results] == reference
        stats[name] = GenerationStats.combine([r.stats for r in results])
    return target, stats, "equal to" if exact else "DIFFERENT FROM"


def drafting_table(runs: dict[str, GenerationStats]) -> list[str]:
    """The model card's table of measure_drafting's runs."""
    return ["| drafting | tokens per target pass | drafts per round | accepted per round |", "|---|---|---|---|"] + [
        f"| {name} | {st.mean_tokens_per_round:.2f} | {st.drafted / st.rounds:.1f} | {st.accepted / st.rounds:.2f} |"
        for name, st in runs.items()]


def position_table(first: dict, last: dict) -> list[str]:
    """The model card's table of held-out top-1 agreement by draft position, before and after training
    (two evaluations of a train_eagle record)."""
    positions = len(last["heldout_top1_by_step"])
    return ["| draft position | " + " | ".join(str(j + 1) for j in range(positions)) + " |",
            "|---|" + "---|" * positions,
            "| at start | " + " | ".join(f"{a:.3f}" for a in first["heldout_top1_by_step"]) + " |",
            "| after training | " + " | ".join(f"{a:.3f}" for a in last["heldout_top1_by_step"]) + " |"]


MEDUSA_HEADING = "## Medusa heads"


def rows_trained_on(record: dict) -> str:
    """'2,048 rows (1,024 corpus windows and 1,024 continuations written by the target)', from a head's record."""
    m = record["preset"]
    return (f"{record['training_rows']:,} rows ({m['corpus_rows']:,} corpus windows and {m['generated']:,} "
            "continuations written by the target)")


def medusa_card(pair_dir, num_prompts: int = 4, max_new_tokens: int = 128, method: Method | None = None) -> str:
    """The model card's section on the Medusa heads shipped with the bundled target: how they were
    trained (from their record), held-out accuracy by head and rank, the tree chosen for them, and
    tokens per target pass measured now (greedy, held-out prompts) for the top-1 chain and that tree."""
    pair_dir, method = Path(pair_dir), method or section_method(medusa_card)
    heads_dir = pair_dir / method.bundled
    record = json.loads((heads_dir / "record.json").read_text())
    tree = json.loads((heads_dir / "tree.json").read_text())
    m, log = record["preset"], record["log"]
    first, last = log["evals"][0], log["evals"][-1]
    _, runs, same = measure_drafting(pair_dir, {
        name: (lambda t, choice=choice: load_drafter(method.name, t, heads=heads_dir, tree=choice), m["num_heads"])
        for name, choice in (("top-1 chain", "chain"), (f"chosen tree ({tree['budget']} nodes)", None))},
        num_prompts, max_new_tokens)
    lines = [
        MEDUSA_HEADING, "",
        f"{m['num_heads']} heads on the frozen target's last hidden state, each {m['num_layers']} residual block(s) "
        f"(SiLU) and a vocabulary projection initialised from the target's lm_head: "
        f"{record['parameters'] / 1e6:.2f}M parameters, float16 in `medusa/`. Trained by "
        f"`python -m speclab train medusa --target speclab/pairs/stdlib/target --out runs/medusa --install`: "
        f"self-distillation (head i learns the target's own distribution for the token i + 2 places ahead), "
        f"loss weight {m['decay']}^i, {m['steps']} steps of {m['batch']} rows x {m['seq_len']} positions from "
        f"{rows_trained_on(record)}, whose hidden states were computed once ({log['feature_seconds'] / 60:.1f} min); "
        f"training {log['seconds'] / 60:.1f} min on {record['hardware']}.", "",
        "| head (predicts token t + 1 + i) | held-out loss at start | held-out loss | top-1 accuracy at start | "
        "top-1 accuracy | top-5 accuracy |", "|---|---|---|---|---|---|"]
    for i in range(m["num_heads"]):
        lines.append(f"| {i + 1} | {first['heldout_head_loss'][i]:.3f} | {last['heldout_head_loss'][i]:.3f} | "
                     f"{first['heldout_top1'][i]:.3f} | {last['heldout_top1'][i]:.3f} | "
                     f"{sum(record['accuracy'][i][:5]):.3f} |")
    lines += ["", "Accuracy is agreement with the target's own greedy choice at that place, on held-out windows; "
              "at the start every head is a copy of the lm_head and predicts the wrong token (the next one).", "",
              f"Tree chosen by `train medusa` on {tree['hardware']}: for each node budget, "
              "the tree with the most expected accepted tokens under the measured accuracies, priced by a timed "
              "verify pass (in one-token decode steps):", "",
              "| nodes | depth | tokens per pass (modelled) | verify pass cost | modelled speedup |", "|---|---|---|---|---|"]
    for row in tree["table"]:
        mark = " (chosen)" if row["budget"] == tree["budget"] else ""
        lines.append(f"| {row['budget']}{mark} | {row['depth']} | {row['tokens_per_pass']:.2f} | {row['pass_cost']:.2f} | "
                     f"{row['modelled_speedup']:.2f} |")
    lines += ["", f"Measured now (greedy, {num_prompts} held-out code prompts x {max_new_tokens} new tokens; outputs "
              f"{same} target-only decoding's):", ""] + drafting_table(runs)
    return "\n".join(lines)


def train_command(method: Method, record: dict, default_steps: int) -> str:
    """The `python -m speclab train` command that reproduces a shipped head from its record: the flags
    it was trained with where they differ from today's preset (an older head keeps its recipe), whose
    steps for this head are `default_steps`."""
    preset, m = EAGLE_PRESETS["stdlib"], record["preset"]
    command = method.train
    flags = (f" --generated {m['generated']}" if m["generated"] != preset.generated else "") + \
        (f" --steps {m['steps']}" if m["steps"] != default_steps else "")
    return f"`python -m speclab train {command} --target speclab/pairs/stdlib/target --out DIR{flags} --install`"


EAGLE_HEADING = "## EAGLE head"


def tree_depth(head_dir: Path) -> int:
    """The depth of the EAGLE-2 tree measured fastest for a head (its tree.json), which the card's
    dynamic-tree row decodes with (k caps the depth): 8 for a head without one."""
    return measured_settings(head_dir).get("depth", 8)


def tree_label(head_dir: Path) -> str:
    """The card's name for the dynamic-tree row's settings: the head's tree.json, or EagleDrafter's defaults."""
    settings = measured_settings(head_dir)
    return describe_tree(settings) if settings else "EagleDrafter's defaults"


def measure_head(pair_dir, method: Method, chain: str, tree: str, num_prompts: int, max_new_tokens: int
                 ) -> tuple[dict, torch.nn.Module, dict[str, GenerationStats], str]:
    """A bundled head's record and measure_drafting's runs of it: a chain at K = 4 (named `chain`) and EAGLE-2's
    dynamic tree at the head's measured settings (named `tree` and those settings)."""
    head_dir = Path(pair_dir) / method.bundled
    record = json.loads((head_dir / "record.json").read_text())
    target, runs, same = measure_drafting(pair_dir, {
        name: (lambda t, shape=shape: load_drafter(method.name, t, head=head_dir, tree=shape), k)
        for name, shape, k in ((f"{chain}, K = 4", "chain", 4),
                               (f"{tree} ({tree_label(head_dir)})", "dynamic", tree_depth(head_dir)))},
        num_prompts, max_new_tokens)
    return record, target, runs, same


def eagle_card(pair_dir, num_prompts: int = 4, max_new_tokens: int = 128, method: Method | None = None) -> str:
    """The model card's section on the EAGLE head shipped with the bundled target: how it was trained
    (from its record), held-out losses and accuracy, and tokens per target pass measured now (greedy,
    held-out prompts) for EAGLE-1's chain and EAGLE-2's dynamic tree."""
    method = method or section_method(eagle_card)
    record, _, runs, same = measure_head(pair_dir, method, "EAGLE-1 chain", "EAGLE-2 dynamic tree",
                                         num_prompts, max_new_tokens)
    m, log = record["preset"], record["log"]
    first, last = log["evals"][0], log["evals"][-1]
    lines = [
        EAGLE_HEADING, "",
        f"An EAGLE-1 head (Li et al. 2024) in the reference's layout (SafeAILab/EAGLE eagle/model/cnets1.py): "
        f"fc(2H -> H, with a bias) over [embedding of the next token; the target's feature], one decoder layer of "
        f"the target's architecture without its input norm (initialised from its last layer), the target's "
        f"frozen embeddings and lm_head: {record['parameters'] / 1e6:.2f}M parameters, float16 in `eagle/`. "
        f"Trained by "
        f"{train_command(method, record, EAGLE_PRESETS['stdlib'].steps)}: smooth L1 to the "
        f"next feature + {m['ce_weight']} x cross-entropy against the target's own distribution, U(-{m['noise']}, "
        f"{m['noise']}) noise on the input features, {m['steps']} steps of {m['batch']} rows x {m['seq_len']} "
        f"positions from {rows_trained_on(record)}, features computed once; training "
        f"{log['seconds'] / 60:.1f} min on {record['hardware']}.", "",
        "| held out | at start | after training |", "|---|---|---|",
        f"| feature loss (smooth L1) | {first['heldout_feature_loss']:.4f} | {last['heldout_feature_loss']:.4f} |",
        f"| cross-entropy vs the target | {first['heldout_ce']:.3f} | {last['heldout_ce']:.3f} |",
        f"| top-1 agreement with the target (true features) | {first['heldout_top1']:.3f} | "
        f"{last['heldout_top1']:.3f} |", "",
        f"Measured now (greedy, {num_prompts} held-out code prompts x {max_new_tokens} new tokens; outputs {same} "
        "target-only decoding's):", ""] + drafting_table(runs)
    return "\n".join(lines)


EAGLE3_HEADING = "## EAGLE-3 head"


def eagle3_card(pair_dir, num_prompts: int = 4, max_new_tokens: int = 128, method: Method | None = None) -> str:
    """The model card's section on the EAGLE-3 head shipped with the bundled target: how it was trained
    (from its record), held-out accuracy by draft position before and after training, and tokens per
    target pass measured now (greedy, held-out prompts) with EAGLE-2's dynamic tree and a chain."""
    method = method or section_method(eagle3_card)
    record, target, runs, same = measure_head(pair_dir, method, "EAGLE-3 chain",
                                              "EAGLE-3 head, EAGLE-2 dynamic tree", num_prompts, max_new_tokens)
    m, log = record["preset"], record["log"]
    first, last = log["evals"][0], log["evals"][-1]
    lines = [
        EAGLE3_HEADING, "",
        f"An EAGLE-3 head (Li et al. 2025): the target's hidden states at layers {record['feature_layers']} "
        f"(inputs of layers 2, L/2 and L-3) fused by fc (3H -> H), in the reference's layout (SafeAILab/EAGLE "
        f"eagle/model/cnets.py, the names vLLM and SGLang load): one Llama decoder layer whose q, k and v read "
        f"[input_layernorm(embedding of the next token); hidden_norm(feature)] (2H) with the feature as its "
        f"residual, a final norm and the head's own lm_head over a draft vocabulary mapped to the target's by "
        f"d2t; from the second draft step on, the layer's own output replaces the fused feature. "
        f"{record['parameters'] / 1e6:.2f}M parameters, float16 in `eagle3/`. Trained by "
        f"{train_command(method, record, EAGLE_PRESETS['stdlib'].eagle3_steps)} with the training-time "
        f"test: the head unrolled {m['ttt_steps']} steps on its own outputs, step j's cross-entropy against the "
        f"target's distribution weighted {m['decay']}^j, no feature loss; {m['steps']} steps of {m['batch']} rows "
        f"x {m['seq_len']} positions from {rows_trained_on(record)}; training "
        f"{log['seconds'] / 60:.1f} min on {record['hardware']}. {vocabulary_note(record, target)}", "",
        "Held-out top-1 agreement with the target by draft position (the head drafting on its own outputs, fed "
        "the true tokens):", "",
        *position_table(first, last), "",
        f"Measured now (greedy, {num_prompts} held-out code prompts x {max_new_tokens} new tokens; outputs {same} "
        "target-only decoding's):", ""] + drafting_table(runs)
    return "\n".join(lines)


def vocabulary_note(record: dict, target) -> str:
    """What the EAGLE-3 head's lm_head scores: the whole vocabulary, or a reduced draft vocabulary and how
    often the target's own next token is in it (the record's held-out coverage)."""
    vocab = record.get("draft_vocab") or {}
    size = vocab.get("size", target.config.vocab_size)
    if size == target.config.vocab_size:
        return f"The draft vocabulary is the whole vocabulary ({size} tokens; d2t all zero)."
    return (f"A draft vocabulary of the {size} most frequent training tokens of {target.config.vocab_size} "
            f"(d2t maps them back), holding the target's own next token at {vocab['heldout_coverage']:.1%} of "
            "held-out positions.")


MTP_HEADING = "## MTP module"


def mtp_card(pair_dir, num_prompts: int = 4, max_new_tokens: int = 128, method: Method | None = None) -> str:
    """The model card's section on the MTP module shipped with the bundled target: how it was trained
    (from its record), held-out accuracy by draft position when chained, and tokens per target pass
    measured now (greedy, held-out prompts) drafting one token a round and chained to four."""
    pair_dir, method = Path(pair_dir), method or section_method(mtp_card)
    module_dir = pair_dir / method.bundled
    record = json.loads((module_dir / "record.json").read_text())
    m, log = record["preset"], record["log"]
    first, last = log["evals"][0], log["evals"][-1]
    _, runs, same = measure_drafting(pair_dir, {
        name: (lambda t, n=n: load_drafter(method.name, t, module=module_dir, num_tokens=n), n)
        for name, n in (("MTP, one token a round", 1), ("MTP chained, K = 4", 4))}, num_prompts, max_new_tokens)
    lines = [
        MTP_HEADING, "",
        "A multi-token prediction module in the style of DeepSeek-V3 (DeepSeek-AI 2024): RMSNorm of the target's "
        "last feature and of the next token's embedding, concatenated and projected 2H -> H (no bias), one decoder "
        "layer of the target's architecture (initialised from its last layer), a norm, and the target's frozen "
        f"lm_head: {record['parameters'] / 1e6:.2f}M parameters, float16 in `mtp/`. Trained after the fact on the "
        f"frozen target (DeepSeek-V3 trains it with the model) by "
        f"{train_command(method, record, EAGLE_PRESETS['stdlib'].mtp_steps)}: one step deep, "
        "cross-entropy against the target's own "
        f"distribution of the token two ahead; {m['steps']} steps of {m['batch']} rows x {m['seq_len']} positions "
        f"from {rows_trained_on(record)}; training {log['seconds'] / 60:.1f} min on "
        f"{record['hardware']}.", "",
        "Held-out top-1 agreement with the target by draft position (position 1 is what it was trained for; later "
        "positions chain it on its own outputs):", "",
        *position_table(first, last), "",
        f"Measured now (greedy, {num_prompts} held-out code prompts x {max_new_tokens} new tokens; outputs {same} "
        "target-only decoding's):", ""] + drafting_table(runs)
    return "\n".join(lines)


EXIT_HEADING = "## Layer-skip exit adapters"


def exit_card(pair_dir, num_prompts: int = 4, max_new_tokens: int = 128, method: Method | None = None) -> str:
    """The model card's section on the exit adapters shipped with the bundled target: how they were
    trained, held-out top-1 agreement of each exit with the target without and with its adapter, and
    tokens per target pass measured now for the deepest exit with and without its adapter."""
    pair_dir, method = Path(pair_dir), method or section_method(exit_card)
    adapters = pair_dir / method.bundled
    record = json.loads((adapters / "record.json").read_text())
    m, layers = record["preset"], record["layers"]
    deepest = max(int(e) for e in layers)
    _, runs, same = measure_drafting(pair_dir, {
        f"exit after layer {deepest}" + (" + adapter" if adapter else ""):
            (lambda t, adapter=adapter: load_drafter(method.name, t, exit_layer=deepest,
                                                     adapter=adapters if adapter else False), 4)
        for adapter in (False, True)}, num_prompts, max_new_tokens)
    seconds = sum(entry["seconds"] for entry in layers.values())
    lines = [
        EXIT_HEADING, "",
        f"One exit adapter per exit layer ({', '.join(layers)} of {record['layers_of_target']}): h -> h + W h + b on "
        "the hidden state leaving that layer, zero at the start, before the target's final norm and lm_head (a "
        "tuned lens, Belrose et al. 2023); H x H + H parameters each, float16 in `exit/`. Trained by `python -m "
        "speclab train exit --target speclab/pairs/stdlib/target --out DIR --install`: soft cross-entropy against "
        f"the target's own distribution, {m['steps']} steps of {m['batch']} rows x {m['seq_len']} positions per "
        f"adapter, the target frozen; {seconds / 60:.1f} min for all on {record['hardware']}.", "",
        "| exit after layer | " + " | ".join(layers) + " |", "|---|" + "---|" * len(layers),
        "| top-1 agreement, no adapter | " + " | ".join(f"{e['top1_plain']:.3f}" for e in layers.values()) + " |",
        "| top-1 agreement, with adapter | " + " | ".join(f"{e['top1_adapter']:.3f}" for e in layers.values()) + " |",
        "",
        f"Measured now (greedy, {num_prompts} held-out code prompts x {max_new_tokens} new tokens, K = 4; outputs "
        f"{same} target-only decoding's):", ""] + drafting_table(runs)
    return "\n".join(lines)


PARD_HEADING = "## Parallel draft (PARD)"


def pard_card(pair_dir, num_prompts: int = 4, max_new_tokens: int = 128, method: Method | None = None) -> str:
    """The model card's section on the parallel draft shipped with the bundled target: how it was adapted
    from the draft (its record), held-out top-1 agreement by draft depth before and after, and tokens per
    target pass measured now at K = 4 beside the draft it was adapted from."""
    pair_dir, method = Path(pair_dir), method or section_method(pard_card)
    folder = pair_dir / method.bundled
    record = json.loads((folder / "record.json").read_text())
    m, log = record["preset"], record["log"]
    first, last = log["evals"][0], log["evals"][-1]
    _, runs, same = measure_drafting(pair_dir, {
        "draft model, K passes": (lambda t: load_drafter(draft_model_method().name, t, draft=pair_dir / "draft"), m["k"]),
        "parallel draft, one pass": (lambda t: load_drafter(method.name, t, model=folder), m["k"])},
        num_prompts, max_new_tokens)
    depths = len(last["heldout_top1_by_depth"])
    lines = [
        PARD_HEADING, "",
        "The distilled draft adapted into a parallel draft (PARD, An et al. 2025): one more token in its vocabulary, "
        f"the mask (id {record['mask_token_id']}, the config's `pard_token`, which vLLM reads), so that one pass over "
        f"the new tokens and K - 1 masks drafts K tokens; float16 in `{method.bundled}/`. Adapted by `python -m "
        f"speclab train {method.train} --target speclab/pairs/stdlib/target --out DIR --install`: soft cross-entropy "
        f"against the target's own distribution at every real position and, for {m['anchor_share']:.0%} of the "
        f"positions, at a block of {m['k'] - 1} masks after them (PARD's conditional drop); {m['steps']} steps of "
        f"{m['batch']} rows x {m['seq_len']} positions from {rows_trained_on(record)}; "
        f"{log['seconds'] / 60:.1f} min on {record['hardware']}.", "",
        "Held-out top-1 agreement with the target by draft depth (depth 1 is the last real token's prediction, "
        "depth j + 1 the j-th mask's, with the true tokens before it):", "",
        "| draft depth | " + " | ".join(str(j + 1) for j in range(depths)) + " |", "|---|" + "---|" * depths,
        "| at start (the draft, masks untrained) | " + " | ".join(f"{a:.3f}" for a in first["heldout_top1_by_depth"])
        + " |",
        "| after training | " + " | ".join(f"{a:.3f}" for a in last["heldout_top1_by_depth"]) + " |", "",
        f"Measured now (greedy, {num_prompts} held-out code prompts x {max_new_tokens} new tokens, K = {m['k']}; "
        f"outputs {same} target-only decoding's):", ""] + drafting_table(runs)
    return "\n".join(lines)


def replace_section(card: str, heading: str, section: str) -> str:
    """`card` with the section under `heading` (up to the next heading of the same level) replaced by
    `section`, or `section` appended when the card has none."""
    lines = card.rstrip("\n").split("\n")
    if heading not in lines:
        return "\n".join(lines) + "\n\n" + section + "\n"
    start = lines.index(heading)
    level = heading.split(" ")[0] + " "
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(level)), len(lines))
    return "\n".join(lines[:start] + section.split("\n") + [""] * (end < len(lines)) + lines[end:]) + "\n"


def section_method(writer) -> Method:
    """The registered method whose card section `writer` writes (its entry's CardSection)."""
    return next(m for m in REGISTRY.values() if m.card is not None and m.card.writes_with(writer))

