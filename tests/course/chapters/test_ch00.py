"""Chapter 0's helpers: the hub pairs table, a model's shape, statistics wrapped to the column."""
import torch
import transformers

import speclab
from speclab.course.chapters.ch00 import describe, hub_pairs_table, side_by_side, wrapped


def test_hub_pairs_table_shows_every_pair_with_the_exercise_columns():
    html = hub_pairs_table().data
    for name, hub in speclab.HUB_PAIRS.items():
        assert name in html and hub.target.split('/')[-1] in html and f"{hub.weights_gb:.1f}" in html
    assert "weights GB" in html and "fits T4" in html


def test_wrapped_keeps_every_word_and_fits_the_width():
    text = "short line\n  K=4: " + " ".join(f"word{i}" for i in range(40))
    out = wrapped(text, width=50)
    assert all(len(line) <= 50 for line in out.splitlines())
    assert out.split() == text.split()
    assert out.splitlines()[2].startswith("    ")   # continuation indented under its line


def test_describe_counts_tied_embeddings_once():
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    info = describe(model)
    unique = {p.data_ptr(): p.numel() for p in model.parameters()}
    assert info["parameters"] == sum(unique.values())
    assert info["layers"] == 2 and info["tied embeddings"] is True
    assert "parameters" in side_by_side(model, model)
