"""What a release card says about how valid its prompts are: the moderator card and the audit.

**The moderator card** (``--moderator_card FILE``): stage 3's agreement with human prompt-safety
labels, as a small JSON object::

    {"moderators": ["openai/gpt-4-turbo-2024-04-09", "together/meta-llama/Llama-3-70b-chat-hf"],
     "labels": {"name": "xstest", "n": 450},
     "coverage":    {"value": 0.98, "ci": [0.96, 0.99]},
     "sensitivity": {"value": 0.91, "ci": [0.86, 0.94]},
     "specificity": {"value": 0.88, "ci": [0.83, 0.92]},
     "kappa":       {"value": 0.79, "ci": [0.73, 0.85]}}

The four figures are required, at the top level or under ``pooled`` (where a judge card keeps
them). Each is ``{"value", "ci": [low, high]}`` or a bare number (no interval); a null value is
a figure that could not be computed (shown ``n/a``). Coverage, sensitivity and specificity
(for "unsafe") are shares in [0, 1], kappa in [-1, 1], and an interval holds its value.
``moderators`` (optional; a list or a comma-separated string, names as typed or as resolved)
must name exactly the moderators of every stage-3 run the meta files record, so a card never
stands beside a moderation it did not measure; ``labels`` (optional; a name or ``{"name",
"n"}``) says which human labels it was measured on. The card ``orbench-calibrate
--moderator_model`` writes (``moderator_card_<labels>.json``) is such a file as it is; its
``moderator_fingerprint`` (what decides a verdict: the moderators as resolved, the template's
hash, the ensemble rule, the column, temperature and max tokens) must then also be the one of
every stage-3 meta file that records one, so the same models with another template are another
moderation. A card whose coverage's 95% lower limit is under 0.90 (or that gives neither the
coverage's interval nor the number of labelled prompts) is marked NOT VALID. Any other key is kept out of the card.

Without ``--moderator_card``, the card store (``orbench-calibrate`` keeps every moderator card in
the cache folder by fingerprint) is asked for the card of the moderation behind the moderated
files, when their stage-3 meta files all record one and the same moderation
(:func:`stored_moderator_card`), the card on the most labelled prompts first.

**The audit** (``--audit DIR``): an ``orbench-audit`` prompt audit (``sample --kind prompt``,
annotators' labels in the folder), scored as ``orbench-audit score`` scores it. Its estimate of
the share of prompts the human majority calls ``safe`` (weighted back by stratum, stratified
Wilson interval, docs/statistics.md) is given for every subset that one of its sets was drawn
from: every audited prompt of the set is in the subset's file and the set's rows number the
subset's rows (the audit was drawn from that file, not from another build or another file).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from orbench.analysis.calibration.card_stats import proportion_ci
from orbench.llm.errors import UsageError
from orbench.scoring.judge_cards import coverage_valid
from orbench.scoring.moderator_cards import card_path, find_cards, meta_fingerprint

FIGURES = ("coverage", "sensitivity", "specificity", "kappa")
#: Each figure's range: kappa may be negative (worse than chance).
RANGES = {"coverage": (0.0, 1.0), "sensitivity": (0.0, 1.0), "specificity": (0.0, 1.0), "kappa": (-1.0, 1.0)}


def _number(value, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UsageError(f"{where}: expected a number or null, got {json.dumps(value)}")
    return float(value)


def _figure(raw, name: str, path: str) -> dict:
    """One figure as ``{"value", "ci"}`` (``ci`` None without an interval), checked."""
    where = f"--moderator_card {path}: {name}"
    if isinstance(raw, dict):
        if "value" not in raw:
            raise UsageError(f"{where} has no 'value'")
        value, ci = _number(raw["value"], where), raw.get("ci")
        if ci is not None:
            if not isinstance(ci, list) or len(ci) != 2:
                raise UsageError(f"{where}: 'ci' must be [low, high], got {json.dumps(ci)}")
            ci = [_number(ci[0], where + " ci"), _number(ci[1], where + " ci")]
    else:
        value, ci = _number(raw, where), None
    low, high = RANGES[name]
    for v in [value] + (ci or []):
        if v is not None and not low <= v <= high:
            raise UsageError(f"{where}: {v} is outside [{low:g}, {high:g}]")
    if ci is not None and None in ci:  # an interval with an open end is no interval
        ci = None
    if ci is not None and value is not None and not ci[0] <= value <= ci[1]:
        raise UsageError(f"{where}: its interval [{ci[0]}, {ci[1]}] does not hold its value {value}")
    return {"value": value, "ci": ci}


def read_moderator_card(path: str) -> dict:
    """The moderator card at ``path`` (module docstring) as ``{"file", "moderators", "labels",
    "fingerprint", "valid", <figure>: {"value", "ci"}}``; ``UsageError`` naming the file and the key
    on anything else."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"--moderator_card {path}: cannot read it ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise UsageError(f"--moderator_card {path} is not valid JSON: {exc}") from None
    return parse_moderator_card(raw, path)


