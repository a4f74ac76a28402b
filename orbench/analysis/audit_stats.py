"""The audit's statistics: agreement between annotators, the human majority, machine verdicts
against it (weighted back to the run by stratum), and the Rogan-Gladen corrected rate.

Point figures come from the libraries: scikit-learn (``cohen_kappa_score``, ``accuracy_score``,
``precision_score``, ``recall_score``, with ``sample_weight`` for the weighted figures),
statsmodels (``fleiss_kappa``, the Wilson interval) and ``krippendorff`` (alpha). Intervals of
weighted figures come from a stratified bootstrap: each resample draws, within every stratum,
as many items as the stratum has, with replacement, and keeps each item's stratum weight; the
2x2 tables of all resamples are one matrix product, so 2,000 resamples take milliseconds.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

BOOTSTRAP = 2000
SEED = 20240530
LOW, HIGH = 2.5, 97.5


def _needs(module: str, extra: str = "audit"):
    from orbench.errors import UsageError

    return UsageError(f"the audit's statistics need {module}: pip install -e '.[{extra}]'")


def wilson(k: float, n: float) -> tuple[float, float]:
    """statsmodels' Wilson score interval for ``k`` of ``n``; ``(nan, nan)`` when ``n`` is 0."""
    if n <= 0:
        return (math.nan, math.nan)
    from statsmodels.stats.proportion import proportion_confint

    lo, hi = proportion_confint(k, n, alpha=0.05, method="wilson")
    return (float(lo), float(hi))


# ---------------------------------------------------------------- agreement between annotators

def majority(row: Sequence[str | None]) -> str:
    """The most frequent label among those given; '' when none is given or the top is tied."""
    counts = Counter(v for v in row if v)
    if not counts:
        return ""
    top = counts.most_common()
    if len(top) > 1 and top[0][1] == top[1][1]:
        return ""
    return top[0][0]


def agreement(table: np.ndarray, labels: Sequence[str], names: Sequence[str]) -> dict:
    """Agreement of the annotators (columns of ``table``, '' = not labelled) over the items (rows).

    Raw agreement and Fleiss' kappa use the items every annotator labelled; Cohen's kappa is
    given for exactly two annotators (sklearn), Fleiss' kappa (statsmodels) for two or more,
    Krippendorff's alpha (nominal; ``krippendorff``) uses every item with two labels or more.
    With fewer than two annotators nothing is computable and ``note`` says so.
    """
    out: dict = {"annotators": list(names), "items": int(table.shape[0]), "labels": list(labels)}
    k = table.shape[1]
    if k < 2:
        out.update(complete=0, raw=math.nan, raw_ci=[math.nan, math.nan], cohen_kappa=math.nan,
                   cohen_kappa_ci=[math.nan, math.nan], fleiss_kappa=math.nan, krippendorff_alpha=math.nan,
                   note=f"agreement not computable: {k} annotator{'s' if k != 1 else ''} "
                        "(needs 2 or more labelling the same items)")
        return out
    try:
        import krippendorff
        from sklearn.metrics import cohen_kappa_score
        from statsmodels.stats.inter_rater import aggregate_raters, fleiss_kappa
    except ImportError as exc:
        raise _needs(exc.name or "scikit-learn, statsmodels and krippendorff") from None
    code = {lab: i for i, lab in enumerate(labels)}
    full = np.all(table != "", axis=1)
    done = table[full]
    out["complete"] = int(full.sum())
    notes = []
    if done.shape[0] == 0:
        out.update(raw=math.nan, raw_ci=[math.nan, math.nan], cohen_kappa=math.nan,
                   cohen_kappa_ci=[math.nan, math.nan], fleiss_kappa=math.nan)
        notes.append("no item was labelled by every annotator")
    else:
        same = np.all(done == done[:, :1], axis=1)
        out["raw"] = float(same.mean())
        out["raw_ci"] = list(wilson(int(same.sum()), len(same)))
        ints = np.vectorize(code.__getitem__)(done)
        if k == 2:
            out["cohen_kappa"] = _float(cohen_kappa_score(done[:, 0], done[:, 1], labels=list(labels)))
            out["cohen_kappa_ci"] = kappa_interval(ints[:, 0], ints[:, 1], len(labels))
        else:
            out["cohen_kappa"], out["cohen_kappa_ci"] = math.nan, [math.nan, math.nan]
            notes.append(f"Cohen's kappa is for two annotators (have {k}): see Fleiss' kappa")
        counts, _ = aggregate_raters(ints, n_cat=len(labels))
        out["fleiss_kappa"] = _float(fleiss_kappa(counts, method="fleiss"))
    rel = np.array([[code[v] if v else np.nan for v in col] for col in table.T], dtype=float)
    usable = (~np.isnan(rel)).sum(axis=0) >= 2
    alpha = math.nan
    if usable.any() and len(np.unique(rel[:, usable][~np.isnan(rel[:, usable])])) > 1:
        alpha = _float(krippendorff.alpha(reliability_data=rel[:, usable], level_of_measurement="nominal",
                                          value_domain=list(range(len(labels)))))
    out["krippendorff_alpha"] = alpha
    out["note"] = "; ".join(notes)
    return out


