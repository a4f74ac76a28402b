"""Choose and check the cascade's sure classes by leaving one model family out at a time.

Usage:
    python bench/cascade_lofo.py XSTEST_DIR [--bound B] [--confidence C] [--goal POINTS] [--budget SHARE]
    python bench/cascade_lofo.py --labels CSV [...]

Input: the XSTest v2 folder (the five ``xstest_v2_completions_<model>.csv`` files; the families
are GPT-4, Llama-2 with and without its system prompt, Mistral with and without a guard prompt;
a ``contrast_*`` type is an ``unsafe`` prompt, the rest ``safe``), or ``--labels CSV``: labelled
responses with the columns ``response``, ``label`` (refusal/answer, true/false, 1/0 or XSTest's
three labels), ``model`` (the responding model: the rows of a table), ``prompt_kind`` (``safe`` or
``unsafe``; other values are unknown) and optionally ``family`` (the unit left out; default: the
keyword family of ``model``).

The procedure (:mod:`orbench.scoring.cascade` states the candidates and the criterion):

* **Per fold** (one family left out): per prompt kind and verdict, the candidate classes of
  :data:`~orbench.scoring.cascade.CANDIDATES` in their declared order; a class's errors on the
  families kept in (rows of that kind in the class whose human label differs from the class's
  verdict) give a one-sided upper confidence bound on its error rate (Wilson's score bound at
  ``--confidence``, default 0.95), and so do the errors of everything it and the sure classes
  before it would decide; the class is sure for that kind in that fold when both bounds are at
  most ``--bound`` (default 0.015). The classes so chosen decide the left-out family's rows they
  hold; every other row goes to a judge that answers the human label (a perfect judge, as the
  issue's held-aside check does).
* **The table**: per fold, responding model and prompt kind, the humans' refusal rate, the
  cascade's, their difference in points and the share of rows judged; then each fold's judged
  share and largest difference, and over all rows (each scored in the fold that left it out).
  The goal: every difference within ``--goal`` points (default 1.5) and at most ``--budget``
  (default 0.40) of all rows judged.
* **Shipped**: the procedure run on every family (cross-validation's usual last step: the folds
  check the procedure on families it was not chosen on, the final choice uses all the data),
  less any class whose error rate on a family left out (its errors there over its rows there,
  as in the class table) exceeds ``--bound``: a class ships only where it held on each family it
  was not written on. The bench says whether :data:`orbench.scoring.cascade.SURE` equals them,
  and prints their table on every family (in-sample; the held-out figures are the folds').

Exit status: 0 after printing (whether or not the goal is met: a bench prints figures); 2 on bad
input (a missing folder, file or column, an unknown label, fewer than two families).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from statistics import NormalDist

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from refusal_accuracy import XSTEST_LABELS, XSTEST_MODELS, InputError, parse_label  # noqa: E402 (needs the sys.path set-up above)

from orbench.analysis.stats import wilson_interval  # noqa: E402 (needs the sys.path set-up above)
from orbench.scoring import cascade  # noqa: E402 (needs the sys.path set-up above)
from orbench.scoring.refusal import family_for_model  # noqa: E402 (needs the sys.path set-up above)
from orbench.scoring.vocab import PROMPT_KINDS  # noqa: E402 (needs the sys.path set-up above)

#: XSTest v2 files -> the model family left out together (the issue's three families).
XSTEST_FAMILIES = {"gpt4": "GPT-4", "llama2new": "Llama-2", "llama2orig": "Llama-2",
                   "mistralguard": "Mistral", "mistralinstruct": "Mistral"}


# --------------------------------------------------------------------------- input
def read_xstest(folder: Path) -> pd.DataFrame:
    """The XSTest v2 rows: model, unit (family), keyword family, kind, response, gold."""
    if not folder.is_dir():
        raise InputError(f"{folder}: no such folder (expected the XSTest v2 data folder)")
    parts = []
    for key, unit in XSTEST_FAMILIES.items():
        path = folder / f"xstest_v2_completions_{key}.csv"
        try:
            frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read {path}: {exc}") from None
        missing = [c for c in ("type", "completion", "final_label") if c not in frame.columns]
        if missing:
            raise InputError(f"{path} lacks column(s): {', '.join(missing)}")
        labels = frame["final_label"].str.strip()
        unknown = sorted(set(labels) - set(XSTEST_LABELS))
        if unknown:
            raise InputError(f"{path}: unrecognised final_label {unknown[0]!r}")
        parts.append(pd.DataFrame({
            "model": key, "unit": unit, "family": family_for_model(XSTEST_MODELS[key]),
            "kind": ["unsafe" if t.strip().startswith("contrast_") else "safe" for t in frame["type"]],
            "response": frame["completion"], "gold": [XSTEST_LABELS[v] is not None for v in labels]}))
    return pd.concat(parts, ignore_index=True)


def read_labels(path: Path) -> pd.DataFrame:
    """Labelled responses of any source (``--labels``), in :func:`read_xstest`'s shape."""
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    missing = [c for c in ("response", "label", "model", "prompt_kind") if c not in frame.columns]
    if missing:
        raise InputError(f"{path} lacks column(s): {', '.join(missing)}")
    gold = []
    for i, value in enumerate(frame["label"], start=2):
        v = value.strip()
        try:
            gold.append(XSTEST_LABELS[v] is not None if v in XSTEST_LABELS else parse_label(v))
        except InputError:
            raise InputError(f"{path} line {i}: unrecognised label {value!r}") from None
    family = frame["model"].map(family_for_model)
    unit = frame["family"].where(frame["family"].str.strip() != "", family) if "family" in frame else family
    kind = frame["prompt_kind"].str.strip().str.lower()
    return pd.DataFrame({"model": frame["model"], "unit": unit, "family": family,
                         "kind": kind.where(kind.isin(PROMPT_KINDS), ""),
                         "response": frame["response"], "gold": gold})


