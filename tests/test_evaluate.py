"""Measuring a pair: the chi-square helper and teacher-forced overlap."""
import numpy as np
import torch

from speclab.evaluate import chi_square_pvalue, teacher_forced_overlap


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
