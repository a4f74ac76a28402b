"""Judge cards: what a verdict source is, and how far it agrees with people, kept where the report finds it.

A *judge* is whatever makes stage 5's (or stage 4's) verdicts: the keyword matcher, an LLM judge,
the cascade, an ensemble. What makes it is its *identity* (:func:`judge_identity`): the judge as
resolved (``settings.judge`` of a stage-5 meta file, ``keyword`` for stage 4), the SHA-256 of its
template, the keyword rules' fingerprint, the cascade's fingerprint, a forced keyword family, and
the judge's temperature and token limit. :func:`judge_fingerprint` hashes it; stage 5 writes it
into its meta file (``judge_fingerprint``) and ``orbench-calibrate`` keys its card by it, so a
card is only ever shown beside verdicts of the very judge it measured: the same model with
another template or other rules is another judge.

A *card* (``orbench-calibrate``) holds that judge's figures against human labels (accuracy,
Cohen's kappa, refusal precision and recall, the rate bias, each with a 95% interval, per source
model and pooled; the unparsed and refused-to-judge counts; for the cascade the rows each tier
decided). Cards are stored as JSON under :func:`cards_dir` (``<cache folder>/judge_cards/<fingerprint>/``,
one file per label source), and a copy beside the calibration's output. The report calls
:func:`find_cards` with the fingerprint from the meta file and :func:`card_text` for the line it
shows ("judge vs humans: kappa 0.87 [0.84, 0.90], rate bias +1.2 points [-0.3, +2.6], XSTest v2").
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

from orbench.llm.models import slug
from orbench.scoring.vocab import KEYWORD

#: Bumped when a card's layout changes; a reader skips cards of another version.
CARD_VERSION = 2
#: The identity fields, in the order they are hashed.
IDENTITY_FIELDS = ("judge", "template", "rules", "cascade", "matcher", "temperature", "max_tokens")
#: A card is valid when the 95% lower limit (Wilson's) of its coverage, the share of its rows with
#: a verdict, is at least this: the card then shows, at 95% confidence, that the judge is silent
#: on at most 10% of such rows. A point rule (95% of the rows) called 19 of 20 valid though its
#: interval reaches down to 0.76; the limit asks for the evidence. 0.90 and not 0.95: a judge
#: that answers 97% of 450 rows (lower limit 0.95) would fail a 0.95 limit, though past 5% is
#: where the report stops giving a rate, a figure of the run and not of the card.
VALID_COVERAGE = 0.90
#: The fewest rows a card can be valid on: Wilson's lower limit of n of n is n / (n + z^2), at
#: least 0.90 from n = 9 z^2 = 34.6 (z = 1.96): a judge with a verdict on every row needs 35.
MIN_VALID_ROWS = 35


def coverage_valid(low) -> bool:
    """Whether a card whose coverage has the 95% lower limit ``low`` is valid (:data:`VALID_COVERAGE`)."""
    return low is not None and not (isinstance(low, float) and math.isnan(low)) and low >= VALID_COVERAGE - 1e-12
#: The note the report shows beside a rate whose judge has no card.
NEVER_CALIBRATED = "judge never calibrated against human labels (orbench-calibrate)"


def judge_identity(settings: dict, *, stage: str = "check_response", model: str | None = None,
                   family: str | None = None) -> dict:
    """The identity of the judge behind a meta file's ``settings`` (module docstring).

    ``matcher`` is the keyword family whose rules decide verdicts, wherever they do: stage 4
    (``check_alignment``: its ``--matcher``, else the family of the tested ``model``), the keyword
    re-score and the cascade (``--matcher``, else ``family``, the family of the rows' model; None
    when that is not known: each row's model's family). An LLM judge's verdicts do not depend on
    the keyword rules' family (only ``keyword_is_rejected`` does): its ``matcher`` is None.
    """
    from orbench.scoring.refusal import family_for_model

    settings = settings or {}
    if stage == "check_alignment":
        matcher = settings.get("matcher") or (family_for_model(model) if model else family)
        return {"judge": KEYWORD, "template": None, "rules": settings.get("rules"), "cascade": None,
                "matcher": matcher, "temperature": None, "max_tokens": None}
    keyword = str(settings.get("judge") or "") == KEYWORD
    decides = keyword or bool(settings.get("cascade"))
    return {"judge": settings.get("judge"), "template": settings.get("template"),
            "rules": settings.get("rules"), "cascade": settings.get("cascade"),
            "matcher": (settings.get("matcher") or family) if decides else None,
            "temperature": None if keyword else settings.get("temperature"),
            "max_tokens": None if keyword else settings.get("max_tokens")}


def by_family(identity: dict) -> bool:
    """Whether the keyword rules' family decides this judge's verdicts (the keyword matcher, the cascade)."""
    return identity.get("judge") == KEYWORD or bool(identity.get("cascade"))


def judge_fingerprint(identity: dict) -> str:
    """A short hash of a judge's identity (:func:`judge_identity`)."""
    data = json.dumps([identity.get(k) for k in IDENTITY_FIELDS], sort_keys=True, default=str)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()[:16]


