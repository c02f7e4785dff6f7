"""Medusa heads: shapes and initialisation, the fit check, the drafter's greedy exactness on chains
and trees, the tree built from accuracies, and the training command (micro preset)."""
import json

import pytest
import torch

from speclab import MedusaDrafter, generate, load_drafter, speculative_generate
from speclab.methods.medusa import MedusaHeads
from speclab.cli.train import main as train_main
from speclab.trees import expected_accepted, tree_from_accuracies
from tests.conftest import tiny_model

TREE = [(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 1, 0), (0, 0, 0, 0)]


def test_fresh_heads_start_as_the_target_lm_head():
    target = tiny_model("llama", layers=2)
    heads = MedusaHeads.for_target(target, num_heads=3)
    h = torch.randn(5, target.config.hidden_size)
    logits = heads(h)
    assert logits.shape == (3, 5, 96)
    torch.testing.assert_close(logits[2], target.lm_head(h))  # zero-initialised residual block: the identity


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
@pytest.mark.parametrize("tree", ["chain", TREE], ids=["chain", "tree"])
def test_greedy_medusa_equals_target_only(arch, tree, prompt):
    target = tiny_model(arch, layers=2, seed=0)
    torch.manual_seed(1)
    heads = MedusaHeads.for_target(target, num_heads=4)
    for head in heads.heads:  # untrained heads that still agree with the target now and then
        head[0].linear.weight.data.normal_(0, 0.3)
    reference = generate(target, prompt, max_new_tokens=50).tokens.tolist()
    result = speculative_generate(target, MedusaDrafter(heads, tree), prompt, k=4, max_new_tokens=50)
    assert result.tokens.tolist() == reference
    assert result.stats.drafted > 0 and result.stats.target_calls == result.stats.rounds + 1


def test_a_one_token_prompt_drafts_from_the_second_round_on():
    target = tiny_model("llama", layers=2)
    drafter = MedusaDrafter(MedusaHeads.for_target(target, num_heads=2))
    result = speculative_generate(target, drafter, torch.tensor([5]), k=2, max_new_tokens=10)
    assert result.tokens.tolist() == generate(target, torch.tensor([5]), max_new_tokens=10).tokens.tolist()


def test_heads_for_another_target_are_refused(tmp_path):
    target = tiny_model("llama", layers=2, seed=0)
    MedusaHeads.for_target(target, num_heads=2).save(tmp_path / "heads")
    with pytest.raises(ValueError, match="another target of the same shape.*train medusa"):
        load_drafter("medusa", tiny_model("llama", layers=2, seed=5), heads=tmp_path / "heads")
    with pytest.raises(ValueError, match="vocab 96.*train medusa"):
        load_drafter("medusa", tiny_model("llama", layers=2, vocab=64), heads=tmp_path / "heads")
    with pytest.raises(FileNotFoundError, match="train medusa"):
        load_drafter("medusa", target, heads=tmp_path / "nothing here")
    drafter = load_drafter("medusa", target, heads=tmp_path / "heads")
    assert drafter.is_chain and drafter.heads.num_heads == 2


def test_bad_trees_and_methods_are_refused():
    heads = MedusaHeads(32, 96, num_heads=2)
    with pytest.raises(ValueError, match="only 2 heads"):
        MedusaDrafter(heads, [(0,), (0, 0), (0, 0, 0)])
    with pytest.raises(ValueError, match="medusa_choices"):
        MedusaDrafter(heads, "wide")
    with pytest.raises(ValueError, match="unknown drafting method"):
        load_drafter("eagle9")


def test_the_tree_from_accuracies_takes_the_likeliest_nodes():
    acc = [[0.6, 0.2, 0.1], [0.4, 0.2, 0.1], [0.3, 0.1, 0.05]]
    tree = tree_from_accuracies(acc, 4)
    assert tree == [(0,), (0, 0), (1,), (0, 1)]  # values 0.6, 0.24, 0.2, 0.12
    assert expected_accepted(tree, acc) == pytest.approx(0.6 + 0.24 + 0.2 + 0.12)
    chain = [(0,), (0, 0), (0, 0, 0)]
    assert expected_accepted(tree_from_accuracies(acc, 3), acc) >= expected_accepted(chain, acc)