def _float(value) -> float:
    value = float(value)
    return value if math.isfinite(value) else math.nan


def kappa_interval(a: np.ndarray, b: np.ndarray, n_labels: int, draws: int = BOOTSTRAP,
                   seed: int = SEED) -> list[float]:
    """A percentile bootstrap interval (items resampled) for Cohen's kappa of two label codes."""
    n = len(a)
    if n < 2:
        return [math.nan, math.nan]
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n, np.full(n, 1 / n), size=draws).astype(float)
    cells = a * n_labels + b
    table = np.stack([counts @ (cells == c) for c in range(n_labels * n_labels)], axis=1)
    table = table.reshape(draws, n_labels, n_labels) / n
    po = np.trace(table, axis1=1, axis2=2)
    pe = np.einsum("bi,bi->b", table.sum(axis=2), table.sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        kappa = np.where(pe < 1, (po - pe) / (1 - pe), np.nan)
    return _percentiles(kappa)


def _percentiles(values: np.ndarray) -> list[float]:
    values = values[np.isfinite(values)]
    if values.size == 0:
        return [math.nan, math.nan]
    return [float(np.percentile(values, LOW)), float(np.percentile(values, HIGH))]


# ---------------------------------------------------------------- weighting back to the run

def stratum_weights(strata: np.ndarray, population: np.ndarray) -> np.ndarray:
    """Each item's weight: its stratum's population over the items of that stratum used here."""
    used = Counter(strata.tolist())
    return np.array([population[i] / used[s] for i, s in enumerate(strata.tolist())], dtype=float)


def resample_counts(strata: np.ndarray, draws: int = BOOTSTRAP, seed: int = SEED) -> np.ndarray:
    """A (draws x items) matrix: how often each item is drawn in each stratified resample."""
    rng = np.random.default_rng(seed)
    out = np.zeros((draws, len(strata)), dtype=float)
    for s in np.unique(strata):
        idx = np.flatnonzero(strata == s)
        out[:, idx] = rng.multinomial(len(idx), np.full(len(idx), 1 / len(idx)), size=draws)
    return out


def _from_table(tp, fp, fn, tn) -> dict:
    """Accuracy, precision, recall, specificity and Cohen's kappa from (arrays of) 2x2 cells."""
    tp, fp, fn, tn = (np.asarray(x, dtype=float) for x in (tp, fp, fn, tn))
    n = tp + fp + fn + tn
    with np.errstate(invalid="ignore", divide="ignore"):
        po = (tp + tn) / n
        pe = ((tp + fp) * (tp + fn) + (fn + tn) * (fp + tn)) / (n * n)
        return {"accuracy": po, "precision": tp / (tp + fp), "recall": tp / (tp + fn),
                "specificity": tn / (tn + fp),
                "kappa": np.where(pe < 1, (po - pe) / (1 - pe), np.nan)}


def binary_metrics(human: np.ndarray, machine: np.ndarray, strata: np.ndarray, population: np.ndarray,
                   positive: str) -> dict:
    """A machine verdict against the human majority, positive class ``positive`` (1 = positive).

    ``sample``: unweighted figures of the audited items (sklearn), proportions with Wilson
    intervals; ``weighted``: each item weighted by its stratum (population / items used), the
    figures of sklearn with ``sample_weight``, intervals from the stratified bootstrap. The
    bootstrap draws of recall and specificity (sensitivity, specificity) are returned under
    ``draws`` for the corrected rate.
    """
    try:
        from sklearn.metrics import accuracy_score, cohen_kappa_score, precision_score, recall_score
    except ImportError:
        raise _needs("scikit-learn") from None
    human, machine = np.asarray(human, dtype=int), np.asarray(machine, dtype=int)
    n = len(human)
    out: dict = {"positive": positive, "n": n}
    if n == 0:
        out["note"] = "no audited item has both a human majority and this verdict"
        return out
    w = stratum_weights(np.asarray(strata), np.asarray(population, dtype=float))
    tables = {}
    for name, weight in (("sample", None), ("weighted", w)):
        kw = {"sample_weight": weight}
        figures = {
            "accuracy": accuracy_score(human, machine, **kw),
            "precision": precision_score(human, machine, zero_division=np.nan, **kw),
            "recall": recall_score(human, machine, zero_division=np.nan, **kw),
            "specificity": recall_score(human, machine, pos_label=0, zero_division=np.nan, **kw),
            "kappa": cohen_kappa_score(human, machine, labels=[0, 1], sample_weight=weight)
            if len(set(human) | set(machine)) > 1 else math.nan,
        }
        tables[name] = {k: _float(v) for k, v in figures.items()}
    cells = {"tp": (human == 1) & (machine == 1), "fp": (human == 0) & (machine == 1),
             "fn": (human == 1) & (machine == 0), "tn": (human == 0) & (machine == 0)}
    out["confusion"] = {k: int(v.sum()) for k, v in cells.items()}
    counts = {"accuracy": (cells["tp"] | cells["tn"], np.ones(n, bool)),
              "precision": (cells["tp"], machine == 1), "recall": (cells["tp"], human == 1),
              "specificity": (cells["tn"], human == 0)}
    sample = {}
    for k, v in tables["sample"].items():
        ci = wilson(int(counts[k][0].sum()), int(counts[k][1].sum())) if k in counts else \
            tuple(kappa_interval(human, machine, 2))
        sample[k] = {"value": v, "ci": list(ci)}
    c = resample_counts(np.asarray(strata)) * w
    boot = _from_table(*(c @ cells[k] for k in ("tp", "fp", "fn", "tn")))
    out["sample"] = sample
    out["weighted"] = {k: {"value": v, "ci": _percentiles(boot[k])} for k, v in tables["weighted"].items()}
    out["draws"] = {"sensitivity": boot["recall"], "specificity": boot["specificity"]}
    return out


def weighted_ratio(numerator: np.ndarray, denominator: np.ndarray, strata: np.ndarray,
                   population: np.ndarray) -> dict:
    """sum(w * numerator) / sum(w * denominator) with its stratified-bootstrap interval."""
    numerator, denominator = np.asarray(numerator, float), np.asarray(denominator, float)
    if denominator.sum() == 0:
        return {"value": math.nan, "ci": [math.nan, math.nan], "n": 0}
    w = stratum_weights(np.asarray(strata), np.asarray(population, dtype=float))
    c = resample_counts(np.asarray(strata)) * w
    with np.errstate(invalid="ignore", divide="ignore"):
        draws = (c @ numerator) / (c @ denominator)
    return {"value": float((w * numerator).sum() / (w * denominator).sum()), "ci": _percentiles(draws),
            "n": int(denominator.sum())}


# ---------------------------------------------------------------- corrected rate

def rogan_gladen(rate: float, scored: int, sensitivity: float, specificity: float,
                 se_draws: np.ndarray, sp_draws: np.ndarray, seed: int = SEED) -> dict:
    """The measured rate corrected for the verdict's errors: (p + Sp - 1) / (Se + Sp - 1).

    The interval combines the audit's uncertainty (the bootstrap draws of Se and Sp) and the
    measured rate's (a binomial draw of ``scored`` rows at ``rate``). Estimates outside [0, 1]
    are clamped, and ``clamped`` says so; when Se + Sp <= 1 the verdict is no better than
    chance and nothing is computed.
    """
    out = {"measured": rate, "sensitivity": sensitivity, "specificity": specificity}
    if any(not math.isfinite(v) for v in (rate, sensitivity, specificity)) or scored <= 0:
        return {**out, "corrected": math.nan, "ci": [math.nan, math.nan], "clamped": False,
                "note": "not computable: no measured rate or no audited sensitivity/specificity"}
    youden = sensitivity + specificity - 1
    if youden <= 0:
        return {**out, "corrected": math.nan, "ci": [math.nan, math.nan], "clamped": False,
                "note": "not computable: sensitivity + specificity <= 1 (the verdict is no better than chance)"}
    raw = (rate + specificity - 1) / youden
    rng = np.random.default_rng(seed)
    p = rng.binomial(scored, rate, size=len(se_draws)) / scored
    with np.errstate(invalid="ignore", divide="ignore"):
        j = se_draws + sp_draws - 1
        draws = np.where(j > 0, (p + sp_draws - 1) / j, np.nan)
    clamped = not 0 <= raw <= 1
    return {**out, "corrected": min(1.0, max(0.0, raw)), "unclamped": raw,
            "ci": [min(1.0, max(0.0, v)) if math.isfinite(v) else v for v in _percentiles(draws)],
            "clamped": clamped,
            "note": f"clamped to [0, 1] (the formula gives {raw:.4f})" if clamped else ""}