def parse_moderator_card(raw, path: str) -> dict:
    """A moderator card's JSON object, read and checked (:func:`read_moderator_card`)."""
    if not isinstance(raw, dict):
        raise UsageError(f"--moderator_card {path}: expected a JSON object with {', '.join(FIGURES)}")
    source = raw["pooled"] if isinstance(raw.get("pooled"), dict) else raw
    missing = [f for f in FIGURES if f not in source]
    if missing:
        raise UsageError(f"--moderator_card {path}: no {', '.join(missing)} (a moderator card gives "
                         f"{', '.join(FIGURES)}; see orbench-release --help)")
    names = raw.get("moderators")
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) and n for n in names)):
        raise UsageError(f"--moderator_card {path}: 'moderators' must be a list of model names")
    labels = raw.get("labels")
    if isinstance(labels, str):
        labels = {"name": labels}
    if labels is not None and not (isinstance(labels, dict) and isinstance(labels.get("name"), str)):
        raise UsageError(f"--moderator_card {path}: 'labels' must be a name or {{\"name\": ..., \"n\": ...}}")
    fingerprint = raw.get("moderator_fingerprint")
    if fingerprint is not None and not (isinstance(fingerprint, str) and fingerprint):
        raise UsageError(f"--moderator_card {path}: 'moderator_fingerprint' must be a string")
    card = {"file": Path(path).name, "moderators": names, "fingerprint": fingerprint,
            "labels": None if labels is None else {"name": labels["name"], "n": labels.get("n")}}
    card.update({f: _figure(source[f], f, path) for f in FIGURES})
    coverage, ci = card["coverage"]["value"], card["coverage"]["ci"]
    n = (card["labels"] or {}).get("n")
    if ci is None and coverage is not None and isinstance(n, int) and n > 0:  # the Wilson limit from the count
        ci = list(proportion_ci(round(coverage * n), n))
    card["valid"] = ci is not None and coverage_valid(ci[0])
    return card


def moderation_fingerprints(paths: list[str]) -> dict:
    """The moderator fingerprint of each moderated file's own stage-3 meta file: ``{fingerprint:
    [file names]}``, files whose meta file records none under None."""
    from orbench.analysis.report.lineage import read_meta
    from orbench.run.tables import file_name

    found: dict = {}
    for path in paths:
        found.setdefault(meta_fingerprint(read_meta(path)), []).append(file_name(path))
    return found


def stored_moderator_card(paths: list[str]) -> dict | None:
    """The card store's card of the one moderation behind every moderated file (module
    docstring), read as :func:`read_moderator_card` reads a file, or None."""
    found = moderation_fingerprints(paths)
    if None in found or len(found) != 1:
        return None
    (fingerprint,) = found
    for card in find_cards(fingerprint):
        path = str(card_path(fingerprint, card["labels"]))
        parsed = parse_moderator_card(card, path)
        parsed["note"] = (f"found in the card store by the moderation's fingerprint {fingerprint} "
                          f"(orbench-calibrate --moderator_model)")
        return parsed
    return None


