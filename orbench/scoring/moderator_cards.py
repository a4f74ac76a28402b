"""Moderator cards: what a stage-3 moderation is, and how far it agrees with people on prompt safety.

A *moderation* is one moderator or an ensemble (:mod:`orbench.stages.moderate`). What decides its
verdict (``is_toxic``) is its *identity* (:func:`moderator_identity`): the moderators as resolved
(sorted: the ensemble's verdict does not depend on their order), the SHA-256 of the moderation
template, the ensemble rule (:data:`ENSEMBLE_RULE`), the column moderated (``prompt`` or
``response``), and the moderators' temperature and token limit. :func:`moderator_fingerprint`
hashes it; stage 3 writes it into its meta file (``moderator_fingerprint``) and ``orbench-calibrate
--moderator_model`` keys its card by it, so a card is only ever shown beside verdicts of the very
moderation it measured: the same models with another template, another column or another token
limit are another moderation.

A *card* holds that moderation's figures against human prompt-safety labels ("unsafe" the
positive class): coverage first (prompts given a verdict / all prompts; a 95% lower limit under
0.90 makes the card NOT VALID), then sensitivity and specificity for "unsafe" and Cohen's kappa over every prompt, a
prompt without a verdict counting as a disagreement, each with its 95% interval; per category
where the labels have one, per moderator for an ensemble. Cards are stored as JSON under
:func:`cards_dir` (``<cache folder>/moderator_cards/<fingerprint>/``, one file per label source)
and beside the calibration's output. The report and the release builder call :func:`find_cards`
with the fingerprint of the stage-3 meta file and show :func:`card_text`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from orbench.llm.models import slug
from orbench.scoring import judge_cards

#: Bumped when a card's layout changes; a reader skips cards of another version.
CARD_VERSION = 1
#: The ensemble rule of :func:`orbench.stages.moderate.ensemble`, named and versioned: safe when a
#: strict majority of ALL moderators says "none of the above", toxic when a strict majority names
#: a category, else no verdict (a provider block is a toxic vote). A change of the rule changes
#: this name, and so every fingerprint.
ENSEMBLE_RULE = "strict-majority-of-all/v1"
#: The identity fields, in the order they are hashed.
IDENTITY_FIELDS = ("moderators", "template", "rule", "column", "temperature", "max_tokens")
#: A card is valid when the 95% lower limit of its coverage is at least this (as a judge card).
VALID_COVERAGE = judge_cards.VALID_COVERAGE
#: The note shown where a moderation that decided a subset has no card.
NEVER_CALIBRATED = "moderator never calibrated against human labels (orbench-calibrate --moderator_model)"
#: The stage id stage 3 writes into its meta file.
STAGE = "moderate"


def moderator_identity(settings: dict) -> dict:
    """The identity of the moderation behind a stage-3 meta file's ``settings`` (module docstring)."""
    settings = settings or {}
    models = settings.get("moderators") or []
    if isinstance(models, str):
        models = [m.strip() for m in models.split(",") if m.strip()]
    return {"moderators": sorted(str(m) for m in models), "template": settings.get("template"),
            "rule": ENSEMBLE_RULE, "column": settings.get("column"),
            "temperature": settings.get("temperature"), "max_tokens": settings.get("max_tokens")}


def moderator_fingerprint(identity: dict) -> str:
    """A short hash of a moderation's identity (:func:`moderator_identity`)."""
    data = json.dumps([identity.get(k) for k in IDENTITY_FIELDS], sort_keys=True, default=str)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()[:16]


def meta_fingerprint(meta: dict | None) -> str | None:
    """The moderator fingerprint of a stage-3 meta file (computed from its settings, so files of
    earlier versions without the field have one too), or None for any other meta file."""
    if not isinstance(meta, dict) or meta.get("stage") != STAGE:
        return None
    settings = meta.get("settings")
    if isinstance(settings, dict) and settings.get("moderators"):
        return moderator_fingerprint(moderator_identity(settings))
    return str(meta["moderator_fingerprint"]) if meta.get("moderator_fingerprint") else None


