"""The report's judge cards: beside every rate, how far the judge that made it agrees with people.

For each group of verdicts the report counts (set, model, keyword or judge verdicts), the judge
fingerprint of every input file that gave them is read from the file's meta file
(:func:`orbench.scoring.judge_cards.meta_fingerprint`: stage 5's ``judge_fingerprint``, or the keyword
matcher's identity for stage-4 files and for the keyword verdicts a judge file carries, with the
family of rules that decided them: ``--matcher``, else the family of the model, as named in the
report). The
cards of that fingerprint (``orbench-calibrate``, kept in the cache folder) give the line shown
beside the rate: "judge vs humans: kappa 0.87 [0.84, 0.90], rate bias +1.2 points [...], XSTest v2
(n=2,250)". A judge with no card gets :data:`~orbench.scoring.judge_cards.NEVER_CALIBRATED`; a card of a
judge with the same name and another fingerprint (another template, rules or settings) is never
shown as this judge's, only mentioned as another judge's.

:func:`annotate` adds ``keyword_fingerprint``, ``keyword_calibration``, ``judge_fingerprint`` and
``judge_calibration`` to the summary and returns the cards it used (for ``report.json``) and notes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from orbench.analysis.report.inputs import ORIGIN_RANK, Inputs, group_ids
from orbench.scoring.judge_cards import (
    NEVER_CALIBRATED,
    card_text,
    find_cards,
    judge_fingerprint,
    judge_identity,
    meta_fingerprint,
    other_judges,
)
from orbench.scoring.vocab import JUDGE, KEYWORD

NO_META = "judge unknown (no meta file beside the input): no card can be matched"


def _keyword_copy_fingerprint(meta: dict | None, model: str) -> str | None:
    """The keyword matcher behind the ``keyword_is_rejected`` a stage-5 judge file carries: its
    ``--matcher``, else the family of the tested ``model``."""
    from orbench.scoring.refusal import family_for_model

    if (meta or {}).get("keyword_fingerprint"):  # an inspect log's, recorded by orbench-inspect-to-csv
        return str(meta["keyword_fingerprint"])
    settings = (meta or {}).get("settings")
    if not isinstance(settings, dict):
        return None
    return judge_fingerprint(judge_identity({"judge": KEYWORD, "rules": settings.get("rules"),
                                             "matcher": settings.get("matcher")}, family=family_for_model(model)))


def group_fingerprints(inp: Inputs) -> dict[tuple[str, str, str, str], set]:
    """(set, model, method, judge) -> the judge fingerprints of the files that gave its verdicts
    (None for a file without a meta file)."""
    data = inp.data
    if data.empty:
        return {}
    _, combos = group_ids(data, ["group", "file", "origin"])  # the group's codes are inp.groups' row
    combos = pd.concat([inp.groups.iloc[combos["group"].to_numpy()].reset_index(drop=True),
                        combos[["file", "origin"]]], axis=1)
    names = {k: inp.codes[k].names for k in ("set", "model", "method", "judge")}
    out: dict = {}
    for s, m, meth, j, f, origin in combos[["set", "model", "method", "judge", "file", "origin"]].to_numpy():
        meta = inp.provenance[int(f)].get("meta")
        method = names["method"][meth]
        model = names["model"][m]
        own = inp.provenance[int(f)].get("column_models") or []
        if model not in own and len(own) == 1:  # renamed with MODEL=: the rows' own model chose the rules
            model = own[0]
        if method == KEYWORD and int(origin) == ORIGIN_RANK["judge"]:
            fp = _keyword_copy_fingerprint(meta, model)
        else:
            fp = meta_fingerprint(meta, model)
        key = (names["set"][s], names["model"][m], method, names["judge"][j] if method == JUDGE else "")
        out.setdefault(key, set()).add(fp)
    return out


def calibration_text(fingerprints: set, judge_name: str) -> tuple[str, list[dict]]:
    """The line for a rate whose verdicts come from ``fingerprints``, and the cards behind it."""
    if not fingerprints:
        return "", []
    texts, used = [], []
    for fp in sorted(fingerprints, key=str):
        if fp is None:
            texts.append(NO_META)
            continue
        cards = find_cards(fp)
        if cards:
            used.extend(cards)
            texts.append(" | ".join(card_text(c) for c in cards))
            continue
        others = other_judges(judge_name, fp)
        texts.append(NEVER_CALIBRATED + (f"; {len(others)} card(s) of another judge named {judge_name} "
                                         f"(other template, rules or settings) not shown" if others else ""))
    if len(texts) > 1:
        return f"verdicts from {len(texts)} judge versions: " + "; ".join(texts), used
    return texts[0], used


def annotate(summary: pd.DataFrame, inp: Inputs) -> tuple[pd.DataFrame, dict, list[str]]:
    """The summary with the calibration columns, the cards used (by fingerprint) and notes."""
    groups = group_fingerprints(inp)
    cards: dict = {}
    columns = {f"{m}_{c}": [] for m in (KEYWORD, JUDGE) for c in ("fingerprint", "calibration")}
    for row in summary.to_dict("records"):
        for method in (KEYWORD, JUDGE):
            has = not pd.isna(row.get(f"{method}_rows", np.nan))
            judge = row["judge"] if method == JUDGE else ""
            fps = groups.get((row["set"], row["model"], method, judge), set()) if has else set()
            text, used = calibration_text(fps, judge or KEYWORD)
            cards.update({c["judge_fingerprint"] + "/" + c["labels"]["name"]: c for c in used})
            columns[f"{method}_fingerprint"].append(";".join(sorted(str(f) for f in fps if f)))
            columns[f"{method}_calibration"].append(text)
    out = summary.assign(**columns)
    never = sorted({(r["judge"] if m == JUDGE else KEYWORD) for r in out.to_dict("records")
                    for m in (KEYWORD, JUDGE) if r[f"{m}_calibration"].startswith(NEVER_CALIBRATED)})
    notes = [f"Never calibrated against human labels: {', '.join(never)} (orbench-calibrate --check_model "
             f"JUDGE writes the judge card the report then shows beside its rates)"] if never else []
    return out, cards, notes
