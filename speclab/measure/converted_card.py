"""The model card of a converted pair (SmolLM2-135M-Instruct): where the target comes from, what speclab
trained for it and on what (from the training records in the pair's folder), and acceptance and speed by
task (from one bench record: `bench --pair smollm2 --workload chat --json FILE`). It reads records and
measures nothing, so it is cheap to rewrite and says which machine each number came from.

    python -m speclab card --pair smollm2 --bench book/records/smollm2_bench.json
"""
from __future__ import annotations

import json
from pathlib import Path

from speclab import packaged
from speclab.methods import REGISTRY, current_row, draft_model_method
from speclab.methods.eagle import NAME3, describe_tree
from speclab.models import CONVERTED_PAIRS

EAGLE3 = REGISTRY[NAME3]  # the head a converted pair ships: its folder, train command and bench rows
# its bench rows with the measured tree and as a chain
TREE_ROW, CHAIN_ROW = (next(row for row, options in EAGLE3.bench_rows.items() if options == wanted)
                       for wanted in ({}, {"tree": "chain"}))
DRAFT_ROW = draft_model_method().row()  # the distilled draft's row; a K sweep's rows are "<it> K=n"
ROWS = {DRAFT_ROW: "distilled draft", TREE_ROW: "EAGLE-3 head", CHAIN_ROW: "EAGLE-3 head, a chain",
        draft_model_method().row("adaptive-confidence"): "distilled draft, confidence stop",
        "speclab ngram": "prompt lookup", "hf assisted": "transformers' assisted generation (the draft)",
        "hf prompt-lookup": "transformers' prompt lookup"}