def cards_dir() -> Path:
    """Where moderator cards are kept: ``moderator_cards/`` in the cache folder."""
    from orbench.llm.cache import default_cache_path

    return default_cache_path().parent / "moderator_cards"


def card_path(fingerprint: str, source: str | dict, folder: Path | None = None) -> Path:
    """The file of the card of moderation ``fingerprint`` on label source ``source`` (its name, or
    the card's ``labels`` record: ``judge_cards.store_name``)."""
    name = judge_cards.store_name(source) if isinstance(source, dict) else slug(source)
    return (folder or cards_dir()) / fingerprint / f"{name}.json"


def read_card(path: Path) -> dict | None:
    """The moderator card at ``path``, or None when it is not one of this version."""
    try:
        card = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(card, dict) or card.get("card") != "moderator" or card.get("card_version") != CARD_VERSION:
        return None
    return card


def find_cards(fingerprint: str | None, folder: Path | None = None) -> list[dict]:
    """Every card of the moderation ``fingerprint`` in the store, the most labelled prompts first."""
    if not fingerprint:
        return []
    found = [read_card(p) for p in sorted(((folder or cards_dir()) / str(fingerprint)).glob("*.json"))]
    cards = [c for c in found if c and c.get("moderator_fingerprint") == fingerprint]
    return sorted(cards, key=lambda c: -int((c.get("pooled") or {}).get("n") or 0))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def save_card(card: dict, beside: Path, folder: Path | None = None, *, store: bool = True) -> Path | None:
    """Write ``card`` to ``beside`` and, with ``store``, into the store (under the label source's
    ``judge_cards.store_name``: two label files of one name in different folders keep two cards);
    returns the store's path, or None when not stored: ``store`` off (``--no_store``), or the store
    keeps a card of this moderation on more labelled prompts of the same source."""
    text = json.dumps(card, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n"
    _write(beside, text)
    if not store:
        return None
    path = card_path(card["moderator_fingerprint"], card["labels"], folder)
    old = read_card(path)
    if old is not None and int((old.get("pooled") or {}).get("n") or 0) > int(card["pooled"].get("n") or 0):
        return None
    _write(path, text)
    return path


def figure_text(fig: dict | None, digits: int = 2) -> str:
    """``0.91 [0.86, 0.94]``; three digits where two would show an interval of width 0; ``n/a``."""
    fig = fig or {}
    value, (low, high) = fig.get("value"), (fig.get("ci") or [None, None])
    if value is None:
        return "n/a"
    if low is not None and f"{low:.{digits}f}" == f"{high:.{digits}f}" and low != high:
        digits += 1
    return f"{value:.{digits}f}" + ("" if low is None else f" [{low:.{digits}f}, {high:.{digits}f}]")


def coverage_text(pooled: dict) -> str:
    """'coverage 440 of 450 prompts (98%)', with NOT VALID where its 95% lower limit is under 0.90: the
    card's first figure."""
    return judge_cards.coverage_text(pooled, unit="prompt")


def card_text(card: dict) -> str:
    """The one line shown for a card: coverage first, then sensitivity and specificity for
    "unsafe" and kappa with their intervals, the label source and n."""
    pooled = card.get("pooled") or {}
    name, n = card["labels"]["name"], int(pooled.get("n") or 0)
    if not int(pooled.get("verdicts") or 0):
        return f"moderator vs humans: {coverage_text(pooled)}: no verdict on any labelled prompt, {name} (n={n:,})"
    kappa = pooled.get("kappa") or {}
    rare = " (a class is rare: read sensitivity and specificity)" if "prevalence" in (kappa.get("note") or "") else ""
    return (f"moderator vs humans: {coverage_text(pooled)}; sensitivity for unsafe {figure_text(pooled.get('sensitivity'))}"
            f", specificity {figure_text(pooled.get('specificity'))}, kappa {figure_text(kappa)}{rare}, {name} "
            f"(n={n:,})")
