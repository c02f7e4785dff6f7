"""Medusa heads (Cai et al. 2024): extra next-next-token predictors on the target's last hidden state.

The target's own lm_head, applied to the hidden state h_t of the last token it processed, predicts
token t+1. Medusa head i (i = 1..M) applied to the same h_t predicts token t+1+i: a residual block
h + SiLU(W h + b) (W and b start at zero, so the block starts as the identity; the reference zeroes W
only) and a vocabulary projection that starts as a copy of the target's lm_head. The backbone stays frozen (Medusa-1), so the heads
cost one small matrix product each per round and read nothing but a vector the target computed anyway.

Heads are saved with a fingerprint of the target they were trained on (speclab.artifacts),
so heads meant for another model are refused instead of drafting nonsense. MedusaDrafter drafts
with them: head i's top-k tokens fill depth i of a fixed tree.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from speclab.devices import draft_dtype
from speclab.drafting import Draft, Drafter
from speclab.artifacts import check_fits, fingerprint, load_weights, save_weights, zero_linear
from speclab.runner import model_device
from speclab.sampling import SamplingParams, check_finite
from speclab.trees import depths, is_chain, tree_from_choices
from speclab.methods.engines import Options, by_batch, no, tree_is

NAME = "medusa"  # the method's name in the registry (vLLM's)
CONFIG_FILE, WEIGHTS_FILE = "medusa_config.json", "medusa_heads.safetensors"


class ResBlock(nn.Module):
    """h + SiLU(W h + b), the identity until training moves it. speclab zeroes W and b; the reference's
    ResBlock (FasterDecoding/Medusa) zeroes W only, leaving b at nn.Linear's default, so its block
    starts as h + SiLU(b). The shipped heads were trained from speclab's start."""

    def __init__(self, hidden: int):
        super().__init__()
        self.linear = zero_linear(hidden)

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
        check_fits(self.config["target_fingerprint"], target, "these Medusa heads were",
                   "train heads for it: python -m speclab train medusa --target DIR --out DIR "
                   "(DIR: the target's save_pretrained folder)")

    def save(self, directory: str | Path) -> None:
        save_weights(directory, CONFIG_FILE, self.config, WEIGHTS_FILE, self.state_dict())

    @classmethod
    def load(cls, directory: str | Path, device: torch.device | str = "cpu",
             dtype: torch.dtype = torch.float32) -> MedusaHeads:
        config, state = load_weights(directory, CONFIG_FILE, WEIGHTS_FILE, f"no Medusa heads in {directory}; train "
                                     "them with python -m speclab train medusa --target DIR --out DIR")
        heads = cls(**config)
        heads.load_state_dict(state)
        return heads.to(device=device, dtype=dtype).eval()


