"""Chapter 0's plumbing: the hub pairs as a table, a model's shape, statistics wrapped to the column."""
from __future__ import annotations

import textwrap

import torch

import speclab
from speclab.course.notebook import html_table


def hub_pairs_table():
    """`speclab.HUB_PAIRS` as an HTML table: names (the hub ids without their organisation), parameters, 16-bit
    weights and whether they fit a T4."""
    header = ["name", "target", "draft", "params (B)", "weights GB", "fits T4"]
    rows = [[name, hub.target.split("/")[-1], hub.draft.split("/")[-1],
             f"{hub.target_params_b:.2f}+{hub.draft_params_b:.2f}",
             f"{hub.weights_gb:.1f}", "yes" if hub.fits_t4 else "no"]
            for name, hub in speclab.HUB_PAIRS.items()]
    return html_table(rows, header, align="lllrrl")


def describe(model: torch.nn.Module) -> dict:
    """A model's shape from its config, and its parameter count (tied embeddings counted once)."""
    cfg = model.config
    unique = {p.data_ptr(): p.numel() for p in model.parameters()}
    return {
        "architecture": cfg.architectures[0] if cfg.architectures else type(model).__name__,
        "layers": cfg.num_hidden_layers,
        "hidden size": cfg.hidden_size,
        "attention heads": cfg.num_attention_heads,
        "key/value heads": cfg.num_key_value_heads,
        "MLP size": cfg.intermediate_size,
        "vocabulary": cfg.vocab_size,
        "context (positions)": cfg.max_position_embeddings,
        "tied embeddings": bool(getattr(cfg, "tie_word_embeddings", False)),
        "parameters": sum(unique.values()),
    }


def side_by_side(target: torch.nn.Module, draft: torch.nn.Module) -> str:
    """The two models' `describe` rows next to each other, as text."""
    a, b = describe(target), describe(draft)
    lines = [f"{'':>20}  {'target':>16} {'draft':>16}"]
    lines += [f"{key:>20}: {str(a[key]):>16} {str(b[key]):>16}" for key in a]
    return "\n".join(lines)


def wrapped(text: str, width: int = 100) -> str:
    """Text (e.g. a run's statistics) with each line wrapped to `width`, continuation lines indented."""
    out = []
    for line in str(text).splitlines():
        indent = " " * (len(line) - len(line.lstrip()))
        out += textwrap.wrap(line, width, subsequent_indent=indent + "  ") or [""]
    return "\n".join(out)


def shared_embedding(real) -> dict:
    """Of a pair whose draft reads the target's embedding matrix: whether it is the very tensor, the
    matrix's size and share of the target, and the weights the draft adds (everything but embeddings)."""
    emb_t = real.target.get_input_embeddings().weight
    emb_d = real.draft.get_input_embeddings().weight
    own = sum(p.numel() for n, p in real.draft.named_parameters() if "embed" not in n)
    return {"same_tensor": emb_d.data_ptr() == emb_t.data_ptr(), "draft_dtype": emb_d.dtype,
            "embedding": emb_t.numel(), "share": emb_t.numel() / describe(real.target)["parameters"],
            "own": own, "scored_tokens": len(real.draft.lm_head.draft_ids)}
