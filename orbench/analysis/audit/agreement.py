"""The audit's statistics: agreement between annotators, the human majority, machine verdicts
against it (weighted back to the run by stratum), and the Rogan-Gladen corrected rate.

Point figures come from the libraries: scikit-learn (``cohen_kappa_score``), statsmodels
(``fleiss_kappa``) and ``krippendorff`` (alpha); the machine figures are shares computed here and
tested against scikit-learn's (``accuracy_score``, ``precision_score``, ``recall_score`` with
``sample_weight``). Every interval follows the rules of :mod:`orbench.analysis.stats`: Wilson
for a figure over the audited items, the stratified Wilson rule for one weighted back to the
run, the floored bootstrap for kappa (``docs/statistics.md``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from orbench.analysis import stats
from orbench.analysis.stats import Estimate

SEED = stats.SEED


def _needs(module: str, extra: str = "audit"):
    from orbench.llm.errors import UsageError

    return UsageError(f"the audit's statistics need {module}: pip install -e '.[{extra}]'")


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
        out["raw_ci"] = stats.proportion(int(same.sum()), len(same)).ci
        ints = np.vectorize(code.__getitem__)(done)
        if k == 2:
            out["cohen_kappa"] = _float(cohen_kappa_score(done[:, 0], done[:, 1], labels=list(labels)))
            out["cohen_kappa_ci"] = stats.kappa(ints[:, 0], ints[:, 1], range(len(labels))).ci
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



# ---------------------------------------------------------------- machine verdicts against humans

FIGURES = ("accuracy", "precision", "recall", "specificity", "kappa")


def binary_metrics(human: np.ndarray, machine: np.ndarray, strata: np.ndarray, population: np.ndarray,
                   positive: str, *, stratified_on_verdict: bool = False, uncovered: float = 0.0) -> dict:
    """A machine verdict against the human majority, positive class ``positive`` (1 = positive).

    ``sample``: the figures over the audited items, with Wilson intervals (kappa: the floored
    bootstrap); ``weighted``: each item weighted by its stratum (population / items used),
    with the stratified Wilson interval (:func:`orbench.analysis.stats.stratified_share`).
    Each figure is a dict: value, ci, method, flags, n, n_eff, note. ``stratified_on_verdict``:
    the strata are this verdict's, so precision's domain (the machine's positives) is known in
    each stratum, and recall's and specificity's values (the machine's verdict) are too.
    ``uncovered``: rows of strata in scope with no labelled item (flag ``partial``).
    """
    human, machine = np.asarray(human, dtype=int), np.asarray(machine, dtype=int)
    n = len(human)
    out: dict = {"positive": positive, "n": n}
    if n == 0:
        out["note"] = "no audited item has both a human majority and this verdict"
        return out
    strata, population = np.asarray(strata), np.asarray(population, dtype=float)
    cells = {"tp": (human == 1) & (machine == 1), "fp": (human == 0) & (machine == 1),
             "fn": (human == 1) & (machine == 0), "tn": (human == 0) & (machine == 0)}
    out["confusion"] = {k: int(v.sum()) for k, v in cells.items()}
    # figure -> (value per item, domain)
    shares = {"accuracy": (human == machine, np.ones(n, bool)), "precision": (human == 1, machine == 1),
              "recall": (machine == 1, human == 1), "specificity": (machine == 0, human == 0)}
    sample, weighted = {}, {}
    for name, (y, dom) in shares.items():
        sample[name] = _figure(stats.proportion(int((y & dom).sum()), int(dom.sum())), dom)
        weighted[name] = _figure(stats.stratified_share(
            y, strata, population, domain=dom, uncovered=uncovered,
            domain_known=name == "precision" and stratified_on_verdict,
            value_known=name in ("recall", "specificity") and stratified_on_verdict), dom)
    if len(set(human.tolist()) | set(machine.tolist())) > 1:
        sample["kappa"] = stats.kappa(human, machine, [0, 1]).as_dict()
        weighted["kappa"] = stats.kappa(human, machine, [0, 1], strata, population).as_dict()
    else:
        none = stats.not_computable("bootstrap_kappa", "one class only").as_dict()
        sample["kappa"] = weighted["kappa"] = none
    out["sample"], out["weighted"] = sample, weighted
    return out


def _figure(est: Estimate, domain: np.ndarray) -> dict:
    """An estimate as the score's dict; an empty domain is said, not a number."""
    if not domain.any():
        est = stats.not_computable(est.method, "no audited item in this figure's domain")
    return est.as_dict()


# ---------------------------------------------------------------- corrected rate

def rogan_gladen(rate: float, rate_n: float, se: dict, sp: dict, draws: int = stats.BOOTSTRAP,
                 seed: int = SEED) -> Estimate:
    """The measured rate corrected for the verdict's errors: (p + Sp - 1) / (Se + Sp - 1).

    ``se``/``sp``: the audit's weighted recall and specificity (value and effective size
    ``n_eff``); ``rate_n``: the units behind the measured rate (rows, or the prompt-level
    effective size with repeated samples). The interval is the percentile interval of the
    formula over parametric draws: each of Se, Sp and p from the Beta distribution of its value
    at its effective size (Jeffreys: ``Beta(k + 1/2, n - k + 1/2)``), so no input is certain
    unless a census made it so. Draws with Se + Sp <= 1 are left out (flag ``dropped_draws``);
    an estimate outside [0, 1] is clamped (flag ``clamped``, the formula's value in the note).
    """
    method = "rogan_gladen"
    se_v, sp_v = se.get("value", math.nan), sp.get("value", math.nan)
    values = (rate, se_v, sp_v)
    if any(v is None or not math.isfinite(v) for v in values) or not rate_n or rate_n <= 0:
        return stats.not_computable(method, "no measured rate or no audited sensitivity/specificity")
    youden = se_v + sp_v - 1
    if youden <= 0:
        return stats.not_computable(method, "sensitivity + specificity <= 1 (the verdict is no better than chance)")
    rng = np.random.default_rng(seed)
    p = _beta_draws(rng, rate, rate_n, draws)
    s1, s2 = _beta_draws(rng, se_v, se.get("n_eff", math.nan), draws), _beta_draws(rng, sp_v, sp.get("n_eff", math.nan), draws)
    j = s1 + s2 - 1
    ok = j > 0
    corrected = np.clip((p[ok] + s2[ok] - 1) / j[ok], 0, 1)
    raw = (rate + sp_v - 1) / youden
    value = min(1.0, max(0.0, raw))
    low, high = (float(np.percentile(corrected, 2.5)), float(np.percentile(corrected, 97.5))) if ok.any() \
        else (math.nan, math.nan)
    est = Estimate(value, min(low, value), max(high, value), method)
    if not 0 <= raw <= 1:
        est = est.flagged(stats.CLAMPED, note=f"clamped to [0, 1] (the formula gives {raw:.4f})")
    if not ok.all():
        est = est.flagged(stats.DROPPED, note=f"{int((~ok).sum())} of {draws} draws had Se + Sp <= 1 and were left out")
    return est


def _beta_draws(rng: np.random.Generator, value: float, n_eff: float, draws: int) -> np.ndarray:
    """Draws of a proportion at ``value`` on ``n_eff`` units (Jeffreys Beta); fixed when exact."""
    if n_eff is None or not math.isfinite(n_eff):
        return np.full(draws, float(value))
    k = value * n_eff
    return rng.beta(k + 0.5, n_eff - k + 0.5, size=draws)