def meta_fingerprint(meta: dict | None, model: str | None = None) -> str | None:
    """The judge fingerprint of a stage-4 or stage-5 meta file, or None when the meta file says
    nothing about a judge. Computed from its settings (stage 5's own ``judge_fingerprint`` leaves
    the family of a keyword re-score or a cascade open when no ``--matcher`` was given: ``model``,
    the tested model the verdicts are about, names it); a meta file without settings (an inspect
    log's) gives its own field."""
    from orbench.scoring.refusal import family_for_model

    if not isinstance(meta, dict):
        return None
    settings = meta.get("settings") if isinstance(meta.get("settings"), dict) else None
    stage = str(meta.get("stage") or "")
    if settings is not None and stage in ("check_response", "check_alignment"):
        model = settings.get("model") or model
        family = family_for_model(model) if model else None
        return judge_fingerprint(judge_identity(settings, stage=stage, model=model, family=family))
    if meta.get("judge_fingerprint"):
        return str(meta["judge_fingerprint"])
    return None


def cards_dir() -> Path:
    """Where cards are kept: ``judge_cards/`` in the cache folder (``$ORBENCH_CACHE_DIR`` or
    ``~/.cache/orbench``)."""
    from orbench.llm.cache import default_cache_path

    return default_cache_path().parent / "judge_cards"


def card_path(fingerprint: str, source: str | dict, folder: Path | None = None) -> Path:
    """The file of the card of judge ``fingerprint`` on label source ``source`` (its name, or the
    card's ``labels`` record: :func:`store_name`)."""
    name = store_name(source) if isinstance(source, dict) else slug(source)
    return (folder or cards_dir()) / fingerprint / f"{name}.json"


#: Label sources that are a place of the user's (a CSV, an audit folder), not a named data set.
FILE_SOURCES = ("csv", "audit")


def store_name(labels: dict) -> str:
    """The card store's name of a label source: its name (``XSTest v2``), and for a label file or
    audit folder of the user's, a short hash of where it is too. Premise: two label files of one
    name in different folders are two sources (a card on one must not replace the other's); the
    same file calibrated again is the same source, whose card the newer calibration replaces."""
    name = slug(str(labels.get("name") or "labels"))
    origin = labels.get("origin")
    if labels.get("kind") not in FILE_SOURCES or not origin or "://" in str(origin):
        return name
    where = str(Path(str(origin)).resolve())
    return f"{name}_{hashlib.sha256(where.encode('utf-8')).hexdigest()[:8]}"


def _read(path: Path) -> dict | None:
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(card, dict) or card.get("card_version") != CARD_VERSION:
        return None
    return card