class MedusaDrafter(Drafter):
    """Medusa (Cai et al. 2024): heads on the target's last hidden state propose the tokens after the
    pending one. Head i's top-k tokens fill depth i of a fixed tree (`tree`: "chain" for head top-1s,
    or medusa_choices, paths of top-k ranks). Siblings are deterministic top-k picks, so their q is a
    point mass and the rule stays lossless when sampling. The hidden state comes from the verification
    pass (take_features): the heads never run the target themselves."""

    name = NAME
    feature_layers = (-1,)

    def __init__(self, heads: torch.nn.Module, tree: str | list = "chain"):
        self.heads = heads
        self.set_tree(tree)
        self.hidden: torch.Tensor | None = None

    @property
    def device(self) -> torch.device:
        return next(self.heads.parameters()).device

    def set_tree(self, tree: str | list) -> None:
        if tree == "chain":
            self.choices = [(0,) * d for d in range(1, self.heads.num_heads + 1)]
        elif isinstance(tree, str):
            raise ValueError(f"tree must be 'chain' or a list of medusa_choices (tuples of top-k ranks); got {tree!r}")
        else:
            self.choices = [tuple(c) for c in tree]
        self.parents, self.ranks = tree_from_choices(self.choices)
        self.node_depths = depths(self.parents)
        if max(self.node_depths) > self.heads.num_heads:
            raise ValueError(f"the tree is {max(self.node_depths)} deep but there are only {self.heads.num_heads} "
                             "heads (one per depth); drop the deeper choices")
        self.is_chain = is_chain(self.parents)
        self.name = f"{NAME} chain" if self.is_chain else f"{NAME} tree"
        self.top = max(self.ranks) + 1
        self._depth_index = torch.tensor([d - 1 for d in self.node_depths], device=self.device)
        self._rank_index = torch.tensor(self.ranks, device=self.device)

    def start(self, prompt: torch.Tensor) -> None:
        self.hidden = None

    def take_features(self, features: torch.Tensor) -> None:
        self.hidden = features[-1]

    @torch.inference_mode()
    def propose(self, ids: torch.Tensor, k: int, sampling: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        if self.hidden is None:  # a one-token prompt: no hidden state yet, so no draft this round
            return Draft(ids.new_empty(0))
        logits = self.heads(self.hidden)  # (M, V)
        check_finite(logits, "Medusa heads")
        top = logits.topk(self.top, dim=-1).indices  # (M, top)
        tokens = top[self._depth_index, self._rank_index]
        return Draft(tokens, None, None if self.is_chain else self.parents)


def load_medusa(target: torch.nn.Module | None, heads: str | Path | MedusaHeads,
                tree: str | list | None = None) -> MedusaDrafter:
    """Medusa heads for `target` from `heads` (a directory written by train medusa, or loaded heads);
    refused with a clear error when they were trained for another model. tree: "chain", medusa_choices,
    or None: the tree chosen for the heads (their tree.json), else the chain."""
    device = model_device(target) if target is not None else torch.device("cpu")
    # Like a draft model, the heads only propose: their rounding can change what is accepted, never
    # what is emitted. On a CPU their four vocabulary projections are a quarter of the bundled
    # target's bytes, so half precision halves what every round reads (as devices.draft_dtype says).
    dtype = draft_dtype(device, target.dtype if target is not None else torch.float32)
    if isinstance(heads, MedusaHeads):
        loaded, directory = heads.to(device=device, dtype=dtype).eval(), None
    else:
        directory = Path(heads)
        loaded = MedusaHeads.load(directory, device, dtype)
    if target is not None:
        loaded.check_fits(target)
    if tree is None:
        record = directory / "tree.json" if directory is not None else None
        tree = ([tuple(c) for c in json.loads(record.read_text())["choices"]] if record is not None and record.exists()
                else "chain")
    return MedusaDrafter(loaded, tree)


# ---------------------------------------------------------------- engine settings
def engine_settings(engine: str, o: Options) -> dict:
    """Medusa's settings as `engine` takes them (speclab.serving.settings.engine_settings)."""
    path = o.path or "HEADS_DIR"
    if engine == "speclab":
        return {"method": NAME, "heads": path, "tree": o.tree if not isinstance(o.tree, str) else "chain",
                **by_batch(engine, o)}
    if engine == "tensorrt-llm":
        # MedusaDecodingConfig runs in the TensorRT engine backend only (supports_backend excludes "pytorch"),
        # from heads converted with TensorRT-LLM's own Medusa checkpoint converter; it takes a tree
        if tree_is(o, "dynamic"):
            raise no(engine, "Medusa's tree is static (medusa_choices): no dynamic tree")
        choices = [[0] * depth for depth in range(1, o.k + 1)] if tree_is(o, "chain") else [list(p) for p in o.tree]
        return {"decoding_type": "Medusa", "max_draft_len": len(choices), "num_medusa_heads": max(map(len, choices)),
                "medusa_choices": choices, "speculative_model": path, **by_batch(engine, o)}
    if engine != "vllm":
        raise no(engine, {"transformers": "generate() has no Medusa drafter"}.get(engine, "no Medusa heads"))
    if not tree_is(o, "chain"):
        raise no(engine, "Medusa proposes each head's top-1 token only: a chain, no tree")
    return {"method": NAME, "model": path, "num_speculative_tokens": o.k, **by_batch(engine, o)}
