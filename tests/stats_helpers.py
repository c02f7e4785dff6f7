"""Goodness-of-fit helpers for the losslessness tests."""
from __future__ import annotations

import numpy as np
from scipy.stats import chisquare


def chi_square_pvalue(counts: np.ndarray, probs: np.ndarray, min_expected: float = 5.0) -> float:
    """Pearson chi-square p-value of observed counts against exact probabilities. Cells with an
    expected count under min_expected are pooled into one; a count in a zero-probability cell is an
    outright failure (p = 0)."""
    counts, probs = np.asarray(counts, float).ravel(), np.asarray(probs, float).ravel()
    if counts[probs == 0].sum() > 0:
        return 0.0
    n = counts.sum()
    expected = probs * n
    big = expected >= min_expected
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    keep = exp > 0
    if keep.sum() < 2:  # one possible outcome: nothing to test beyond the zero cells above
        return 1.0
    exp = exp[keep] * obs[keep].sum() / exp[keep].sum()
    return float(chisquare(obs[keep], exp).pvalue)
