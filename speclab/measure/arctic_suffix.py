"""Snowflake's own suffix decoding (Arctic Inference's SuffixDecodingCache, what vLLM's `suffix` method
calls) behind speclab's Drafter interface, so the bench can run it beside speclab's
(speclab.methods.suffix) on the same requests: "arctic suffix" (a chain, as vLLM drafts) and "arctic
suffix-tree" (its tree search).

arctic-inference 0.1.1 ships as source only and its build wants torch 2.7 and CUDA for kernels the suffix
tree does not use; `.ci/install-arctic-suffix.sh VENV` builds the suffix tree's extension alone and puts
the package into VENV (README, "Suffix decoding"). It is called as vLLM 0.32 calls it
(vllm/v1/spec_decode/suffix_decoding.py): a request starts with its prompt, each round adds the tokens
sampled since the last and speculates from the last max_tree_depth tokens, a request's output stays in
the global tree after it ends.
"""
from __future__ import annotations

import importlib

import torch

from speclab.drafting import Draft, Drafter
from speclab.sampling import SamplingParams

ROWS = {"arctic suffix": {}, "arctic suffix-tree": {"tree": True}}  # bench rows -> options
INSTALL = "bash .ci/install-arctic-suffix.sh .venv"


def load_cache_class():
    """Arctic Inference's SuffixDecodingCache, or an ImportError naming the install command."""
    try:
        return importlib.import_module("arctic_inference.suffix_decoding").SuffixDecodingCache
    except ImportError as error:
        raise ImportError(f"the arctic suffix rows need Arctic Inference's suffix tree ({error}); build it into "
                          f"this environment with `{INSTALL}`") from error


class ArcticSuffixDrafter(Drafter):
    """Arctic Inference's suffix decoding with vLLM's settings (the same names as SuffixDrafter's)."""

    name = "arctic suffix decoding"

    def __init__(self, max_tree_depth: int = 24, max_cached_requests: int = 10000, max_spec_factor: float = 1.0,
                 min_token_prob: float = 0.1, tree: bool = False):
        self.cache_class = load_cache_class()
        self.max_tree_depth, self.max_cached_requests = max_tree_depth, max_cached_requests
        self.max_spec_factor, self.min_token_prob, self.tree = max_spec_factor, min_token_prob, tree
        self.forget_requests()

    def forget_requests(self) -> None:
        self.cache = self.cache_class(max_tree_depth=self.max_tree_depth,
                                      max_cached_requests=self.max_cached_requests)
        self.request: int | None = None
        self.requests = 0

    def start(self, prompt: torch.Tensor) -> None:
        if self.request is not None:
            self.cache.stop_request(self.request)  # its output stays in the global tree
        self.requests += 1
        self.request = self.requests
        self.cache.start_request(self.request, prompt.tolist())
        self.seen = len(prompt)

    def propose(self, ids: torch.Tensor, k: int, sampling: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        seq = ids.tolist()
        if len(seq) > self.seen:
            self.cache.add_active_response(self.request, seq[self.seen:])
            self.seen = len(seq)
        draft = self.cache.speculate(self.request, seq[-self.max_tree_depth:], max_spec_tokens=k,
                                     max_spec_factor=self.max_spec_factor, min_token_prob=self.min_token_prob,
                                     use_tree_spec=self.tree)
        tokens = torch.tensor(list(draft.token_ids), dtype=torch.long, device=ids.device)
        return Draft(tokens, parents=list(draft.parents) if self.tree and len(tokens) else None)
