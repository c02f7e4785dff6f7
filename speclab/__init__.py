"""speclab: the companion package of the speculative decoding course.

The public surface the book, the labs and outside checks rely on:
    generate, speculative_generate   the decode loop (target only, and speculative)
    verify, verify_tree              the rejection rule for one round (a chain, a tree) on explicit distributions
    Draft, Drafter, SideBranch       what a drafter proposes (a chain or a tree, and tokens riding along for their
                                     logits), and the interface it implements
    load_drafter                     a drafter by method name: draft_model, ngram, lookahead, medusa
    logits_to_probs                  the one sampler: logits to the served distribution
    load_pair, load_model            the bundled stdlib pair, hub pairs, local directories
    theory                           the speedup model
"""
from speclab import theory, trees
from speclab.decoding import generate, speculative_generate
from speclab.drafters import (Draft, Drafter, MedusaDrafter, ModelDrafter, PromptLookupDrafter, SideBranch,
                              load_drafter)
from speclab.lookahead import LookaheadDrafter
from speclab.models import HUB_PAIRS, Pair, check_same_tokenizer, load_model, load_pair
from speclab.sampling import SamplingParams, logits_to_probs, sample
from speclab.stats import GenerationResult, GenerationStats
from speclab.verification import residual_distribution, verify, verify_tree

__version__ = "0.1.0"
__all__ = [
    "generate", "speculative_generate", "verify", "verify_tree", "residual_distribution", "logits_to_probs", "sample",
    "SamplingParams", "Draft", "Drafter", "ModelDrafter", "PromptLookupDrafter", "MedusaDrafter",
    "LookaheadDrafter", "SideBranch", "load_drafter", "load_pair", "load_model",
    "check_same_tokenizer", "HUB_PAIRS", "Pair", "GenerationResult", "GenerationStats", "theory", "trees",
]
