"""``orbench-calibrate --moderator_model``: measure a stage-3 moderation against human prompt-safety labels.

Runs stage 3 (``orbench-moderate``, in this process: its cache, resume, ``--estimate`` and meta
file included) with the moderator or ensemble given, as stage 3 takes it (``gpt4``,
``provider/model``, ``A,B,C``; ``--template FILE``, ``--temperature``, ``--max_tokens`` and the
other stage-3 flags passed on), on human-labelled prompts (:mod:`orbench.analysis.calibration.prompt_labels`:
XSTest's 450 bundled prompts by default, a lab's CSV, or an ``orbench-audit`` prompt audit), the
column moderated being ``prompt``. Then writes the moderation's card
(:mod:`orbench.scoring.moderator_cards`), "unsafe" the positive class:

- **coverage** first: the prompts given a verdict (``is_toxic`` True or False) out of all
  labelled prompts, Wilson interval; where its 95% lower limit is under 0.90 the card is NOT
  VALID wherever it is shown;
- over every prompt, a prompt without a verdict (undecided, unparsed, failed) counting as a
  disagreement with the humans: **sensitivity** (the humans' unsafe prompts the moderation called
  toxic), **specificity** (the humans' safe prompts it called safe), accuracy and **Cohen's
  kappa**; precision for "unsafe", the moderation's and the humans' unsafe rates and their
  difference over the prompts with a verdict. Intervals: Wilson for each proportion, Tango's
  paired score interval for the difference, the card's kappa interval (floored only where nothing
  disagrees), kept within [-1, 1]
  (:mod:`orbench.analysis.calibration.card_stats`; coverage by simulation: ``bench/card_coverage.py``);
- the same per category where the labels have one (XSTest's: each prompt type; a category whose
  prompts humans gave one label has only sensitivity or specificity, and no kappa), and per
  moderator of an ensemble (each one's own label against the humans).

The card is keyed by the moderation's fingerprint (the moderators as resolved, the template's
hash, the ensemble rule, the column, temperature and max tokens) and written as
``moderator_card_<labels>.json`` beside the stage-3 files in ``--output_dir`` (default
``./calibration_moderator_<moderators>/``) and into the card store in the cache folder, where
``orbench-report`` and ``orbench-release`` find it by the fingerprint in a stage-3 meta file. Its
top level holds ``coverage``, ``sensitivity``, ``specificity``, ``kappa`` (``{"value", "ci"}``),
``moderators`` and ``labels``: the file ``orbench-release --moderator_card`` reads.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from orbench.analysis.calibration import card_stats
from orbench.analysis.calibration.label_sources import save_labelled
from orbench.analysis.calibration.prompt_labels import COLUMNS, load_labels, stratified_subset
from orbench.llm.errors import UsageError
from orbench.llm.models import parse_model, slug
from orbench.run.provenance import meta_path_for
from orbench.scoring.moderator_cards import (
    CARD_VERSION,
    card_text,
    coverage_text,
    figure_text,
    moderator_fingerprint,
    moderator_identity,
    save_card,
)
from orbench.scoring.vocab import SKIPPED_EMPTY, UNDECIDED
from orbench.stages import moderate

#: Flags this command sets for stage 3 itself.
OWN_STAGE_FLAGS = ("--input_file_path", "--input_file", "--output_file", "--limit", "--column")


def _flag(value) -> bool | None:
    return {"true": True, "false": False}.get(str(value).strip().lower())


class _Row(NamedTuple):
    """What a moderator card counts of one stage-3 row."""

    failed: bool  # the row has an error
    verdict: bool | None  # True toxic, False safe, None: none (or the row failed)
    category: str  # the ensemble's moderation_category
    votes: float  # the ensemble's unparsed votes
    human: bool  # the humans' label: unsafe


def _rows(table: pd.DataFrame, column: str = "is_toxic") -> list[_Row]:
    """The rows of ``table`` as a card counts them, with the verdicts of ``column``. A card counts
    a few hundred prompts in a few dozen groups: plain lists, where pandas' cost per call on each
    small group was most of the card's time."""
    failed = [str(e).strip() != "" for e in table["error"].tolist()]
    verdicts = [None if bad else _flag(v) for v, bad in zip(table[column].tolist(), failed)]
    if column == "is_toxic":
        category = [str(c).strip() for c in table["moderation_category"].tolist()]
        votes = pd.to_numeric(table["unparsed_votes"], errors="coerce").fillna(0).tolist()
    else:
        category, votes = [""] * len(table), [0.0] * len(table)
    return [_Row(*r) for r in zip(failed, verdicts, category, votes, table["human_unsafe"].tolist())]