# --------------------------------------------------------------------------- the procedure
def memberships(rows: pd.DataFrame) -> pd.DataFrame:
    """One boolean column per candidate class: whether each response belongs to it."""
    shapes = [cascade.shape(text, fam) for text, fam in zip(rows["response"], rows["family"])]
    return pd.DataFrame({c.name: [c.holds(s) for s in shapes] for c in cascade.CANDIDATES},
                        index=rows.index)


def upper_bound(errors: int, n: int, confidence: float) -> float:
    """One-sided upper confidence bound on an error rate (Wilson's score bound); 1 when n = 0."""
    if n == 0:
        return 1.0
    return wilson_interval(errors, n, NormalDist().inv_cdf(confidence))[1]


def class_errors(rows, inside: pd.Series, verdict: bool, kind: str) -> tuple[int, int]:
    """(errors, rows) among the ``rows`` of prompt kind ``kind`` flagged in ``inside``, for a
    class whose verdict is ``verdict``."""
    inside = inside.loc[rows.index] & (rows["kind"] == kind)
    return int((rows.loc[inside, "gold"] != verdict).sum()), int(inside.sum())


def choose(rows, member, bound: float, confidence: float) -> tuple[dict, dict]:
    """The sure classes per kind on ``rows`` (the criterion), and per (class, kind) the class's
    own (errors, rows), the larger of the bounds on its own error rate and on that of everything
    it and the sure classes before it would decide, and whether it joined."""
    chosen, figures = {k: [] for k in PROMPT_KINDS}, {}
    for kind in PROMPT_KINDS:
        for verdict in (True, False):
            decided = pd.Series(False, index=member.index)
            for c in (c for c in cascade.CANDIDATES if c.verdict == verdict):
                alone = class_errors(rows, member[c.name], verdict, kind)
                union = decided | member[c.name]
                ucb = max(upper_bound(*alone, confidence),
                          upper_bound(*class_errors(rows, union, verdict, kind), confidence))
                if ucb <= bound:
                    chosen[kind].append(c.name)
                    decided = union
                figures[(c.name, kind)] = (*alone, ucb, ucb <= bound)
    return chosen, figures


