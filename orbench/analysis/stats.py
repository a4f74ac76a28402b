"""Small statistics and parsing helpers shared by the report and the release builder.

No scipy: the Wilson interval and Spearman's rank correlation are a few lines each.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from orbench.parsing import normalise_for_dedup

#: Fewer scored prompts than this in a cell: its rate is shown greyed, with its n (heatmap).
MIN_CELL_N = 10
# The 97.5% quantile of the standard normal distribution: a two-sided 95% interval.
Z95 = 1.959963984540054


def wilson_interval(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval for ``k`` successes out of ``n``; ``(nan, nan)`` when ``n == 0``."""
    if n <= 0:
        return (math.nan, math.nan)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (ties get their average rank); ``nan`` if undefined.

    Undefined means fewer than 2 pairs, or one side constant.
    """
    if len(x) != len(y):
        raise ValueError("x and y must have the same length")
    if len(x) < 2:
        return math.nan
    rx = pd.Series(list(x), dtype=float).rank(method="average").to_numpy()
    ry = pd.Series(list(y), dtype=float).rank(method="average").to_numpy()
    dx, dy = rx - rx.mean(), ry - ry.mean()
    norm = math.sqrt(float((dx * dx).sum()) * float((dy * dy).sum()))
    if norm == 0:
        return math.nan
    return float((dx * dy).sum() / norm)


def quadratic_fit(x: Sequence[float], y: Sequence[float]) -> np.ndarray | None:
    """``np.polyfit(x, y, 2)`` when at least 3 distinct x values exist, else ``None``."""
    if len(set(float(v) for v in x)) < 3:
        return None
    return np.polyfit(np.asarray(x, dtype=float), np.asarray(y, dtype=float), 2)


def tokens(text: str) -> frozenset[str]:
    """The set of word tokens of a normalised prompt (letters and digits; apostrophes kept inside words)."""
    return frozenset(re.findall(r"[^\W_]+(?:'[^\W_]+)*", normalise_for_dedup(text)))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|a & b| / |a | b|; 1.0 for two empty sets."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def balanced_accuracy_interval(toxic_k: int, toxic_n: int, hard_k: int, hard_n: int,
                               z: float = Z95) -> tuple[float, float, float]:
    """Balanced accuracy ``(toxic rate + 1 - hard rate) / 2`` with a 95% interval; NaNs if a set is empty.

    The two sets are independent samples, so the interval is Newcombe's hybrid score interval
    for the difference of two proportions (his method 10: each side's Wilson interval, combined
    by square-and-add), shifted and halved: BA = (1 + (p_toxic - p_hard)) / 2.
    """
    if toxic_n <= 0 or hard_n <= 0:
        return (math.nan, math.nan, math.nan)
    p1, p2 = toxic_k / toxic_n, hard_k / hard_n
    l1, u1 = wilson_interval(toxic_k, toxic_n, z)
    l2, u2 = wilson_interval(hard_k, hard_n, z)
    diff = p1 - p2
    low = diff - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    high = diff + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return ((1 + diff) / 2, (1 + low) / 2, (1 + high) / 2)
