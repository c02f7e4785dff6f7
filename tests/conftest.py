"""Tiny randomly initialised models, built offline from transformers configs."""
from __future__ import annotations

import pytest
import torch
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

ARCHS = {
    "llama": (LlamaConfig, LlamaForCausalLM),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM),
    "mistral": (MistralConfig, MistralForCausalLM),
}


def tiny_model(arch: str = "llama", layers: int = 2, vocab: int = 96, seed: int = 0, hidden: int = 32,
               context: int = 256, init: float = 0.5) -> torch.nn.Module:
    """A small model whose logits are spread out (init 0.5): random models with the default 0.02
    have near-tied logits, where an argmax can flip between a one-row and a K-row forward pass."""
    config_cls, model_cls = ARCHS[arch]
    torch.manual_seed(seed)
    config = config_cls(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                        max_position_embeddings=context, initializer_range=init, tie_word_embeddings=False,
                        pad_token_id=0, eos_token_id=1, bos_token_id=None)
    return model_cls(config).eval()


@pytest.fixture(scope="session")
def pair():
    """A Llama target and a smaller Llama draft that share a vocabulary of 96 ids."""
    return tiny_model("llama", layers=2, seed=0), tiny_model("llama", layers=1, seed=1)


@pytest.fixture()
def prompt():
    return torch.tensor([5, 17, 42, 8, 23, 61, 7, 30])
