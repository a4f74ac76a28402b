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

The moderator cards (:func:`annotate_moderation`): where an input's meta chain shows its prompts
came from a release subset (``orbench-release``: stage 3's verdicts decided which prompts are in
it; its ``manifest.json`` names the moderation's fingerprint) or from a stage-3 output, the card
of that moderation (``orbench-calibrate --moderator_model``, found by its fingerprint in the card
store; else the card the release carries) is shown beside the rate as ``moderator_calibration``
("prompts chosen by stage 3: ...: moderator vs humans: coverage ..., sensitivity for unsafe ...,
specificity ..., kappa ..."), or :data:`orbench.scoring.moderator_cards.NEVER_CALIBRATED`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from orbench.analysis.report.inputs import ORIGIN_RANK, Inputs, group_ids
from orbench.run.tables import row_dicts
from orbench.scoring.judge_cards import (
    NEVER_CALIBRATED,
    cards_text,
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
            texts.append(cards_text(cards))
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
    for row in row_dicts(summary):
        for method in (KEYWORD, JUDGE):
            has = not pd.isna(row.get(f"{method}_rows", np.nan))
            judge = row["judge"] if method == JUDGE else ""
            fps = groups.get((row["set"], row["model"], method, judge), set()) if has else set()
            text, used = calibration_text(fps, judge or KEYWORD)
            cards.update({c["judge_fingerprint"] + "/" + c["labels"]["name"]: c for c in used})
            columns[f"{method}_fingerprint"].append(";".join(sorted(str(f) for f in fps if f)))
            columns[f"{method}_calibration"].append(text)
    out = summary.assign(**columns)
    never = sorted({(r["judge"] if m == JUDGE else KEYWORD) for r in row_dicts(out)
                    for m in (KEYWORD, JUDGE) if r[f"{m}_calibration"].startswith(NEVER_CALIBRATED)})
    notes = [f"Never calibrated against human labels: {', '.join(never)} (orbench-calibrate --check_model "
             f"JUDGE writes the judge card the report then shows beside its rates)"] if never else []
    return out, cards, notes


# ---------------------------------------------------------------- the moderator cards

def release_subset(path: str) -> dict | None:
    """The release manifest (``orbench-release``'s ``manifest.json``) that lists ``path`` as one of
    its subset files with the very bytes it has now, with ``subset`` set to the subset's name; else None."""
    import json

    from orbench.run.provenance import sha256_file

    manifest_path = Path(path).parent / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    subsets = manifest.get("subsets") if isinstance(manifest, dict) else None
    for name, entry in (subsets or {}).items():
        if isinstance(entry, dict) and entry.get("file") == Path(path).name and entry.get("sha256") == sha256_file(path):
            return {**manifest, "subset": name, "manifest": str(manifest_path)}
    return None


def moderation_of(entry: dict) -> dict | None:
    """The stage-3 moderation behind one report input's prompts: ``{"how", "fingerprints", "card"}``
    when its meta chain reaches a release subset (the moderation decided which prompts are in it)
    or a stage-3 output (its prompts were moderated); None when neither is recorded."""
    from orbench.analysis.report.lineage import _find_input
    from orbench.scoring.moderator_cards import meta_fingerprint as moderation_fingerprint

    chain = (entry.get("lineage") or {}).get("chain") or []
    for link in chain:
        if link["changed"]:
            return None  # its meta file describes another run
        meta = link["meta"]
        if meta.get("stage") == "moderate":
            fp = moderation_fingerprint(meta)
            return {"how": f"prompts moderated by stage 3 ({Path(link['file']).name})",
                    "fingerprints": [fp] if fp else [], "card": None}
        source = _find_input(meta, link["file"])
        release = release_subset(source) if source else None
        if release:
            return {"how": f"prompts chosen by stage 3: the {release['subset']} subset of the release "
                           f"{Path(release['manifest']).parent.name}",
                    "fingerprints": list(release.get("moderator_fingerprints") or []),
                    "card": release.get("moderator_card")}
    return None


def _release_card_text(card: dict) -> str:
    """A line for the moderator card a release manifest carries (``orbench-release``'s reading of it)."""
    from orbench.scoring.moderator_cards import figure_text

    shown = ", ".join(f"{f} {figure_text(card.get(f))}" for f in ("coverage", "sensitivity", "specificity", "kappa"))
    valid = "" if card.get("valid") is not False else " NOT VALID (the 95% lower limit of the coverage is under 0.90);"
    labels = (card.get("labels") or {}).get("name") or "labels not named"
    return f"moderator vs humans (the release's card {card.get('file')}):{valid} {shown}, {labels}"


def moderation_text(found: dict) -> tuple[str, list[dict]]:
    """The line shown for the moderation behind a rate's prompts, and the cards behind it."""
    from orbench.scoring.moderator_cards import NEVER_CALIBRATED as NEVER
    from orbench.scoring.moderator_cards import card_text as moderator_card_text
    from orbench.scoring.moderator_cards import find_cards as find_moderator_cards

    texts, used = [], []
    for fp in found["fingerprints"]:
        cards = find_moderator_cards(fp)
        used.extend(cards)
        if cards:
            texts.append(cards_text(cards, moderator_card_text))
    if not texts and found.get("card"):
        texts.append(_release_card_text(found["card"]))
    return f"{found['how']}: " + ("; ".join(texts) if texts else NEVER), used


def annotate_moderation(summary: pd.DataFrame, inp: Inputs) -> tuple[pd.DataFrame, dict, list[str]]:
    """The summary with ``moderator_fingerprint`` and ``moderator_calibration`` (empty where no
    stage-3 moderation is recorded behind the prompts), the moderator cards used and notes."""
    from orbench.scoring.moderator_cards import NEVER_CALIBRATED as NEVER

    found = {}
    for entry in inp.provenance:
        moderation = moderation_of(entry)
        if moderation:
            for model in entry.get("models") or []:
                found.setdefault((entry["set"], model), []).append(moderation)
    cards: dict = {}
    fps, texts = [], []
    for row in row_dicts(summary):
        moderations = found.get((row["set"], row["model"]), [])
        lines = []
        for m in moderations:
            text, used = moderation_text(m)
            cards.update({c["moderator_fingerprint"] + "/" + c["labels"]["name"]: c for c in used})
            lines.append(text)
        fps.append(";".join(sorted({fp for m in moderations for fp in m["fingerprints"]})))
        texts.append(" || ".join(dict.fromkeys(lines)))
    out = summary.assign(moderator_fingerprint=fps, moderator_calibration=texts)
    never = sorted({r["set"] for r in row_dicts(out) if r["moderator_calibration"].endswith(NEVER)})
    notes = [f"The stage-3 moderation that chose the prompts of {', '.join(never)} was never calibrated against "
             f"human labels (orbench-calibrate --moderator_model writes the moderator card the report then "
             f"shows)"] if never else []
    return out, cards, notes
