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
import os
from pathlib import Path

from orbench.llm.models import slug
from orbench.scoring.vocab import KEYWORD

#: Bumped when a card's layout changes; a reader skips cards of another version.
CARD_VERSION = 1
#: The identity fields, in the order they are hashed.
IDENTITY_FIELDS = ("judge", "template", "rules", "cascade", "matcher", "temperature", "max_tokens")
#: The note the report shows beside a rate whose judge has no card.
NEVER_CALIBRATED = "judge never calibrated against human labels (orbench-calibrate)"


def judge_identity(settings: dict, *, stage: str = "check_response", model: str | None = None) -> dict:
    """The identity of the judge behind a meta file's ``settings`` (module docstring).

    ``stage`` ``check_alignment`` (stage 4) is the keyword matcher: its ``matcher`` counts as forced
    only when it differs from the family of the tested ``model``.
    """
    from orbench.scoring.refusal import family_for_model

    settings = settings or {}
    if stage == "check_alignment":
        matcher = settings.get("matcher")
        forced = matcher if matcher and model and matcher != family_for_model(model) else None
        return {"judge": KEYWORD, "template": None, "rules": settings.get("rules"), "cascade": None,
                "matcher": forced, "temperature": None, "max_tokens": None}
    keyword = str(settings.get("judge") or "") == KEYWORD
    return {"judge": settings.get("judge"), "template": settings.get("template"),
            "rules": settings.get("rules"), "cascade": settings.get("cascade"),
            "matcher": settings.get("matcher"),
            "temperature": None if keyword else settings.get("temperature"),
            "max_tokens": None if keyword else settings.get("max_tokens")}


def judge_fingerprint(identity: dict) -> str:
    """A short hash of a judge's identity (:func:`judge_identity`)."""
    data = json.dumps([identity.get(k) for k in IDENTITY_FIELDS], sort_keys=True, default=str)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()[:16]


def meta_fingerprint(meta: dict | None) -> str | None:
    """The judge fingerprint of a stage-4 or stage-5 meta file (its own field, else computed from
    its settings), or None when the meta file says nothing about a judge."""
    if not isinstance(meta, dict):
        return None
    if meta.get("judge_fingerprint"):
        return str(meta["judge_fingerprint"])
    settings = meta.get("settings") if isinstance(meta.get("settings"), dict) else None
    stage = str(meta.get("stage") or "")
    if settings is None or stage not in ("check_response", "check_alignment"):
        return None
    return judge_fingerprint(judge_identity(settings, stage=stage, model=settings.get("model")))


def cards_dir() -> Path:
    """Where cards are kept: ``judge_cards/`` in the cache folder (``$ORBENCH_CACHE_DIR`` or
    ``~/.cache/orbench``)."""
    from orbench.llm.cache import default_cache_path

    return default_cache_path().parent / "judge_cards"


def card_path(fingerprint: str, source: str, folder: Path | None = None) -> Path:
    """The file of the card of judge ``fingerprint`` on label source ``source``."""
    return (folder or cards_dir()) / fingerprint / f"{slug(source)}.json"


def _read(path: Path) -> dict | None:
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(card, dict) or card.get("card_version") != CARD_VERSION:
        return None
    return card


def find_cards(fingerprint: str | None, folder: Path | None = None) -> list[dict]:
    """Every card of the judge ``fingerprint``, the most labelled rows first."""
    if not fingerprint:
        return []
    found = [_read(p) for p in sorted(((folder or cards_dir()) / str(fingerprint)).glob("*.json"))]
    cards = [c for c in found if c and c.get("judge_fingerprint") == fingerprint]
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


def save_card(card: dict, beside: Path, folder: Path | None = None) -> Path | None:
    """Write ``card`` to ``beside`` and into the card store (``folder``, default :func:`cards_dir`);
    returns the store's path, or None when the store keeps a card of this judge on more labelled
    rows of the same source (a ``--limit`` trial leaves a full calibration's card alone)."""
    text = json.dumps(card, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n"
    _write(beside, text)
    path = card_path(card["judge_fingerprint"], card["labels"]["name"], folder)
    old = _read(path)
    if old is not None and int((old.get("pooled") or {}).get("n") or 0) > int(card["pooled"].get("n") or 0):
        return None
    _write(path, text)
    return path


def _points(value, low, high) -> str:
    if value is None:
        return "n/a"
    digits = 2 if low is not None and f"{100 * low:+.1f}" == f"{100 * high:+.1f}" and low != high else 1
    text = f"{100 * value:+.{digits}f} points"
    return text + (f" [{100 * low:+.{digits}f}, {100 * high:+.{digits}f}]" if low is not None else "")


def card_text(card: dict) -> str:
    """The one line the report shows for a card (kappa, rate bias, the label source, n)."""
    pooled = card.get("pooled") or {}
    counts = card.get("counts") or {}
    name, n = card["labels"]["name"], int(pooled.get("n") or 0)
    if not n:
        return (f"judge vs humans: no verdict on any of {counts.get('rows', 0)} labelled responses "
                f"({counts.get('unparsed', 0)} unparsed, {counts.get('judge_refused', 0)} refused to "
                f"judge), {name}")
    kappa = pooled.get("kappa") or {}
    bias = pooled.get("rate_bias") or {}
    k = kappa.get("value")
    ci = kappa.get("ci") or [None, None]
    # two decimals, three where two would show an interval of width 0 ([1.00, 1.00])
    digits = 3 if ci[0] is not None and f"{ci[0]:.2f}" == f"{ci[1]:.2f}" and ci[0] != ci[1] else 2
    kappa_text = "n/a" if k is None else (f"{k:.{digits}f}" + (f" [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"
                                                                 if ci[0] is not None else ""))
    bias_ci = bias.get("ci") or [None, None]
    text = (f"judge vs humans: kappa {kappa_text}, rate bias {_points(bias.get('value'), *bias_ci)}, "
            f"{name} (n={n:,}")
    missing = int(counts.get("unparsed", 0)) + int(counts.get("judge_refused", 0))
    if missing:
        text += f", {missing} without a verdict"
    tiers = (card.get("cascade") or {}).get("verdict_sources") or {}
    if tiers:
        text += "; cascade: " + ", ".join(f"{v:,} by {k}" for k, v in tiers.items())
    return text + ")"
