"""The engine facts that speclab.serving's settings and exports rely on, each with the source and version it
was read from; where the serving environment has vLLM installed, read from vLLM itself."""
from __future__ import annotations

import importlib.util
import warnings
from typing import get_args

import pytest

from speclab.methods.checkpoints import VLLM_KEEPS_DRAFT_EMBEDDINGS, check_vllm_keeps_draft_embeddings
from speclab.serving.settings import engine_settings

vllm_installed = importlib.util.find_spec("vllm") is not None


def test_an_eagle1_export_for_a_vllm_that_replaces_draft_embeddings_is_refused():
    """vLLM PR #28549 (merged 2025-11-12) keeps a draft's own embed_tokens when they differ from the target's;
    llama_eagle.py @ 00da9231, before it, skipped them ("draft will share embed with target")."""
    assert VLLM_KEEPS_DRAFT_EMBEDDINGS == (0, 12)
    for old in ("0.8.5", "0.11.0", "0.10.1+cpu"):
        with pytest.raises(ValueError, match="drops the fc bias"):
            check_vllm_keeps_draft_embeddings(old)
    for new in ("0.12.0", "0.32.0", "0.32.0+cpu", "1.0"):
        check_vllm_keeps_draft_embeddings(new)
    with pytest.warns(UserWarning, match="0.12 or later"):
        check_vllm_keeps_draft_embeddings(None)


@pytest.mark.skipif(not vllm_installed, reason="vLLM lives in the serving environment (requirements-serving.txt)")
def test_the_installed_vllm_keeps_a_distinct_eagle_embedding_table():
    import vllm
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_vllm_keeps_draft_embeddings(vllm.__version__)


@pytest.mark.skipif(not vllm_installed, reason="vLLM lives in the serving environment (requirements-serving.txt)")
def test_the_installed_vllm_has_the_block_rule_and_probabilistic_drafts():
    """speclab writes rejection_sample_method "block" with draft_sample_method "probabilistic" (vLLM 0.32's
    vllm/config/speculative.py: RejectionSampleMethod, DraftSampleMethod)."""
    from vllm.config import speculative
    written = engine_settings("eagle3", "vllm", k=3, path="H", acceptance="block").settings
    assert written["rejection_sample_method"] in get_args(speculative.RejectionSampleMethod)
    assert written["draft_sample_method"] in get_args(speculative.DraftSampleMethod)
    fields = speculative.SpeculativeConfig.__dataclass_fields__
    assert {"rejection_sample_method", "draft_sample_method", "num_speculative_tokens_per_batch_size"} <= set(fields)