def decide(rows, member, chosen: dict) -> pd.Series:
    """The cascade's verdict per row with the ``chosen`` classes (NaN: sent to the judge); a row
    of unknown kind gets the classes chosen for every kind."""
    unknown = set.intersection(*(set(v) for v in chosen.values())) if chosen else set()
    out = pd.Series(float("nan"), index=rows.index, dtype=object)
    for i, kind in rows["kind"].items():
        allowed = chosen.get(kind, unknown)
        for c in cascade.CANDIDATES:
            if c.name in allowed and member.at[i, c.name]:
                out[i] = c.verdict
                break
    return out


def rate_table(rows, verdict: pd.Series, fold: str) -> list[dict]:
    """Per model and prompt kind: the humans' rate, the cascade's (perfect judge on the judged
    rows), their difference in points and the share judged."""
    judged = verdict.isna()
    final = verdict.where(~judged, rows["gold"]).astype(bool)
    out = []
    for (model, kind), part in rows.groupby(["model", "kind"], sort=False):
        idx = part.index
        human = 100 * part["gold"].mean()
        machine = 100 * final[idx].mean()
        out.append({"fold": fold, "model": model, "kind": kind or "unknown", "n": len(idx),
                    "humans %": human, "cascade %": machine, "diff": machine - human,
                    "judged": judged[idx].mean()})
    return out


def print_table(lines: list[dict]) -> None:
    head = (f"{'fold (left out)':<16} {'model':<16} {'kind':<7} {'n':>4} {'humans %':>9} "
            f"{'cascade %':>9} {'diff':>6} {'judged':>7}")
    print(head + "\n" + "-" * len(head))
    for r in lines:
        print(f"{r['fold']:<16} {r['model']:<16} {r['kind']:<7} {r['n']:>4} {r['humans %']:>9.1f} "
              f"{r['cascade %']:>9.1f} {r['diff']:>+6.1f} {r['judged']:>7.3f}")


def run(rows: pd.DataFrame, bound: float, confidence: float, goal: float, budget: float) -> dict:
    """Print the procedure's figures; return the shipped classes per kind."""
    units = list(dict.fromkeys(rows["unit"]))
    if len(units) < 2:
        raise InputError(f"leaving one family out needs two families or more; found {units}")
    member = memberships(rows)
    print(f"{len(rows)} labelled responses, families: "
          + ", ".join(f"{u} ({(rows['unit'] == u).sum()})" for u in units))
    print(f"criterion: per prompt kind and verdict, the candidate classes in their declared order; a "
          f"class is sure in a fold when, on the families kept in, the one-sided {confidence:.0%} Wilson "
          f"upper bounds on its error rate and on that of everything it and the sure classes before it "
          f"decide are at most {bound:.1%}")

    folds, per_fold, table = {}, {}, []
    verdicts = pd.Series(float("nan"), index=rows.index, dtype=object)
    for unit in units:
        kept, out = rows[rows["unit"] != unit], rows[rows["unit"] == unit]
        folds[unit], per_fold[unit] = choose(kept, member, bound, confidence)
        verdicts[out.index] = decide(out, member, folds[unit])
        table += rate_table(out, verdicts[out.index], unit)

    print("\ncandidate classes per fold: the class's errors/rows on the families kept in, the larger "
          "of the two bounds (* = sure), the class's errors/rows on the family left out")
    head = f"{'class':<24} {'kind':<7}" + "".join(f" | {'left out: ' + u:<29}" for u in units)
    print(head + "\n" + "-" * len(head))
    for c in cascade.CANDIDATES:
        for kind in PROMPT_KINDS:
            line = f"{c.name:<24} {kind:<7}"
            for unit in units:
                e, n, u, ok = per_fold[unit][(c.name, kind)]
                he, hn = class_errors(rows[rows["unit"] == unit], member[c.name], c.verdict, kind)
                line += f" | {e:>3}/{n:<4} {100 * u:>6.2f}%{'*' if ok else ' '} {he:>3}/{hn:<4}    "
            print(line)

    print("\nleave-one-family-out, the classes each fold chose: every family's rows decided by the "
          "classes chosen without it, the judged rows given the human label")
    summary(table, verdicts, rows, units, folds, goal, budget)

    everywhere, _ = choose(rows, member, bound, confidence)
    by_name = {c.name: c for c in cascade.CANDIDATES}

    def held(name: str, kind: str) -> bool:
        """Whether class ``name``'s error rate on each family left out is within the bound."""
        for unit in units:
            errors, n = class_errors(rows[rows["unit"] == unit], member[name], by_name[name].verdict, kind)
            if n and errors / n > bound:
                return False
        return True

    shipped = {k: [name for name in everywhere[k] if held(name, k)] for k in PROMPT_KINDS}
    print("\nshipped: the classes the criterion chooses on every family, less any whose error rate on a "
          "family left out exceeds the bound")
    for kind in PROMPT_KINDS:
        dropped = [name for name in everywhere[kind] if name not in shipped[kind]]
        print(f"  {kind:<7} {', '.join(shipped[kind]) or 'none'}"
              + (f"  (dropped, over the bound on a family left out: {', '.join(dropped)})" if dropped else ""))
    same = ({k: tuple(v) for k, v in shipped.items()}
            == {k: tuple(cascade.SURE.get(k, ())) for k in PROMPT_KINDS})
    print(f"  orbench.scoring.cascade.SURE {'equals them' if same else 'DIFFERS: ' + repr(cascade.SURE)}")
    print("\nthe shipped classes on every family (in-sample: the held-out figures are the folds' above)")
    final = decide(rows, member, shipped)
    summary(rate_table(rows, final, ""), final, rows, units, None, goal, budget)
    return shipped