def check_card_matches(card: dict, runs: list[dict], path: str, fingerprints: dict | None = None) -> str | None:
    """``UsageError`` when the card names moderators other than a recorded stage-3 run's, or (a card
    with a fingerprint) measured another moderation than a moderated file's meta file records
    (``fingerprints``: :func:`moderation_fingerprints`); a note for the card when it cannot be
    matched (no names, or no meta file says who moderated)."""
    other = {fp: files for fp, files in (fingerprints or {}).items() if fp and fp != card.get("fingerprint")}
    if card.get("fingerprint") and other:
        fp, files = next(iter(other.items()))
        raise UsageError(f"--moderator_card {path} measured the moderation {card['fingerprint']}, but {', '.join(files)} "
                         f"were moderated by {fp} (other moderators, template, column or settings): give the card "
                         f"of that moderation (orbench-calibrate --moderator_model with the same flags), or none")
    if card["moderators"] is None:
        return "the moderator card does not name its moderators, so it could not be matched to stage 3's"
    if not runs:
        return ("no meta file records stage 3's moderators, so the card could not be matched to them; it is "
                "shown as given")
    wanted = sorted(card["moderators"])
    for run in runs:
        names = [{m["resolved"], m["typed"]} - {""} for m in run["models"]]
        matched = len(names) == len(wanted) and all(sum(w in n for n in names) == 1 for w in wanted) and \
            all(any(w in n for w in wanted) for n in names)
        if not matched:
            made = ", ".join(m["resolved"] for m in run["models"])
            raise UsageError(f"--moderator_card {path} measured {', '.join(wanted)}, but {', '.join(run['files'])} "
                             f"were moderated by {made}: give the card of that moderation (or none)")
    return None


def audit_estimates(folder: str, subsets: dict[str, list[str]]) -> dict:
    """The prompt audit in ``folder``, scored: ``{"folder", "sample_id", "annotators", "subsets":
    {name: {"set", "share", "ci", "n", "count", "method", "flags", "labels"}}, "notes"}`` for each
    subset (``name -> its prompts``) one of the audit's sets was drawn from (module docstring)."""
    from orbench.analysis.audit import commands as audit  # the audit's statistics need its extra
    from orbench.analysis.audit.sample import PROMPT

    sample = audit.read_sample(folder)
    if sample.kind != PROMPT:
        raise UsageError(f"--audit {folder} is a {sample.kind} audit; the release card needs a prompt audit "
                         f"(orbench-audit sample --kind prompt on the release's subset files)")
    result = audit.load_and_score(folder)
    strata = audit._strata(sample)
    items = result["items"]
    notes = [f"audit {folder}: {n}" for n in result["notes"]]
    out: dict = {"folder": str(folder), "sample_id": result["sample_id"], "annotators": list(result["annotators"]),
                 "subsets": {}, "notes": notes}
    contents = {name: set(prompts) for name, prompts in subsets.items()}
    for set_name in sorted(set(items["set"])):
        audited = set(items.loc[items["set"] == set_name, "prompt"])
        rows = float(strata.loc[strata["set"] == set_name, "population"].sum())
        match = [name for name, prompts in contents.items()
                 if audited <= prompts and rows == len(subsets[name])]
        if not match:
            notes.append(f"audit {folder}: its set {set_name!r} ({int(rows)} rows) was not drawn from a subset "
                         f"of this release (its prompts and row count match no subset file); not used")
            continue
        shares = {s["label"]: s for s in result["shares"] if s["set"] == set_name}
        safe = shares.get("safe")
        for name in match:
            out["subsets"][name] = {
                "set": set_name, "share": None if safe is None else _finite(safe["share"]),
                "ci": None if safe is None else [_finite(c) for c in safe["ci"]],
                "n": 0 if safe is None else int(safe["n"]), "method": None if safe is None else safe["method"],
                "flags": [] if safe is None else list(safe["flags"]),
                "labels": {label: int(s["count"]) for label, s in sorted(shares.items())}}
    return out


def _finite(value) -> float | None:
    value = float(value)
    return round(value, 6) if math.isfinite(value) else None
