"""A cascade's rate in the report: the prediction-powered estimate, with the share judged and the
disagreement found beside it.

A group of a stage-5 ``--cascade`` output (its rows carry ``sure`` and ``check`` codes,
:data:`orbench.analysis.report.inputs.ROW_TYPES`) gets, in place of the plain rate of the
cascade's verdicts, the estimate of the rate the judge would give on every row and its interval
(:func:`orbench.analysis.cascade_rate.cascade_rate`; the interval of the cascade's verdicts it
builds on is the group's own, Clopper-Pearson or prompt-clustered, widened where rows lack a
verdict), ``ci_method`` ``ppi`` (``ppi_cluster`` with repeated samples), and three more columns: ``judged_share`` (rows the judge decided or
checked, over the rows without an error), ``check_rows`` (sure rows the judge gave a verdict on)
and ``check_disagreements`` (of those, the ones where it disagrees with the matcher). A group
with bounds only (too many rows without a verdict) keeps them, widened by the matcher's
disagreement share's outer limits.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from orbench.analysis import stats
from orbench.analysis.cascade_rate import cascade_rate, widen_bounds
from orbench.analysis.report.inputs import ERROR, NONE, SCORED, UNSURE

COLUMNS = ["judged_share", "check_rows", "check_disagreements"]


def cascade_rates(data: pd.DataFrame, gid: np.ndarray, out: pd.DataFrame) -> None:
    """Replace the rate and interval of every cascade group of ``out`` (row i = group i of ``gid``)
    and add :data:`COLUMNS`, in place (module docstring). Run after the group's own interval and
    bounds are set."""
    out["judged_share"] = np.nan
    out["check_rows"] = pd.array([None] * len(out), dtype="Int64")
    out["check_disagreements"] = pd.array([None] * len(out), dtype="Int64")
    if data.empty or "sure" not in data.columns:
        return
    sure, check = data["sure"].to_numpy(), data["check"].to_numpy()
    classed = sure >= UNSURE
    if not classed.any():
        return
    status, rejected = data["status"].to_numpy(), data["rejected"].to_numpy()
    order = np.argsort(gid, kind="stable")  # each group's rows, found once
    bounds = np.searchsorted(gid[order], np.arange(len(out) + 1))
    for g in np.unique(gid[classed]):
        rows = order[bounds[g]:bounds[g + 1]]
        st, su, ch = status[rows], sure[rows], check[rows]
        read = st != ERROR
        judged = read & ((su == UNSURE) | (ch != NONE))
        scored = st == SCORED
        f = np.where(su[scored] >= 0, su[scored], np.nan).astype(float)
        y = np.where((ch[scored] == 0) | (ch[scored] == 1), ch[scored], np.nan).astype(float)
        est = cascade_rate(rejected[rows][scored].astype(float), f, y,
                           base=(float(out.at[g, "ci_low"]), float(out.at[g, "ci_high"])))
        out.at[g, "judged_share"] = judged.sum() / read.sum() if read.sum() else np.nan
        out.at[g, "check_rows"] = est.checked
        out.at[g, "check_disagreements"] = est.disagreements
        if out.at[g, "ci_flag"] == stats.BOUNDS_ONLY:
            low, high = widen_bounds(float(out.at[g, "rate_bound_low"]), float(out.at[g, "rate_bound_high"]),
                                     est.rows, est.parts)
            out.at[g, "rate_bound_low"], out.at[g, "rate_bound_high"] = low, high
            continue
        if not est.rows:
            continue
        clustered = out.at[g, "ci_method"] == "cluster_clopper_pearson"
        out.at[g, "rate"], out.at[g, "ci_low"], out.at[g, "ci_high"] = est.value, est.low, est.high
        out.at[g, "ci_method"] = "ppi_cluster" if clustered else "ppi"