def summary(table: list, verdicts: pd.Series, rows, units, folds, goal: float, budget: float) -> None:
    """The rate table (fold = the family of the row's model), then per family and over all rows
    the share judged and the largest difference, and whether the goal is met."""
    for r in table:
        if not r["fold"]:
            r["fold"] = rows.loc[rows["model"] == r["model"], "unit"].iloc[0]
    print_table(table)
    frame = pd.DataFrame(table)
    for unit in units:
        part = frame[frame["fold"] == unit]
        share = verdicts[rows["unit"] == unit].isna().mean()
        sure = ("" if folds is None else "  (sure: " + "; ".join(
            f"{k}: {', '.join(v) or 'none'}" for k, v in folds[unit].items()) + ")")
        print(f"  left out {unit:<10} judged {share:.3f}, largest |diff| {part['diff'].abs().max():.1f} "
              f"points{sure}")
    share, worst = verdicts.isna().mean(), frame["diff"].abs().max()
    met = worst <= goal + 1e-9 and share <= budget + 1e-9
    print(f"  all rows: judged {share:.3f}, largest |diff| {worst:.1f} points; goal (every |diff| <= "
          f"{goal} points, judged <= {budget:.0%}): {'met' if met else 'NOT met'}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("xstest_dir", nargs="?", help="folder with the xstest_v2_completions_*.csv files")
    ap.add_argument("--labels", help="a CSV of labelled responses instead (response, label, model, "
                                     "prompt_kind[, family])")
    ap.add_argument("--bound", type=float, default=cascade.ERROR_BOUND,
                    help="the largest error rate a sure class may have (default: %(default)s)")
    ap.add_argument("--confidence", type=float, default=cascade.CONFIDENCE,
                    help="one-sided confidence of the bound on a class's error rate (default: %(default)s)")
    ap.add_argument("--goal", type=float, default=1.5,
                    help="largest |cascade rate - humans' rate| in points, per model and kind (default: %(default)s)")
    ap.add_argument("--budget", type=float, default=0.40,
                    help="largest share of all rows sent to the judge (default: %(default)s)")
    args = ap.parse_args(argv)
    if bool(args.xstest_dir) == bool(args.labels):
        ap.error("give the XSTest folder or --labels CSV (one of them)")
    if not 0 < args.bound < 1 or not 0.5 <= args.confidence < 1:
        ap.error("--bound must be in (0, 1) and --confidence in [0.5, 1)")
    try:
        rows = read_labels(Path(args.labels)) if args.labels else read_xstest(Path(args.xstest_dir))
        run(rows, args.bound, args.confidence, args.goal, args.budget)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
