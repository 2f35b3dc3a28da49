"""The statistics of a setting's seeds: numpy's mean and sample standard deviation, and scipy.stats'
Student t interval of a mean and Welch's t interval of a difference of means (``pip install
'framework[sweep]'``; without scipy the means and standard deviations stay, the intervals are left empty)."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

# The confidence of every interval the report gives.
CONFIDENCE = 0.95
INSTALL = "pip install 'framework[sweep]' (scipy) for the 95% intervals"


def have_scipy() -> bool:
    try:
        import scipy.stats  # noqa: F401
    except ImportError:
        return False
    return True


def summarize(values: list[float]) -> dict:
    """n, mean, sample standard deviation (n - 1) and the 95% t interval of the mean of ``values``
    (the finite ones); the standard deviation and interval are None for fewer than 2 values, the
    interval also without scipy."""
    data = np.asarray([v for v in values if isinstance(v, (int, float)) and math.isfinite(v)], dtype=float)
    n = int(data.size)
    out = {"n": n, "mean": float(np.mean(data)) if n else None, "std": None, "ci95_low": None, "ci95_high": None}
    if n < 2:
        return out
    out["std"] = float(np.std(data, ddof=1))
    if have_scipy():
        from scipy import stats

        sem = out["std"] / math.sqrt(n)
        low, high = stats.t.interval(CONFIDENCE, n - 1, loc=out["mean"], scale=sem) if sem > 0 else (out["mean"],) * 2
        out["ci95_low"], out["ci95_high"] = float(low), float(high)
    return out


def welch_difference(a: list[float], b: list[float]) -> Optional[tuple[float, float, float]]:
    """mean(a) - mean(b) and its 95% interval by Welch's t test (unequal variances; scipy.stats.ttest_ind),
    None with fewer than 2 values on either side or without scipy."""
    a = [v for v in a if isinstance(v, (int, float)) and math.isfinite(v)]
    b = [v for v in b if isinstance(v, (int, float)) and math.isfinite(v)]
    if len(a) < 2 or len(b) < 2 or not have_scipy():
        return None
    from scipy import stats

    difference = float(np.mean(a) - np.mean(b))
    if np.std(a, ddof=1) == 0 and np.std(b, ddof=1) == 0:  # no spread at all: the difference is exact
        return difference, difference, difference
    interval = stats.ttest_ind(a, b, equal_var=False).confidence_interval(CONFIDENCE)
    return difference, float(interval.low), float(interval.high)
