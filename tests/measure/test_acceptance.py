"""speclab.measure.acceptance: the chi-square helper, teacher-forced overlap, acceptance by draft position, the
reliability table and its calibration error."""
import math

import numpy as np
import pytest
import torch

from speclab.measure.acceptance import (acceptance_by_position, calibration_error, chi_square_pvalue,
                                        position_acceptance, reliability, teacher_forced_overlap)
from speclab.stats import GenerationResult, GenerationStats, Round


def test_chi_square_accepts_samples_of_p_and_refuses_others():
    rng = np.random.default_rng(0)
    p = np.array([0.5, 0.3, 0.15, 0.04, 0.01, 0.0])
    good = np.bincount(rng.choice(6, 20000, p=p), minlength=6)
    bad = np.bincount(rng.choice(6, 20000, p=[0.45, 0.35, 0.15, 0.04, 0.01, 0.0]), minlength=6)
    assert chi_square_pvalue(good, p) > 1e-3
    assert chi_square_pvalue(bad, p) < 1e-6
    assert chi_square_pvalue(good + np.eye(6)[5].astype(int), p) == 0.0  # a sample where p has no mass
    assert chi_square_pvalue(good, torch.tensor(p, dtype=torch.float32)) > 1e-3  # tensors, float32 sums


def test_teacher_forced_overlap_of_a_model_with_itself_is_one(pair):
    target, _ = pair
    ids = torch.randint(0, 96, (2, 20), generator=torch.Generator().manual_seed(0))
    o = teacher_forced_overlap(target, target, ids)
    assert o["greedy_agreement"] == 1.0 and abs(o["expected_acceptance"] - 1) < 1e-5


def test_acceptance_by_position_counts_each_position_among_the_rounds_that_reached_it():
    rounds = [Round([1, 2, 3], 3, 9), Round([1, 2, 3], 1, 9), Round([1, 2, 3], 0, 9), Round([1, 2], 2, 9)]
    result = GenerationResult(torch.tensor([0]), GenerationStats(), rounds)
    # position 1: 4 rounds reached it, 3 accepted; position 2: 3 reached, 2 accepted; position 3: 1 of 1
    assert acceptance_by_position([result], 4)[:3] == [3 / 4, 2 / 3, 1.0]
    assert math.isnan(acceptance_by_position([result], 4)[3])  # no round drafted a fourth token
    tree = GenerationResult(torch.tensor([0]), GenerationStats(), [Round([1, 2, 3], 1, 9, [-1, -1, 0], [0])])
    with pytest.raises(ValueError, match="chain"):
        acceptance_by_position([tree], 3)


def test_a_model_drafting_for_itself_is_accepted_at_every_position(pair):
    target, draft = pair
    prompts = [torch.tensor([5, 17, 42, 8]), torch.tensor([3, 9, 27])]
    table = position_acceptance(target, {"itself": target, "draft": draft}, prompts, k=3, max_new_tokens=12)
    assert table["itself"]["by_position"] == [1.0, 1.0, 1.0] and table["itself"]["tokens_per_round"] == 4.0
    assert all(0.0 <= a <= 1.0 for a in table["draft"]["by_position"] if not math.isnan(a))


def test_the_card_decodes_an_eagle_tree_at_the_depth_measured_for_its_head(tmp_path):
    """The model card's dynamic-tree row caps the depth at tree.json's (k caps it in the loop): a
    head whose measured tree is 10 deep is not cut to 8; a head without tree.json gets 8."""
    import json

    from speclab.train.card import tree_depth
    from speclab.models import BUNDLED_DIR
    (tmp_path / "tree.json").write_text(json.dumps({"top_k": 1, "depth": 10, "total_tokens": 10}))
    assert tree_depth(tmp_path) == 10
    assert tree_depth(tmp_path / "missing") == 8
    shipped = json.loads((BUNDLED_DIR / "eagle3" / "tree.json").read_text())
    assert tree_depth(BUNDLED_DIR / "eagle3") == shipped["depth"]


