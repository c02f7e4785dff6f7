"""Medusa heads (Cai et al. 2024): extra next-next-token predictors on the target's last hidden state.

The target's own lm_head, applied to the hidden state h_t of the last token it processed, predicts
token t+1. Medusa head i (i = 1..M) applied to the same h_t predicts token t+1+i: a residual block
h + SiLU(W h + b) (W starts at zero, so the block starts as the identity) and a vocabulary projection
that starts as a copy of the target's lm_head. The backbone stays frozen (Medusa-1), so the heads
cost one small matrix product each per round and read nothing but a vector the target computed anyway.

Heads are saved with a fingerprint of the target they were trained on (its hidden size, vocabulary
and a checksum of its lm_head), so heads meant for another model are refused instead of drafting
nonsense.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

CONFIG_FILE, WEIGHTS_FILE = "medusa_config.json", "medusa_heads.safetensors"


class ResBlock(nn.Module):
    """h + SiLU(W h + b), W zero-initialised: the identity until training moves it."""

    def __init__(self, hidden: int):
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + nn.functional.silu(self.linear(h))


class MedusaHeads(nn.Module):
    """M heads; forward(h (..., H)) -> logits (M, ..., V): row i predicts the token i + 2 places after
    the one h belongs to (head 1 skips the token the target's own lm_head predicts)."""

    def __init__(self, hidden: int, vocab: int, num_heads: int = 4, num_layers: int = 1,
                 target_fingerprint: dict | None = None):
        super().__init__()
        self.config = dict(hidden=hidden, vocab=vocab, num_heads=num_heads, num_layers=num_layers,
                           target_fingerprint=target_fingerprint)
        self.heads = nn.ModuleList(
            nn.Sequential(*[ResBlock(hidden) for _ in range(num_layers)], nn.Linear(hidden, vocab, bias=False))
            for _ in range(num_heads))

    @classmethod
    def for_target(cls, target: nn.Module, num_heads: int = 4, num_layers: int = 1) -> MedusaHeads:
        """Fresh heads for `target`, each projection initialised from its lm_head."""
        lm_head = target.get_output_embeddings().weight
        heads = cls(lm_head.shape[1], lm_head.shape[0], num_heads, num_layers, fingerprint(target))
        for head in heads.heads:
            head[-1].weight.data.copy_(lm_head.detach().float())
        return heads.to(lm_head.device)

    @property
    def num_heads(self) -> int:
        return len(self.heads)

    @property
    def dtype(self) -> torch.dtype:
        return self.heads[0][-1].weight.dtype

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = h.to(self.dtype)  # the target's features may be float32 while the heads run in float16
        return torch.stack([head(h) for head in self.heads])

    def check_fits(self, target: nn.Module) -> None:
        """A ValueError, saying how to get fitting heads, unless these heads were trained for `target`."""
        mine, theirs = self.config["target_fingerprint"] or {}, fingerprint(target)
        how = ("train heads for it: python -m speclab train medusa --target DIR --out DIR "
               "(DIR: the target's save_pretrained folder)")
        for key in ("hidden", "vocab"):
            if mine.get(key) != theirs[key]:
                raise ValueError(f"these Medusa heads were trained for a target with {key} {mine.get(key)}, "
                                 f"this {type(target).__name__} has {theirs[key]}; {how}")
        if mine.get("lm_head_checksum") is not None and not _close(mine["lm_head_checksum"], theirs["lm_head_checksum"]):
            raise ValueError(f"these Medusa heads were trained for another target of the same shape (lm_head "
                             f"checksums differ: {mine['lm_head_checksum']} vs {theirs['lm_head_checksum']}); {how}")

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / CONFIG_FILE).write_text(json.dumps(self.config, indent=1))
        state = {k: v.detach().to(torch.float16).contiguous() for k, v in self.state_dict().items()}
        save_file(state, str(directory / WEIGHTS_FILE))

    @classmethod
    def load(cls, directory: str | Path, device: torch.device | str = "cpu",
             dtype: torch.dtype = torch.float32) -> MedusaHeads:
        directory = Path(directory)
        if not (directory / CONFIG_FILE).exists():
            raise FileNotFoundError(f"no Medusa heads in {directory} ({CONFIG_FILE} missing); train them with "
                                    "python -m speclab train medusa --target DIR --out DIR")
        config = json.loads((directory / CONFIG_FILE).read_text())
        heads = cls(**config)
        heads.load_state_dict(load_file(str(directory / WEIGHTS_FILE)))
        return heads.to(device=device, dtype=dtype).eval()


def fingerprint(target: nn.Module) -> dict:
    """What identifies the target heads were trained on: widths and a checksum of its lm_head."""
    weight = target.get_output_embeddings().weight.detach().float()
    return {"hidden": int(weight.shape[1]), "vocab": int(weight.shape[0]),
            "lm_head_checksum": [round(float(weight.sum()), 3), round(float(weight.norm()), 3)]}


def _close(a: list[float], b: list[float]) -> bool:
    """Checksums (sum, norm) of one lm_head in two precisions agree within 1% of its norm (bf16 rounding
    moves the sum by far less); another trained model's differ by much more."""
    (sum_a, norm_a), (sum_b, norm_b) = a, b
    scale = 1e-2 * max(norm_a, norm_b, 1e-6)
    return abs(norm_a - norm_b) <= scale and abs(sum_a - sum_b) <= scale