def _counts(rows: list[_Row], column: str = "is_toxic") -> dict:
    """Prompts, those with a verdict, failed rows, and (not failed) those without a verdict; for the
    ensemble's column, why: undecided (no strict majority) or skipped (an empty prompt)."""
    failed = sum(r.failed for r in rows)
    decided = sum(r.verdict is not None for r in rows)
    out = {"rows": len(rows), "decided": decided, "errors": failed, "no_verdict": len(rows) - decided - failed}
    if column == "is_toxic":
        ok = [r for r in rows if not r.failed]
        out.update(undecided=sum(r.category == UNDECIDED for r in ok),
                   skipped_empty=sum(r.category == SKIPPED_EMPTY for r in ok),
                   unparsed_votes=int(np.sum([r.votes for r in ok], dtype=float)))
    return out


def figures(human_unsafe, verdicts) -> dict:
    """A moderator card's figures ("unsafe" the positive class) over every labelled prompt; the
    table's cells as :data:`orbench.analysis.calibration.card_stats.CELLS` with unsafe for refusal."""
    human = pd.Series(human_unsafe).astype(bool).to_numpy()
    f = card_stats.figures(human, list(verdicts))
    out = {"n": f["n"], "verdicts": f["verdicts"], "table": f["table"], "coverage": f["coverage"],
           "sensitivity": f["recall"], "specificity": f["specificity"], "accuracy": f["accuracy"],
           "kappa": {k: v for k, v in f["kappa"].items() if k != "note"}, "precision": f["precision"],
           "moderator_unsafe_rate": f["judge_rate"], "human_unsafe_rate": f["human_rate"],
           "rate_difference": f["rate_bias"]}
    unsafe, safe = int(human.sum()), int((~human).sum())
    if f["n"] and not (unsafe and safe):
        out["kappa"] = {**card_stats.figure(math.nan, math.nan, math.nan),
                        "note": "undefined: the humans gave these prompts one label only"}
    elif f["n"] and not f["verdicts"]:
        out["kappa"]["note"] = card_stats.NOT_COMPUTABLE
    elif f["n"] and out["kappa"]["value"] is None:
        out["kappa"]["note"] = "undefined: the moderation and the humans each gave one label only"
    elif f["n"] and min(unsafe, safe) < card_stats.RARE_CLASS * f["n"]:
        which = "unsafe" if unsafe <= safe else "safe"
        out["kappa"]["note"] = (f"prevalence: the humans' {which} prompts are {100 * min(unsafe, safe) / f['n']:.1f}% "
                                f"of the prompts, and kappa is unstable when a class is rare; read sensitivity "
                                f"and specificity")
    return out


def _group(rows: list[_Row], column: str = "is_toxic") -> dict:
    return {**figures([r.human for r in rows], [r.verdict for r in rows]), "counts": _counts(rows, column)}


def build_card(table: pd.DataFrame, meta: dict, labels: dict, output: Path, typed: str) -> dict:
    """The card of the moderation behind stage 3's ``table`` (with the label columns) and its ``meta``."""
    settings = meta.get("settings") or {}
    identity = moderator_identity(settings)
    resolved = [str(m.get("resolved") or m.get("typed")) for m in meta.get("models") or [] if isinstance(m, dict)]
    rows = _rows(table)
    per_category: dict[str, list[_Row]] = {}
    for category, row in zip(table["category"].astype(str).str.strip().tolist(), rows):
        per_category.setdefault(category, []).append(row)
    card = {"card": "moderator", "card_version": CARD_VERSION,
            "moderator_fingerprint": moderator_fingerprint(identity), "moderator_name": typed,
            "moderators": resolved,
            "moderation": {"identity": identity, "models": meta.get("models"),
                           "template_source": meta.get("template_source"), "ensemble_rule": identity["rule"]},
            "labels": {**labels, "n": len(table)},
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "calibration_output": str(output), "counts": _counts(rows), "pooled": _group(rows),
            "per_category": {c: _group(per_category[c]) for c in sorted(per_category) if c},
            "per_moderator": {}}
    prefixes = [c.removesuffix("_label") for c in settings.get("columns") or [] if c.endswith("_label")]
    if len(prefixes) > 1:  # an ensemble: each moderator's own label against the humans
        for prefix, model in zip(prefixes, resolved):
            if f"{prefix}_is_toxic" in table.columns:
                card["per_moderator"][model] = _group(_rows(table, f"{prefix}_is_toxic"), f"{prefix}_is_toxic")
    for key in ("coverage", "sensitivity", "specificity", "kappa"):  # where orbench-release reads them
        card[key] = card["pooled"][key]
    card["text"] = card_text(card)
    return card