def test_a_heads_card_names_the_command_that_reproduces_its_record():
    from dataclasses import asdict

    from speclab.train.card import rows_trained_on, train_command
    from speclab.methods import REGISTRY, eagle, mtp
    from speclab.train.eagle import EAGLE_PRESETS
    today = asdict(EAGLE_PRESETS["stdlib"])
    record = {"preset": today, "training_rows": today["corpus_rows"] + today["generated"]}
    steps = EAGLE_PRESETS["stdlib"]
    assert train_command(REGISTRY[eagle.NAME], record, steps.steps).endswith("--out DIR --install`")  # today's: no flags
    older = {"preset": {**today, "generated": 128, "steps": 2000}, "training_rows": today["corpus_rows"] + 128}
    assert "--generated 128 --steps 2000 --install" in train_command(REGISTRY[mtp.NAME], older, steps.mtp_steps)
    assert "--generated 128 --install" in train_command(REGISTRY[eagle.NAME3], {**older, "preset": {
        **older["preset"], "steps": today["eagle3_steps"]}}, steps.eagle3_steps)
    assert rows_trained_on(older) == f"{today['corpus_rows'] + 128:,} rows ({today['corpus_rows']:,} corpus windows " \
        "and 128 continuations written by the target)"


def test_the_card_says_which_vocabulary_an_eagle3_head_scores(pair):
    from speclab.train.card import vocabulary_note
    target, _ = pair
    vocab = target.config.vocab_size
    assert "whole vocabulary" in vocabulary_note({"draft_vocab": {"size": vocab}}, target)
    assert "whole vocabulary" in vocabulary_note({}, target)  # records from before draft vocabularies
    note = vocabulary_note({"draft_vocab": {"size": 32, "heldout_coverage": 0.875}}, target)
    assert f"32 most frequent training tokens of {vocab}" in note and "87.5%" in note


def test_each_card_section_is_its_methods_registry_entry():
    """A method's section of the model card is named by its registry entry (Method.card): the writer, found
    from it without the registry importing the card's module, and the file that says its weights are there."""
    from speclab.methods import REGISTRY
    from speclab.models import BUNDLED_DIR
    from speclab.train import card
    sections = [m for m in REGISTRY.values() if m.card is not None]
    assert sections and all(m.bundled and (BUNDLED_DIR / m.bundled / m.card.marker).exists() for m in sections)
    for m in sections:
        writer = getattr(card, m.card.writer.partition(":")[2])
        assert card.section_method(writer) is m and m.card.writes_with(writer)


def test_a_calibrated_predictor_has_no_error_and_a_biased_one_its_bias():
    torch.manual_seed(0)
    confidence = torch.rand(20000)
    outcome = (torch.rand(20000) < confidence).float()         # accepted as often as it says
    table = reliability(confidence, outcome)
    assert len(table) == 10 and sum(r["count"] for r in table) == 20000
    assert calibration_error(table) < 0.02
    assert all(r["low"] <= r["confidence"] < r["high"] for r in table)
    shy = reliability(confidence / 2, outcome)                 # says half of what happens
    assert calibration_error(shy) == pytest.approx(float(confidence.mean() / 2), abs=0.02)
    assert all(r["outcome"] > r["confidence"] for r in shy)


def test_probabilities_as_outcomes_empty_bins_and_bad_input():
    table = reliability(torch.tensor([0.05, 0.95, 1.0]), torch.tensor([0.1, 0.9, 1.0]), bins=2)
    assert [r["count"] for r in table] == [1, 2]               # 1.0 falls in the top bin
    assert table[1]["outcome"] == pytest.approx(0.95)
    assert len(reliability(torch.tensor([0.5]), torch.tensor([1.0]), bins=10)) == 1  # empty bins left out
    with pytest.raises(ValueError, match="as many values"):
        reliability(torch.rand(3), torch.rand(4))
    with pytest.raises(ValueError, match="at least one"):
        reliability(torch.rand(0), torch.rand(0))
