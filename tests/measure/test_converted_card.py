"""The converted pair's card: each row's speedup over target-only on its own path."""
from speclab.measure.converted_card import category_table, preset_name, row_label, tree_sentence


def bench_row(method: str, tokens_per_s: float, alpha: float | None = None) -> dict:
    stats = {"drafted": 10, "alpha": alpha} if alpha is not None else {}
    return {"method": method, "tokens_per_s": tokens_per_s, "prompt_seconds": [1.0, 1.0], "stats": stats}


def test_fast_rows_are_divided_by_the_fast_target_only():
    workload = {"workload": "chat-qa", "max_new_tokens": 64, "k": 2, "temperature": 0.0, "repeats": 3, "cpu": "CPU",
                "threads": 2, "torch": "2", "rows": [
                    bench_row("speclab target-only", 10.0), bench_row("speclab draft_model", 8.0, 0.3),
                    bench_row("speclab eagle3 chain", 9.0, 0.4), bench_row("speclab target-only (fast)", 30.0),
                    bench_row("speclab draft_model (fast)", 33.0, 0.3)]}
    lines = category_table({"workloads": [workload]})
    assert "| distilled draft | 0.80x, α 0.30 |" in lines
    assert "| distilled draft, fast path | 1.10x, α 0.30 |" in lines  # 33 / 30, not 33 / 10
    assert "| target-only, fast path over eager | 3.00x |" in lines
    assert "| EAGLE-3 head, a chain | 0.90x, α 0.40 |" in lines
    assert row_label("speclab draft_model K=1") == "distilled draft, K = 1"
    assert "the median of 3 repeats" in lines[-1] and "drafts K tokens in a row" in lines[-1]


def test_the_training_command_names_the_preset_the_rows_came_from():
    assert preset_name({"preset": {"requests": "everyday"}}, "smollm2") == "smollm2-everyday"
    assert preset_name({"preset": {}}, "smollm2") == "smollm2"


def test_the_eagle3_row_says_which_timed_settings_it_drafted():
    tree = {"top_k": 2, "depth": 3, "total_tokens": 6, "min_confidence": None, "prompts": "8 chat requests",
            "hardware": "Some CPU", "sampled": {"top_k": 1, "depth": 2, "total_tokens": 2, "min_confidence": None,
                                                "prompts": "8 chat requests", "hardware": "Some CPU"}}
    assert "top_k 2, depth 3, 6 tokens" in tree_sentence(tree, 0.0) and "Some CPU" in tree_sentence(tree, 0.0)
    assert "top_k 1, depth 2, 2 tokens" in tree_sentence(tree, 1.0)
    assert "default EAGLE-2 tree" in tree_sentence(None, 0.0)
    assert "default EAGLE-2 tree" in tree_sentence({k: v for k, v in tree.items() if k != "sampled"}, 1.0)