def bundled_dir() -> Path:
    """The cards shipped with the package (``orbench/data/judge_cards/``): the keyword matcher's
    own XSTest cards, one per family (``bench/bundle_matcher_card.py`` writes them)."""
    return Path(__file__).resolve().parents[1] / "data" / "judge_cards"


def find_cards(fingerprint: str | None, folder: Path | None = None) -> list[dict]:
    """Every card of the judge ``fingerprint``, the most labelled rows first: the card store's,
    then (without ``folder``) the bundled ones of a label source the store has no card of."""
    if not fingerprint:
        return []
    roots = [folder] if folder is not None else [cards_dir(), bundled_dir()]
    cards, sources = [], set()
    for root in roots:
        found = [_read(p) for p in sorted((root / str(fingerprint)).glob("*.json"))]
        for card in found:
            if card and card.get("judge_fingerprint") == fingerprint and card["labels"]["name"] not in sources:
                cards.append(card)
        sources |= {c["labels"]["name"] for c in cards}
    return sorted(cards, key=lambda c: -int((c.get("pooled") or {}).get("n") or 0))


def other_judges(judge_name: str, fingerprint: str | None, folder: Path | None = None) -> list[dict]:
    """Cards of judges with the same name as ``judge_name`` but another fingerprint (another
    template, rules or settings): shown as "another judge", never as this one's."""
    root = folder or cards_dir()
    if not judge_name or not root.is_dir():
        return []
    out = []
    for path in sorted(root.glob("*/*.json")):
        card = _read(path)
        if card and card.get("judge_name") == judge_name and card.get("judge_fingerprint") != fingerprint:
            out.append(card)
    return out


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def save_card(card: dict, beside: Path | None, folder: Path | None = None, *, store: bool = True) -> Path | None:
    """Write ``card`` to ``beside`` (unless None: an in-memory calibration) and, with ``store``, into
    the card store (``folder``, default :func:`cards_dir`, under :func:`store_name`); returns the
    store's path, or None when not stored: ``store`` off (``--no_store``), or the store keeps a card
    of this judge on more labelled rows of the same source (a ``--limit`` trial leaves a full
    calibration's card alone)."""
    text = json.dumps(card, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n"
    if beside is not None:
        _write(beside, text)
    if not store:
        return None
    path = card_path(card["judge_fingerprint"], card["labels"], folder)
    old = _read(path)
    if old is not None and int((old.get("pooled") or {}).get("n") or 0) > int(card["pooled"].get("n") or 0):
        return None
    _write(path, text)
    return path


def _n(card: dict) -> int:
    return int((card.get("pooled") or {}).get("n") or 0)


def cards_text(cards: list[dict], text=None) -> str:
    """The line for one judge's (or moderation's) cards: the card on the most labels first, then
    each card on fewer labels named a trial beside it. Premise: the card on more labels is the
    narrower measurement of the same judge; a card on a handful of hand-made labels (a first try,
    a ``--limit`` sample) must never stand in its place, nor look like its equal. ``text``: the
    line of one card (default :func:`card_text`)."""
    text = text or card_text
    ordered = sorted(cards, key=lambda c: -_n(c))
    if not ordered:
        return ""
    first = ordered[0]
    parts = [text(first)]
    for card in ordered[1:]:
        if _n(card) < _n(first):
            parts.append(f"trial card on {_n(card):,} labels, beside the card above on {_n(first):,} "
                         f"({first['labels']['name']}): {text(card)}")
        else:
            parts.append(text(card))
    return " | ".join(parts)


def _points(value, low, high) -> str:
    if value is None:
        return "n/a"
    digits = 2 if low is not None and f"{100 * low:+.1f}" == f"{100 * high:+.1f}" and low != high else 1
    text = f"{100 * value:+.{digits}f} points"
    return text + (f" [{100 * low:+.{digits}f}, {100 * high:+.{digits}f}]" if low is not None else "")


def _share(fig: dict) -> str:
    value = (fig or {}).get("value")
    return "n/a" if value is None else f"{value:.2f}"


def coverage_text(pooled: dict, unit: str = "row") -> str:
    """'coverage 33 of 50 rows (66%): NOT VALID (...)' : a card's first figure (a moderator card's
    ``unit`` is the prompt)."""
    n, decided = int(pooled.get("n") or 0), int(pooled.get("verdicts") or 0)
    text = f"coverage {decided:,} of {n:,} {unit}s" + (f" ({100 * decided / n:.0f}%)" if n else "")
    cov = pooled.get("coverage") or {}
    if cov.get("valid"):
        return text
    if not decided:
        return text + f": NOT VALID (no verdict on any {unit})"
    low = (cov.get("ci") or [None])[0]
    why = (f"the 95% lower limit of the coverage is {low:.3f}, under {VALID_COVERAGE:.2f}" if low is not None
           else "no coverage interval")
    if n < MIN_VALID_ROWS:
        why += (f"; a card of fewer than {MIN_VALID_ROWS} {unit}s cannot be valid: even a verdict on every "
                f"one leaves that limit under {VALID_COVERAGE:.2f}")
    return text + f": NOT VALID ({why}; each {unit} without one counts as a disagreement below)"


def card_text(card: dict) -> str:
    """The one line the report shows for a card: its coverage first (NOT VALID where its 95% lower limit
    is under 0.90), kappa
    with the agreement on each class, the rate bias, the label source and n."""
    pooled = card.get("pooled") or {}
    counts = card.get("counts") or {}
    name, n = card["labels"]["name"], int(pooled.get("n") or 0)
    family = f"keyword family {card['family']}, " if card.get("family") else ""
    if not int(pooled.get("verdicts") or 0):
        return (f"judge vs humans: {coverage_text(pooled)}: no verdict on any of {counts.get('rows', n)} labelled "
                f"responses ({counts.get('unparsed', 0)} unparsed, {counts.get('judge_refused', 0)} refused to "
                f"judge, {counts.get('errors', 0)} errors), {family}{name}")
    kappa = pooled.get("kappa") or {}
    bias = pooled.get("rate_bias") or {}
    k = kappa.get("value")
    ci = kappa.get("ci") or [None, None]
    # two decimals, three where two would show an interval of width 0 ([1.00, 1.00])
    digits = 3 if ci[0] is not None and f"{ci[0]:.2f}" == f"{ci[1]:.2f}" and ci[0] != ci[1] else 2
    kappa_text = "n/a" if k is None else (f"{k:.{digits}f}" + (f" [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"
                                                                 if ci[0] is not None else ""))
    prevalence = " (a class is rare: read the agreement on each class)" if "prevalence" in (kappa.get("note") or "") else ""
    bias_ci = bias.get("ci") or [None, None]
    over = "" if pooled.get("verdicts") == n else f" over the {int(pooled['verdicts']):,} rows with a verdict"
    text = (f"judge vs humans: {coverage_text(pooled)}; kappa {kappa_text}{prevalence}, refusals agreed "
            f"{_share(pooled.get('recall'))}, answers agreed {_share(pooled.get('specificity'))}; rate bias "
            f"{_points(bias.get('value'), *bias_ci)}{over}, {family}{name} (n={n:,}")
    missing = int(counts.get("unparsed", 0)) + int(counts.get("judge_refused", 0)) + int(counts.get("undecided", 0))
    if missing:
        text += f", {missing} without a verdict"
    tiers = (card.get("cascade") or {}).get("tiers") or {}
    if tiers:
        text += "; cascade: " + ", ".join(
            f"{t['rows']:,} by {k}" + ("" if t.get("verdicts", t["rows"]) == t["rows"] else
                                         f" ({t.get('verdicts', 0):,} with a verdict)") for k, t in tiers.items())
    return text + ")"