def print_card(card: dict) -> None:
    """The card as a table on stdout: coverage first, then pooled, per category, per moderator."""
    print(f"moderation: {card['moderator_name']} (fingerprint {card['moderator_fingerprint']}; "
          f"{', '.join(card['moderators'])})")
    print(f"labels: {card['labels']['name']} ({card['labels']['n']} prompts)")
    print(coverage_text(card["pooled"]))
    groups = [("POOLED", card["pooled"]), *((f"category {k}", v) for k, v in card["per_category"].items()),
              *((f"moderator {k}", v) for k, v in card["per_moderator"].items())]
    width = max(len(name) for name, _ in groups)
    head = (f"{'group':<{width}} {'n':>5} {'cov %':>6} {'none':>4} {'err':>4}  {'sensitivity [95% CI]':<22} "
            f"{'specificity [95% CI]':<22} {'kappa [95% CI]':<23} {'mod unsafe %':>12} {'human unsafe %':>14}")
    print(head + "\n" + "-" * len(head))
    pct = (lambda f: "n/a" if f["value"] is None else f"{100 * f['value']:.1f}")  # noqa: E731 (a one-line helper used just below)
    for name, fig in groups:
        c = fig["counts"]
        print(f"{name:<{width}} {fig['n']:>5} {pct(fig['coverage']):>6} {c['no_verdict']:>4} {c['errors']:>4}  "
              f"{figure_text(fig['sensitivity'], 3):<22} {figure_text(fig['specificity'], 3):<22} "
              f"{figure_text(fig['kappa'], 3):<23} {pct(fig['moderator_unsafe_rate']):>12} "
              f"{pct(fig['human_unsafe_rate']):>14}")
    note = card["pooled"]["kappa"].get("note")
    if note:
        print(f"kappa: {note}")


def _prepare(args) -> tuple[pd.DataFrame, dict, Path, Path]:
    frame, labels = load_labels(args.labels)
    labels["rows"] = len(frame)
    if args.limit:
        frame = stratified_subset(frame, args.limit, args.seed)
        labels.update(limit=args.limit, seed=args.seed)
    labels["used"] = len(frame)
    out_dir = Path(args.output_dir or f"calibration_moderator_{slug(args.moderator_model.strip())}")
    suffix = f"_{slug(labels['name'])}" + (f"_limit{args.limit}_seed{args.seed}" if args.limit else "")
    input_csv = out_dir / f"labelled_prompts{suffix}.csv"
    save_labelled(out_dir, input_csv, frame[COLUMNS].to_csv(index=False))
    return frame, labels, input_csv, out_dir / f"moderated{suffix}.csv"


def run(args, extra: list) -> int:
    """Calibrate the moderation ``args.moderator_model`` (module docstring); the exit code."""
    try:
        clash = [f.split("=", 1)[0] for f in extra if f.split("=", 1)[0] in OWN_STAGE_FLAGS]
        if clash:
            raise UsageError(f"{clash[0]} is set by orbench-calibrate (the labels are prompts: the column is prompt; "
                             f"use --output_dir, and --limit for a subset)")
        if args.xstest_dir:
            raise UsageError("--xstest_dir is for judges (XSTest's responses); a moderator is calibrated on "
                             "XSTest's prompts, which are bundled")
        names = [n.strip() for n in args.moderator_model.split(",") if n.strip()]
        if not names:
            raise UsageError("--moderator_model is empty; give one or more model names")
        for name in names:  # a bad moderator fails before any file is written
            parse_model(name)
        _, labels, input_csv, output_csv = _prepare(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    stage_argv = ["--moderator_model", args.moderator_model, "--input_file_path", str(input_csv),
                  "--output_file", str(output_csv), "--column", "prompt", *extra]
    if "--estimate" in extra:
        return moderate.main(stage_argv)
    with contextlib.redirect_stdout(sys.stderr):  # stdout is for the card
        code = moderate.main(stage_argv)
    if code not in (0, 1):
        return code
    table = pd.read_csv(output_csv, dtype=str, keep_default_na=False)
    table["human_unsafe"] = table["human_unsafe"].map(_flag).astype(bool)
    meta = json.loads(meta_path_for(output_csv).read_text(encoding="utf-8"))
    card = build_card(table, meta, labels, output_csv, args.moderator_model.strip())
    beside = output_csv.with_name(output_csv.stem.replace("moderated", "moderator_card", 1) + ".json")
    try:
        stored = save_card(card, beside, store=not args.no_store)
    except OSError as exc:
        print(f"error: cannot write the moderator card: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print_card(card)
    print(f"card: {beside}")
    if args.no_store:
        print("card store: not stored (--no_store); no report or release shows this card")
    else:
        print(f"card store: {stored}" if stored else "card store: keeps a card of this moderation on more labelled "
              "prompts of this source; this one is only beside the output")
    print()
    print(card["text"])
    return code
