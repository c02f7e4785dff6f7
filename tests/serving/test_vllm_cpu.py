"""speclab.serving.vllm_cpu runs in the serving environment; here, only what needs no vLLM."""
import importlib.util

import pytest

from speclab.serving import vllm_cpu


def test_a_row_counts_tokens_over_the_summed_seconds():
    r = vllm_cpu.row([[1, 2, 3], [4]], [0.5, 1.5])
    assert r["tokens_per_s"] == 2.0 and r["new_tokens"] == 4 and r["outputs"] == [[1, 2, 3], [4]]


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_without_vllm_the_error_says_where_it_lives():
    with pytest.raises(ImportError, match="serving one.*requirements-serving.txt"):
        vllm_cpu.vllm_rows(None, [[1]], 4, 8, 3, 1)


def test_speclabs_lookup_row_is_named_as_the_bench_names_it_and_an_older_record_reads_so():
    assert vllm_cpu.LOOKUP_ROW == "speclab ngram (compiled)"
    old = {"rows": {"speclab prompt lookup (compiled)": {"tokens_per_s": 1.0}, "vllm ngram (compiled)": {}}}
    assert list(vllm_cpu.rows_of(old)) == [vllm_cpu.LOOKUP_ROW, "vllm ngram (compiled)"]
