"""Multi-token prediction (DeepSeek-AI 2024, DeepSeek-V3 report, section 2.2) as a drafter (vLLM `mtp`,
SGLang `NEXTN`).

DeepSeek-V3's module normalises the hidden state h_t and the embedding of x_{t+1} apart, projects their
concatenation (2H -> H, no bias) through one block of the model's kind, and the shared head reads x_{t+2}
behind its own norm: EAGLE-1's head with EAGLE-3's norms. So MtpModule is an EagleHead with normed
inputs, trained one step deep, and MtpDrafter an EAGLE chain drafting `num_tokens` a round (more than
one feeds its own output back, which it was never trained on). Unlike DeepSeek-V3, it is trained after
the fact on a frozen target against the target's distribution (speclab.train.mtp), and it reads the last
hidden state after the final norm, as every feature drafter here does.
"""
from __future__ import annotations

from pathlib import Path

from torch import nn

from speclab.methods.eagle import EagleDrafter, EagleHead, head_dtype
from speclab.methods.engines import Options, by_batch, no

NAME = "mtp"  # the method's name in the registry (vLLM's)


class MtpModule(EagleHead):
    """DeepSeek-V3's MTP module for a frozen Llama-family target: norm(h), norm(embedding), a 2H -> H
    projection without bias, one decoder layer of the target's architecture (starting as a copy of its
    last), a norm, and the target's own lm_head and embeddings (not stored with the module)."""

    CONFIG_FILE, WEIGHTS_FILE = "mtp_config.json", "mtp_module.safetensors"
    FC_BIAS = False  # DeepSeek-V3's projection M has no bias
    NORMED_INPUTS = True  # norm(h), norm(embedding) before the projection; a norm before the shared head

    def __init__(self, target_config: dict, target_fingerprint: dict | None = None, version: int = 3,
                 feature_layers=None):
        # reads one layer, the last, so nothing is fused; the stored version (3) is kept for the files
        # already shipped, and means nothing else here
        super().__init__(target_config, target_fingerprint, version=3, feature_layers=(-1,))

    @classmethod
    def for_target(cls, target: nn.Module, version: int = 3) -> MtpModule:
        """A fresh module: its layer a copy of the target's last, its norm a copy of the final norm."""
        return super().for_target(target, 3)

    @property
    def name(self) -> str:
        return "MTP"

    @property
    def train_command(self) -> str:
        return NAME

    @classmethod
    def missing(cls, directory: str | Path) -> str:
        return f"An MTP module is not in {directory}; train one with python -m speclab train mtp --target DIR --out DIR"


class MtpDrafter(EagleDrafter):
    """The MTP module drafting a chain of at most `num_tokens` tokens per round (1: DeepSeek-V3's use;
    more: the module chained on its own outputs), sampled from the served distribution."""

    def __init__(self, module: MtpModule, target: nn.Module, num_tokens: int = 1):
        if not isinstance(num_tokens, int) or num_tokens < 1:
            raise ValueError(f"num_tokens (MTP drafts per round) must be an integer >= 1, got {num_tokens!r}")
        super().__init__(module, target, tree="chain")
        self.num_tokens = self.chain_limit = num_tokens
        self.name = NAME if num_tokens == 1 else f"{NAME} x{num_tokens}"


def load_mtp(target: nn.Module, module: str | Path | MtpModule, num_tokens: int = 1) -> MtpDrafter:
    """An MTP drafter for `target` from a directory written by `python -m speclab train mtp` or a module."""
    if not isinstance(module, MtpModule):
        module = MtpModule.load(module, device=target.device, dtype=head_dtype(target))
    else:  # in a draft's precision, as a loaded one
        module = module.to(device=target.device, dtype=head_dtype(target))
    return MtpDrafter(module, target, num_tokens)


# ---------------------------------------------------------------- engine settings
def engine_settings(engine: str, o: Options) -> dict:
    """MTP's settings as `engine` takes them (speclab.serving.settings.engine_settings)."""
    if engine == "speclab":
        return {"method": NAME, "module": o.path or "MODULE_DIR", "num_tokens": o.k, **by_batch(engine, o)}
    if engine == "vllm":
        # the MTP layers are read from the target's own checkpoint (no separate model)
        return {"method": NAME, "num_speculative_tokens": o.k, **by_batch(engine, o)}
    if engine == "sglang":
        by_batch(engine, o)
        return {"--speculative-algorithm": "NEXTN", "--speculative-num-steps": o.k, "--speculative-eagle-topk": 1,
                "--speculative-num-draft-tokens": o.k + 1}
    if engine == "tensorrt-llm":
        # since TensorRT-LLM PR #12341 (March 2026) K is max_draft_len and num_nextn_predict_layers is read from
        # the checkpoint; before it the validator copied num_nextn_predict_layers into max_draft_len. On a
        # checkpoint with one MTP layer (DeepSeek-V3's), K > 1 runs that layer K times (MTP-Eagle)
        return {"decoding_type": "MTP", "max_draft_len": o.k, **by_batch(engine, o)}
    if engine == "llama.cpp":
        by_batch(engine, o)
        return {"--spec-type": "draft-mtp", "--spec-draft-n-max": o.k}
    raise no(engine, "generate() has no MTP drafter")
