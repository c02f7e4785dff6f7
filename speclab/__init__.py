"""speclab: the companion package of the speculative decoding course.

The public surface (_WHERE): generate and speculative_generate (the decode loop), verify and verify_tree
(the rejection rule on explicit distributions), Draft, Drafter and SideBranch (the drafting interface),
load_drafter (any registered method: speclab.methods), logits_to_probs (the one sampler), load_pair and
load_model (the bundled pair, SmolLM2, hub pairs, local folders), theory (the speedup model). The folders:
the engine at the top level (sampling, trees, verification, runner, decoding; drafting, the interface),
then methods/, train/, measure/, serving/, course/ and cli/, each importing only those before it.
Names are imported on first use (PEP 562), so `python -m speclab --help` prints without loading torch.
"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

__version__ = "0.1.0"
_WHERE = {"generate": "speclab.decoding", "speculative_generate": "speclab.decoding",
          "verify": "speclab.verification", "verify_tree": "speclab.verification",
          "residual_distribution": "speclab.verification", "logits_to_probs": "speclab.sampling",
          "sample": "speclab.sampling", "SamplingParams": "speclab.sampling", "Draft": "speclab.drafting",
          "Drafter": "speclab.drafting", "SideBranch": "speclab.drafting", "ModelDrafter": "speclab.methods.draft_model",
          "PromptLookupDrafter": "speclab.methods.ngram", "MedusaDrafter": "speclab.methods.medusa",
          "LookaheadDrafter": "speclab.methods.lookahead", "load_drafter": "speclab.methods",
          "load_pair": "speclab.models", "load_model": "speclab.models", "check_same_tokenizer": "speclab.models",
          "HUB_PAIRS": "speclab.models", "Pair": "speclab.models", "GenerationResult": "speclab.stats",
          "GenerationStats": "speclab.stats", "theory": None, "trees": None}
__all__ = list(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        module = import_module(f"speclab.{name}") if _WHERE[name] is None else import_module(_WHERE[name])
        value = module if _WHERE[name] is None else getattr(module, name)
    else:
        try:
            value = import_module(f"speclab.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"speclab.{name}":
                raise
            raise AttributeError(f"module 'speclab' has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:
    from speclab import theory, trees
    from speclab.decoding import generate, speculative_generate
    from speclab.drafting import Draft, Drafter, SideBranch
    from speclab.methods import load_drafter
    from speclab.methods.draft_model import ModelDrafter
    from speclab.methods.lookahead import LookaheadDrafter
    from speclab.methods.medusa import MedusaDrafter
    from speclab.methods.ngram import PromptLookupDrafter
    from speclab.models import HUB_PAIRS, Pair, check_same_tokenizer, load_model, load_pair
    from speclab.sampling import SamplingParams, logits_to_probs, sample
    from speclab.stats import GenerationResult, GenerationStats
    from speclab.verification import residual_distribution, verify, verify_tree