def read(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def training_section(name: str, record: dict, what: str) -> list[str]:
    log, chat = record["log"], record.get("chat") or {}
    first, last = log["evals"][0], log["evals"][-1]
    top1 = "heldout_top1_by_step" if "heldout_top1_by_step" in last else "heldout_top1"
    vocab = record.get("draft_vocab") or {}
    return [f"### {name}", "", what, "",
            f"- Trained on {record['training_rows']} rows of {record['preset']['seq_len']} tokens packed from "
            f"{chat.get('conversations', '?')} conversations ({chat.get('tokens', 0):,} tokens; answering them took "
            f"the target {chat.get('answer_seconds', 0) / 60:.0f} min); {last['step']} steps of "
            f"{record['preset']['batch']} rows, {log['seconds'] / 60:.0f} min on {record['hardware']}.",
            f"- Draft vocabulary: {vocab.get('size')} tokens, holding the target's own next token at "
            f"{vocab.get('heldout_coverage', 0):.1%} of held-out positions.",
            f"- Held-out top-1 agreement with the target: {first[top1]} at the start, {last[top1]} at the end "
            "(held out: the last twentieth of the conversations, answered at T = 1).",
            *([f"- The conversations: {chat['instructions']}."] if chat.get("instructions") else []), ""]


def preset_name(record: dict, name: str) -> str:
    """The training preset a record's rows came from: the pair's own, or its everyday-requests one."""
    return f"{name}-everyday" if record["preset"].get("requests", "library") == "everyday" else name


FAST = " (fast)"  # bench --fast's suffix for a row on the fast path (chapter 10)


def row_label(method: str) -> str:
    """A bench row's name in the card (a record's older label read as the row's label now)."""
    method = current_row(method)
    plain = method.removesuffix(FAST)
    label = ROWS.get(plain, plain.removeprefix("speclab "))
    if plain.startswith(f"{DRAFT_ROW} K="):  # a row of a K sweep
        label = f"distilled draft, K = {plain.rsplit('=', 1)[1]}"
    return label + (", fast path" if method.endswith(FAST) else "")


def tree_sentence(tree: dict | None, temperature: float) -> str:
    """Which EAGLE-2 settings the EAGLE-3 row drafted at `temperature`: those timed for the head (its
    tree.json, greedy or sampled), else the default tree."""
    timed = (tree or {}) if temperature == 0 else (tree or {}).get("sampled")
    if not timed:
        return "The EAGLE-3 row drafts the default EAGLE-2 tree (the head has no tree.json timed for it)."
    return (f"The EAGLE-3 row drafts the EAGLE-2 settings timed for the head ({describe_tree(timed)}; tree.json, "
            f"timed on {timed['prompts']} on {timed['hardware']}).")


def category_table(bench: dict, tree: dict | None = None) -> list[str]:
    """The speedup of each row over target-only on its own path (and α where it drafts), one column per
    chat category; on a record with --fast rows, target-only's fast path is shown against its eager one.
    `tree`: the EAGLE-3 head's tree.json, which says what its row drafted."""
    workloads = bench["workloads"] if "workloads" in bench else [bench]
    # an older record's labels read as the rows' labels now
    workloads = [{**w, "rows": [{**r, "method": current_row(r["method"])} for r in w["rows"]]} for w in workloads]
    names = [w["workload"].removeprefix("chat-") for w in workloads]
    methods = [r["method"] for r in workloads[0]["rows"] if r["method"] != "speclab target-only"]
    lines = ["| method | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for method in methods:
        cells = []
        for w in workloads:
            on_fast = method.endswith(FAST) and method != "speclab target-only" + FAST
            base = next(r for r in w["rows"] if r["method"] == "speclab target-only" + (FAST if on_fast else ""))
            row = next((r for r in w["rows"] if r["method"] == method), None)
            if row is None:
                cells.append("-")
                continue
            stats = row.get("stats") or {}  # none for transformers' rows
            cells.append(f"{row['tokens_per_s'] / base['tokens_per_s']:.2f}x"
                         + (f", α {stats['alpha']:.2f}" if stats.get("drafted") else ""))
        label = "target-only, fast path over eager" if method == "speclab target-only" + FAST else row_label(method)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    first = workloads[0]
    prompts = len(next(r for r in first["rows"] if r["method"] == "speclab target-only")["prompt_seconds"])
    repeats = first.get("repeats", 1)
    plain = {m.removesuffix(FAST) for m in methods}
    trees = f" {tree_sentence(tree, first['temperature'])}" if TREE_ROW in plain else ""
    chains = " The EAGLE-3 chain drafts K tokens in a row." if CHAIN_ROW in plain else ""
    return lines + ["", f"Speed over target-only on the same path and α, the per-token acceptance, on {prompts} "
                        f"prompts a category x {first['max_new_tokens']} new tokens, K = {first['k']}, temperature "
                        f"{first['temperature']:g}, the median of {repeats} repeat{'s' if repeats != 1 else ''}, on "
                        f"{first['cpu']} ({first['threads']} threads), torch {first['torch']}.{trees}{chains}"]


def lossless_section(record: dict, path: Path) -> list[str]:
    """Each drafter's chi-square check of sampling's first two tokens, beside the broken rule's."""
    lines = [f"## Sampling is lossless ({path.name})", "",
             f"`python -m speclab evaluate --pair ... --lossless N` on {record['workload']}, recorded on "
             f"{record['cpu']}: the first two tokens of N speculative decodes at T = 1 against the target's exact "
             "distribution (the most likely first tokens, each with every second token, and one cell for any "
             "other), and N more with the rule that resamples from p instead of the residual, which must fail.",
             "", "| drafter | prompt | samples | p-value | broken rule's p-value |", "| --- | --- | --- | --- | --- |"]
    for check in record["checks"]:
        lines.append(f"| {check['method']} | {check['prompt']} | {check['samples']} | {check['p_value']:.3f} | "
                     f"{check['broken_p_value']:.1e} |")
    return lines + [""]


def converted_card(name: str, benches: list[Path], lossless: Path | None = None) -> str:
    pair = CONVERTED_PAIRS[name]
    model = packaged.packaged(pair.packaged)
    lines = [f"# The {name} pair: {pair.about}", "",
             "Rewritten from the training, bench and lossless records with `python -m speclab card --pair "
             f"{name} --bench RECORD ... --lossless RECORD`; it measures nothing itself.", "",
             "## The target", "",
             f"From the package registry: `{model.requirement}` (sha256 pinned in speclab/packaged.py), licence "
             f"{model.licence}; its GGUF file converted once by transformers into a plain float16 folder in the "
             "cache (speclab/pairs/smollm2/README.md, 'The pair in use'). Nothing of the target ships in this "
             "repository.", "",
             "## What speclab trained for it", ""]
    draft = read(pair.folder / "draft" / "record.json")
    if draft:
        lines += training_section("Distilled draft (`draft/`)", draft,
                                  f"{draft['preset']['layers']} decoder layers of the target's width, started from "
                                  "its first layers, reading the target's embedding matrix (not shipped twice) and "
                                  "scoring a draft vocabulary (speclab/shared_draft.py); "
                                  f"{draft['own_parameters'] / 1e6:.1f}M parameters of its own, float16. Distilled "
                                  "on the target's distributions (soft cross-entropy over the draft vocabulary) "
                                  f"by `python -m speclab train shared-draft --target {name} --preset "
                                  f"{preset_name(draft, name)}`.")
    head = read(pair.folder / EAGLE3.bundled / "record.json")
    if head:
        lines += training_section(f"EAGLE-3 head (`{EAGLE3.bundled}/`)", head,
                                  f"The reference layout (SafeAILab/EAGLE cnets.py) on layers "
                                  f"{head['feature_layers']}; {head['parameters'] / 1e6:.1f}M parameters; the "
                                  f"training-time test {head['preset']['ttt_steps']} steps deep; by `python -m "
                                  f"speclab train {EAGLE3.train} --target {name} --preset {preset_name(head, name)}`.")
    tree = read(pair.folder / EAGLE3.bundled / "tree.json")
    for path in benches:
        bench = read(path)
        if bench:
            lines += [f"## By task ({path.name})", "", *category_table(bench, tree), ""]
    checks = read(lossless) if lossless else None
    if checks:
        lines += lossless_section(checks, lossless)
    return "\n".join(lines).rstrip() + "\n"
