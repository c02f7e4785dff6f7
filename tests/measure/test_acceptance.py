"""speclab.measure.acceptance: the reliability table and its calibration error."""
import pytest
import torch

from speclab.measure.acceptance import calibration_error, reliability


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