def test_train_medusa_micro_resumes_installs_and_drafts(tmp_path):
    from speclab.train import install
    pair = tmp_path / "pair"
    train_main(["pair", "--out", str(pair), "--preset", "micro", "--device", "cpu", "--no-plain-draft"])
    out = tmp_path / "medusa"
    train_main(["medusa", "--target", str(pair / "target"), "--out", str(out), "--preset", "micro", "--steps", "3"])
    train_main(["medusa", "--target", str(pair / "target"), "--out", str(out), "--preset", "micro", "--steps", "5"])
    record = json.loads((out / "medusa" / "record.json").read_text())
    assert record["log"]["evals"][-1]["step"] == 5 and len(record["accuracy"]) == 2  # resumed, not restarted
    assert json.loads((out / "medusa" / "tree.json").read_text())["choices"]  # a tree chosen by measurement
    installed = install(out, "medusa", tmp_path / "package")
    import shutil

    from speclab.train.card import MEDUSA_HEADING, medusa_card
    shutil.copytree(pair / "target", tmp_path / "package" / "target")
    section = medusa_card(tmp_path / "package", num_prompts=1, max_new_tokens=8)
    assert section.startswith(MEDUSA_HEADING) and "(chosen)" in section and "top-1 chain" in section
    import speclab
    target, _, tok, _ = speclab.load_pair(str(pair / "target"), draft=pair / "draft", device="cpu")
    drafter = load_drafter("medusa", target, heads=installed)
    ids = tok("def f(x):\n", return_tensors="pt").input_ids[0]
    assert speclab.speculative_generate(target, drafter, ids, k=2, max_new_tokens=8).tokens.tolist() == \
        speclab.generate(target, ids, max_new_tokens=8).tokens.tolist()


def test_a_quick_in_memory_run_lowers_the_loss():
    from speclab.train import quick_medusa
    target = tiny_model("llama", layers=2, seed=0)
    rows = torch.randint(0, 96, (8, 32), generator=torch.Generator().manual_seed(0))
    heads, losses = quick_medusa(target, rows, steps=30, num_heads=2)
    assert len(losses) == 30 and sum(losses[-5:]) < sum(losses[:5]) and heads.num_heads == 2


def test_a_card_section_is_replaced_or_appended():
    from speclab.train.card import replace_section
    card = "# Card\n\n## A\nold a\n\n## B\nb\n"
    assert replace_section(card, "## A", "## A\nnew a") == "# Card\n\n## A\nnew a\n\n## B\nb\n"
    assert replace_section(card, "## C", "## C\nc") == card + "\n## C\nc\n"
    assert replace_section(card, "## B", "## B\nnew b") == "# Card\n\n## A\nold a\n\n## B\nnew b\n"


@pytest.fixture(scope="module")
def bundled():
    import speclab
    from speclab.corpus import heldout_prompts
    target, _, tok, _ = speclab.load_pair(device="cpu")
    prompts = [tok(p, return_tensors="pt").input_ids[0] for p in heldout_prompts("code", 2)]
    return target, prompts


@pytest.mark.parametrize("tree", ["shipped", "chain"])
def test_the_shipped_heads_decode_the_bundled_target_exactly(bundled, tree):
    target, prompts = bundled
    drafter = load_drafter("medusa", target, tree=None if tree == "shipped" else "chain")
    assert drafter.is_chain == (tree == "chain")
    for prompt in prompts:
        reference = generate(target, prompt, max_new_tokens=48).tokens.tolist()
        result = speculative_generate(target, drafter, prompt, k=4, max_new_tokens=48)
        assert result.tokens.tolist() == reference
        # untrained heads (copies of the lm_head) guess the wrong place and give about 1.0 token per pass
        assert result.stats.mean_tokens_per_round > 1.05
