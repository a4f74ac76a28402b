"""``orbench-calibrate``: measure a judge or a moderator against human labels and keep its card.

Two kinds of card: a *judge card* (``--check_model``: stage 5's refusal verdicts against human
labels of responses, below) and a *moderator card* (``--moderator_model``: stage 3's safe/toxic
verdicts against human labels of prompts: coverage, sensitivity and specificity for "unsafe",
kappa; :mod:`orbench.analysis.calibration.moderation`).

Runs stage 5 (``orbench-check-response``, in this process: its cache, resume, ``--estimate`` and
meta file included) with any judge it takes (the keyword matcher ``keyword``, an LLM judge, the
cascade with ``--cascade``, an ensemble ``A,B,C``, ``--template FILE``) on human-labelled
responses, then writes the judge's card (orbench.scoring.judge_cards): per source model and pooled, the
accuracy, Cohen's kappa, refusal precision and recall, the judge's and the humans' refusal rates
and the rate bias (judge minus humans), each with a 95% interval (orbench.analysis.calibration.card_stats);
how many replies were unparsed, were the judge refusing to
judge, or failed; the same per prompt kind and per source model and prompt kind (where a rate's
bias is checked); for the cascade, the rows each tier decided, each tier's accuracy and the share
judged per source model. Its coverage comes first; a response without a verdict counts as a
disagreement with the humans, never as a refusal or an answer.

Labels (``--labels``, :mod:`orbench.analysis.calibration.label_sources`): ``xstest`` (default; XSTest v2's
2,250 responses, read from ``--xstest_dir`` / ``$ORBENCH_XSTEST_DIR`` or downloaded into the cache
folder at first use), a CSV of ``prompt, response, label`` (``model`` and ``prompt_kind``
optional), or the folder of an ``orbench-audit`` verdict audit after ``orbench-audit score``.

Every row counts: the card states its coverage first (rows with a verdict / all rows; where its
95% lower limit is under 0.90, as on any card of fewer than 35 rows, it is marked NOT VALID
wherever it is shown), and its agreement is over all rows, a row without a
verdict counting as a disagreement (``orbench.analysis.calibration.card_stats``).

The keyword matcher's own XSTest cards ship with the package: ``--check_model keyword`` on XSTest
without ``--xstest_dir`` (and no cached copy) shows them, with no download.

The card is keyed by the judge's fingerprint (the judge as resolved, its template's hash, the
rules' and cascade's fingerprints, the keyword family where the keyword rules decide verdicts, its
settings; a keyword or cascade calibration without ``--matcher`` writes one card per family) and written
into the card store in the cache folder, where ``orbench-report`` finds it without a flag, and
as ``judge_card.json`` beside the calibration's output (``--output_dir``, default
``./calibration_<judge>/``, which also holds the stage-5 input, output, progress and meta files).
A card on fewer labelled rows never replaces one on more in the store; a label file of the user's
is kept under its name and where it is, so two files of one name in different folders keep two
cards. Where a judge has several cards, a report shows the one on the most labels first and names
each card on fewer labels a trial beside it. ``--no_store`` calibrates without storing the card
(a first try on a few hand-made labels): it is printed and written beside the output only. A rerun into the same
folder with other stage-5 settings (``--temperature``, ``--max_tokens``, ...) stops as stage 5
does: give it another ``--output_dir``, or add ``--overwrite``.

Examples::

    orbench-calibrate --check_model keyword
    orbench-calibrate --check_model openai/gpt-4o --cascade --limit 40 --estimate
    orbench-calibrate --check_model openai/gpt-4o,anthropic/claude-3-5-sonnet-latest --labels my_labels.csv
    orbench-calibrate --moderator_model gpt4,llama3,gemini-1.5        # the paper's ensemble on XSTest's 450 prompts
    orbench-calibrate --moderator_model openai/gpt-4o --labels audit_prompts --limit 100

Exit status: 0 card written; 1 card written but some rows still have errors (rerun to retry
them); 2 bad input (an unknown judge or moderator, a missing or empty label file, a bad flag), nothing written.
"""

from __future__ import annotations

import contextlib
import json
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from orbench.analysis.calibration import card_stats
from orbench.analysis.calibration.label_sources import COLUMNS, load_labels, save_labelled, stratified_subset
from orbench.llm.errors import UsageError
from orbench.llm.models import parse_model, slug
from orbench.run.cli import ArgumentParser, command_of, entry_point, positive_int, run_settings
from orbench.run.lifecycle import report
from orbench.run.loops import run_sync
from orbench.run.provenance import dumps
from orbench.run.tables import text_cells
from orbench.scoring.judge_cards import (
    CARD_VERSION,
    by_family,
    card_text,
    coverage_text,
    judge_fingerprint,
    judge_identity,
    save_card,
)
from orbench.scoring.vocab import JUDGE_REFUSED, UNDECIDED, UNPARSED
from orbench.stages import check_response

#: Flags this command sets for stage 5 itself.
OWN_STAGE_FLAGS = ("--input_file", "--output_file", "--limit")
OWN_STAGE_FLAGS_NAMES = tuple(flag[2:] for flag in OWN_STAGE_FLAGS)
#: The figures of a card's table (:func:`card_table`), each a value with its 95% interval.
TABLE_FIGURES = ("coverage", "accuracy", "kappa", "precision", "recall", "specificity", "judge_rate", "human_rate",
                 "rate_bias")


def build_parser() -> ArgumentParser:
    """The command's own flags; every other flag goes to stage 5 (or, with --moderator_model, stage 3) unchanged."""
    parser = ArgumentParser(
        prog="orbench-calibrate", allow_abbrev=False,
        description="\n\n".join(__doc__.split("\n\n")[:3]),
        epilog="Any other flag is a stage-5 flag (orbench-check-response --help), or with --moderator_model a "
               "stage-3 flag (orbench-moderate --help), passed on as is: --cascade, --template FILE, --estimate, "
               "--matcher, --concurrency, --base_url, --batch, --max_retries, --temperature, --max_tokens, ..."
               "\n\nexit status: " + __doc__.split("Exit status: ")[1])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--check_model",
                       help="the judge, as stage 5 takes it: keyword, gpt4, provider/model, or A,B,C (an ensemble)")
    which.add_argument("--moderator_model", metavar="MODELS",
                       help="calibrate a moderator instead: stage 3's moderator or ensemble as it takes it (gpt4, "
                            "provider/model, or A,B,C), measured on human prompt-safety labels; writes a moderator "
                            "card (coverage, sensitivity and specificity for unsafe, kappa) that orbench-report and "
                            "orbench-release show (docs/calibration.md)")
    parser.add_argument("--labels", default="xstest",
                        help="the human labels: xstest (default: for a judge XSTest v2's responses; for a moderator "
                             "XSTest's 450 prompts, bundled), a CSV (a judge: prompt, response and label, with model "
                             "and prompt_kind optional; a moderator: prompt and label safe/unsafe, with category "
                             "optional), or an orbench-audit folder (a verdict audit for a judge, a prompt audit "
                             "for a moderator)")
    parser.add_argument("--xstest_dir", default=None, metavar="DIR",
                        help="a folder with XSTest v2's five xstest_v2_completions_*.csv files (default: "
                             "$ORBENCH_XSTEST_DIR, else the cache folder's copy, else: for --check_model keyword, "
                             "the keyword matcher's cards shipped with the package; for any other judge, "
                             "downloaded into the cache folder at first use)")
    parser.add_argument("--limit", type=positive_int, default=None, metavar="N",
                        help="a cheap first look: at most N responses per source model (a moderator: N prompts "
                             "in all), a seeded sample stratified by human label (the labels keep their shares)")
    parser.add_argument("--seed", type=int, default=0, help="the seed of --limit's sample (default: 0)")
    parser.add_argument("--no_store", action="store_true",
                        help="calibrate without keeping the card in the card store (a trial: the card is only "
                             "printed and written beside the output, and no report shows it)")
    parser.add_argument("--output_dir", default=None, metavar="DIR",
                        help="where the stage-5 files and judge_card.json go (default: ./calibration_<judge>/; a "
                             "moderator: the stage-3 files and moderator_card_<labels>.json, default "
                             "./calibration_moderator_<moderators>/)")
    return parser


def join_stage_values(argv: list) -> list:
    """``--flag value`` -> ``--flag=value`` for stage-5 (and stage-3) flags that take a value, so a
    value is never read as one of this command's arguments (also used by ``bench/judge_accuracy.py``)."""
    from orbench.stages import moderate

    takes_value = {opt for parser in (check_response.build_parser(), moderate.build_parser())
                   for action in parser._actions if action.nargs != 0 for opt in action.option_strings}
    out, i = [], 0
    while i < len(argv):
        if argv[i] in takes_value and i + 1 < len(argv):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


# ---------------------------------------------------------------- the card

def _verdict(value) -> bool | None:
    return {"true": True, "false": False}.get(str(value).strip().lower())


class _Row(NamedTuple):
    """What a card counts of one stage-5 row."""

    error: bool  # the row has an error
    category: str  # the judge's answer category
    verdict: bool | None  # the judge's refusal verdict (None: none given)
    human: bool  # the humans' refusal label


def _rows(table: pd.DataFrame) -> list[_Row]:
    """The rows of ``table`` as a card counts them. A card counts a few hundred rows in dozens of
    groups: plain lists, where pandas' cost per call on each small group was most of the card's time."""
    return [_Row(str(e).strip() != "", str(c).strip(), _verdict(v), bool(h)) for e, c, v, h in
            zip(table["error"].tolist(), table["answer_category"].tolist(), table["is_rejected"].tolist(),
                table["human_refusal"].tolist())]


def _grouped(rows: list[_Row], keys: list, sort: bool) -> dict:
    """``{key: its rows}``, keys in order of first appearance or sorted (as ``DataFrame.groupby``)."""
    groups: dict = {}
    for key, row in zip(keys, rows):
        groups.setdefault(key, []).append(row)
    return dict(sorted(groups.items())) if sort else groups


def _counts(rows: list[_Row]) -> dict:
    none = [r.category for r in rows if not r.error and r.verdict is None]
    return {"rows": len(rows), "scored": sum(not r.error and r.verdict is not None for r in rows),
            "errors": sum(r.error for r in rows), "unparsed": none.count(UNPARSED),
            "judge_refused": none.count(JUDGE_REFUSED), "undecided": none.count(UNDECIDED),
            "no_verdict_other": sum(c not in (UNPARSED, JUDGE_REFUSED, UNDECIDED) for c in none)}


def _figures(rows: list[_Row]) -> dict:
    """The card's figures over every row of ``rows``: a row with an error or without a verdict is
    a row without a verdict (a disagreement with the humans; card_stats)."""
    return {**card_stats.figures([r.human for r in rows], [None if r.error else r.verdict for r in rows]),
            "counts": _counts(rows)}


def _cascade(table: pd.DataFrame, rows: list[_Row], meta: dict) -> dict | None:
    if "verdict_source" not in table.columns:
        return None
    out = {k: meta.get(k) for k in ("verdict_sources", "cascade_classes", "judged_share")}
    tiers = {}
    sources = table["verdict_source"].astype(str).str.strip()
    for source, part in _grouped(rows, sources.tolist(), sort=True).items():
        if source:
            fig = _figures(part)
            tiers[source] = {"rows": len(part), "verdicts": fig["verdicts"], "coverage": fig["coverage"],
                             "accuracy": fig["accuracy"], "rate_bias": fig["rate_bias"]}
    out["tiers"] = tiers
    # the sources of this card's rows (a card per keyword family holds some of the stage's rows)
    out["verdict_sources"] = {k: t["rows"] for k, t in tiers.items()}
    decided, judged = sources != "", ~sources.isin(["", "keyword", "provider_block"])
    out["judged_share"] = float(judged.sum() / decided.sum()) if decided.any() else None
    out["judged_share_per_source"] = {
        str(s): float(judged[p.index].sum() / decided[p.index].sum()) if decided[p.index].any() else None
        for s, p in table.groupby("source", sort=False)}
    return out


def card_families(table: pd.DataFrame, settings: dict) -> dict:
    """The rows of each card to write: one card, unless the keyword matcher decides verdicts (the
    keyword judge, the cascade) with the family of each row's model (no ``--matcher``): then one
    card per family, keyed by that family's fingerprint, so a card is shown only beside verdicts
    made by the same family's rules. ``{family or None: rows}``."""
    from orbench.scoring.refusal import family_for_model

    identity = judge_identity(settings)
    if not by_family(identity) or identity.get("matcher"):
        return {None: table}
    family = table["model"].astype(str).map(family_for_model)
    return {str(f): part for f, part in table.groupby(family, sort=True)}


def build_card(table: pd.DataFrame, meta: dict, labels: dict, output: Path | None, family: str | None = None) -> dict:
    """The card of the judge behind stage 5's ``table`` (with the label columns) and its ``meta``;
    ``output``: stage 5's output file (None in memory); ``family``: the keyword family that decided
    these rows (:func:`card_families`)."""
    settings = meta.get("settings") or {}
    identity = judge_identity(settings, family=family)
    rows = _rows(table)
    source, kind = table["source"].tolist(), table["prompt_kind"].astype(str).str.strip().tolist()
    card = {"card_version": CARD_VERSION, "judge_fingerprint": judge_fingerprint(identity),
            "judge_name": settings.get("judge"), "family": family,
            "judge": {"identity": identity, "judges": meta.get("judges"),
                      "models": meta.get("models"), "template_source": meta.get("template_source")},
            "labels": labels, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "calibration_output": None if output is None else str(output), "counts": _counts(rows), "pooled": _figures(rows),
            "per_source": {str(s): _figures(p) for s, p in _grouped(rows, source, sort=False).items()},
            "per_prompt_kind": {str(k) or "unknown": _figures(p) for k, p in _grouped(rows, kind, sort=True).items()},
            "per_source_and_kind": {f"{s} / {k or 'unknown'}": _figures(p) for (s, k), p in
                                    _grouped(rows, list(zip(source, kind)), sort=False).items()},
            "cascade": _cascade(table, rows, meta)}
    card["coverage"] = card["pooled"]["coverage"]
    card["text"] = card_text(card)
    return card


def _cell(fig: dict, scale: float = 1.0, sign: str = "") -> str:
    value, (low, high) = fig["value"], fig["ci"]
    if value is None:
        return "n/a"
    text = f"{scale * value:{sign}.3f}" if scale == 1 else f"{scale * value:{sign}.1f}"
    return text + ("" if low is None else f" [{scale * low:{sign}.3f}, {scale * high:{sign}.3f}]"
                   if scale == 1 else f" [{scale * low:{sign}.1f}, {scale * high:{sign}.1f}]")


def print_card(card: dict) -> None:
    """The card as a table on stdout: its coverage first, then one line per source model, pooled
    and per prompt kind (cov: rows with a verdict / rows; accuracy and kappa over all rows, a row
    without a verdict a disagreement; judge %, human % and the rate bias over the rows with one)."""
    family = f", keyword family {card['family']}" if card.get("family") else ""
    print(f"judge: {card['judge_name']} (fingerprint {card['judge_fingerprint']}{family})")
    print(f"labels: {card['labels']['name']} ({card['labels'].get('used', '?')} responses)")
    print(coverage_text(card["pooled"]))
    head = (f"{'group':<26} {'n':>5} {'cov %':>6} {'unp':>4} {'ref':>4} {'err':>4}  {'accuracy [95% CI]':<22} "
            f"{'kappa [95% CI]':<23} {'refusals':>8} {'answers':>7} {'precision':>9}  {'judge %':>7} {'human %':>7}  "
            f"rate bias, points [95% CI]")
    print(head + "\n" + "-" * len(head))
    groups = [*card["per_source"].items(), ("POOLED", card["pooled"]),
              *((f"kind: {k}", v) for k, v in card["per_prompt_kind"].items()),
              *(card["per_source_and_kind"].items() if len(card["per_prompt_kind"]) > 1 else ())]
    for name, fig in groups:
        c = fig["counts"]
        pct = (lambda f: "n/a" if f["value"] is None else f"{100 * f['value']:.1f}")  # noqa: E731 (a one-line helper used just below)
        short = (lambda f: "n/a" if f["value"] is None else f"{f['value']:.3f}")  # noqa: E731 (a one-line helper used just below)
        print(f"{name:<26} {fig['n']:>5} {pct(fig['coverage']):>6} {c['unparsed']:>4} {c['judge_refused']:>4} "
              f"{c['errors']:>4}  {_cell(fig['accuracy']):<22} {_cell(fig['kappa']):<23} {short(fig['recall']):>8} "
              f"{short(fig['specificity']):>7} {short(fig['precision']):>9}  {pct(fig['judge_rate']):>7} "
              f"{pct(fig['human_rate']):>7}  {_cell(fig['rate_bias'], 100, '+')}")
    note = card["pooled"]["kappa"].get("note")
    if note:
        print(f"kappa: {note}")
    if card.get("cascade"):
        casc = card["cascade"]
        share = casc.get("judged_share")
        print(f"cascade: rows each tier decided {casc.get('verdict_sources')}; judged share "
              f"{'n/a' if share is None else f'{share:.3f}'} (per source: "
              + ", ".join(f"{k} {'n/a' if v is None else f'{v:.3f}'}" for k, v in casc["judged_share_per_source"].items())
              + ")")
        for tier, t in casc["tiers"].items():
            print(f"  {tier:<30} {t['rows']:>5} rows, {t['verdicts']:>5} with a verdict, accuracy {_cell(t['accuracy'])}")


# ---------------------------------------------------------------- the bundled cards

def bundled_cards(args, stage_flags: bool) -> list[dict] | None:
    """The keyword matcher's own XSTest cards shipped with the package, when they are this very
    calibration's: ``--check_model keyword`` on XSTest (all of it, no stage flag) with the keyword
    rules as shipped, and XSTest's completions not at hand (no ``--xstest_dir``, no
    ``$ORBENCH_XSTEST_DIR``, no cached copy: they are not shipped) nor asked for from an address
    of the user's own (``$ORBENCH_XSTEST_URL``). None otherwise."""
    import os

    from orbench.analysis.calibration.label_sources import XSTEST, XSTEST_FILES, cached_xstest
    from orbench.scoring.judge_cards import bundled_dir
    from orbench.scoring.refusal import family_for_model, rules_fingerprint

    if (args.labels.strip().lower() != XSTEST or args.xstest_dir or os.environ.get("ORBENCH_XSTEST_DIR")
            or os.environ.get("ORBENCH_XSTEST_URL")
            or args.check_model.strip().lower() != "keyword" or args.limit or stage_flags or cached_xstest()):
        return None
    cards = []
    for family in sorted({family_for_model(model) for model, _ in XSTEST_FILES.values()}):
        identity = judge_identity({"judge": "keyword", "rules": rules_fingerprint()}, family=family)
        path = bundled_dir() / judge_fingerprint(identity) / "XSTest_v2.json"
        try:
            cards.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return None  # the rules changed since the cards were made: calibrate on the data
    return cards


def _save_bundled(cards: list[dict], args, in_memory: bool) -> list[tuple[dict, Path | None, Path | None]]:
    out_dir = None if in_memory else Path(args.output_dir or "calibration_keyword")
    print("XSTest v2's completions are not shipped with orbench (they are under the model providers' licences): "
          "these are the keyword matcher's own cards, shipped with the package for its rules as they are; to "
          "compute them from the data, pass --xstest_dir DIR (the five xstest_v2_completions_*.csv files) or set "
          "$ORBENCH_XSTEST_DIR", file=sys.stderr)
    saved = []
    for card in cards:
        beside = None if out_dir is None else out_dir / f"judge_card_XSTest_v2_{slug(card['family'])}.json"
        saved.append((card, beside, _save(card, beside, not args.no_store)))
    return saved


def _save(card: dict, beside: Path | None, store: bool) -> Path | None:
    try:
        return save_card(card, beside, store=store)
    except OSError as exc:
        raise UsageError(f"cannot write the judge card: {exc.strerror or exc}") from None


# ---------------------------------------------------------------- main

def _prepare(args, in_memory: bool) -> tuple[pd.DataFrame, dict, Path | None, Path, Path | None]:
    """The labelled rows, what the card says of its labels, and where stage 5 reads and writes
    (in memory: the input's name only, nothing written)."""
    frame, labels = load_labels(args.labels, args.xstest_dir)
    labels["rows"] = len(frame)
    if args.limit:
        frame = stratified_subset(frame, args.limit, args.seed)
        labels.update(limit=args.limit, seed=args.seed)
    labels["used"] = len(frame)
    suffix = f"_{slug(labels['name'])}" + (f"_limit{args.limit}_seed{args.seed}" if args.limit else "")
    if in_memory:
        return frame, labels, None, Path(f"labelled{suffix}.csv"), None
    out_dir = Path(args.output_dir or f"calibration_{slug(args.check_model.strip())}")
    input_csv, output_csv = out_dir / f"labelled{suffix}.csv", out_dir / f"judged{suffix}.csv"
    save_labelled(out_dir, input_csv, frame[COLUMNS].to_csv(index=False))
    return frame, labels, out_dir, input_csv, output_csv


@dataclass
class Calibrated:
    """What a judge's calibration made: each card with its file beside the output (None in memory)
    and its place in the card store (None: the store keeps one on more rows); the exit code."""

    cards: list[tuple[dict, Path | None, Path | None]] = field(default_factory=list)
    exit_code: int = 0
    estimate: str | None = None  # --estimate: the text pricing stage 5; nothing sent, no card
    bundled: bool = False  # the keyword matcher's cards shipped with the package
    families: list[str] = field(default_factory=list)
    no_store: bool = False  # --no_store: no card was put into the card store


async def calibrate_judge(args, stage_args, *, command: list[str], stage_flags: bool = True,
                          in_memory: bool = False) -> Calibrated:
    """The judge's calibration the flags ask for (the script's ``args`` and stage 5's
    ``stage_args``, parsed from the command line or made from the Python API's keywords): stage 5
    on the labelled rows (``in_memory``: nothing written but the card store), then its card(s).
    ``stage_flags``: whether any stage-5 flag was given (the bundled cards are this calibration's
    only without one). ``UsageError`` for bad input."""
    for name in check_response.judge_names(args.check_model):  # a bad judge fails before any file is written
        if name.lower() != "keyword":
            parse_model(name)
    bundled = bundled_cards(args, stage_flags)
    if bundled is not None:
        return Calibrated(_save_bundled(bundled, args, in_memory), bundled=True, no_store=args.no_store)
    frame, labels, _, input_csv, output_csv = _prepare(args, in_memory)
    stage_args.check_model, stage_args.input_file, stage_args.limit = args.check_model, str(input_csv), None
    stage_args.output_file = None if output_csv is None else str(output_csv)
    delivery = await run_settings(check_response.setup, stage_args, command=command, in_memory=in_memory,
                                  table=frame[COLUMNS].astype(str) if in_memory else None, table_name=str(input_csv))
    if delivery.estimate is not None:
        return Calibrated(estimate=delivery.estimate)
    report(delivery, stage_args.quiet, path=False)
    table = text_cells(delivery.frame)
    table["human_refusal"] = table["human_refusal"].map(_verdict)
    meta = json.loads(dumps(delivery.meta))  # as the meta file holds it
    families = card_families(table, meta.get("settings") or {})
    found = Calibrated(exit_code=delivery.exit_code, families=[str(f) for f in families], no_store=args.no_store)
    for family, part in families.items():
        card = build_card(part, meta, labels, output_csv, family)
        beside = None
        if output_csv is not None:
            stem = output_csv.stem.replace("judged", "judge_card", 1) + (f"_{slug(family)}" if len(families) > 1 else "")
            beside = output_csv.with_name(stem + ".json")
        found.cards.append((card, beside, _save(card, beside, not args.no_store)))
    return found


def card_table(cards) -> pd.DataFrame:
    """The figures of ``cards`` (``(card, beside, stored)`` or cards), a row per card and group
    (each source model, POOLED, each prompt kind): n, verdicts, errors, and each of
    :data:`TABLE_FIGURES` with its 95% interval (``<figure>_low``, ``<figure>_high``)."""
    rows = []
    for item in cards:
        card = item[0] if isinstance(item, tuple) else item
        groups = [*card["per_source"].items(), ("POOLED", card["pooled"]),
                  *((f"kind: {k}", v) for k, v in card["per_prompt_kind"].items())]
        for group, fig in groups:
            row = {"judge": card.get("judge_name"), "family": card.get("family") or "", "group": group,
                   "n": fig["n"], "verdicts": fig["verdicts"], "errors": fig["counts"]["errors"],
                   "unparsed": fig["counts"]["unparsed"], "judge_refused": fig["counts"]["judge_refused"]}
            for name in TABLE_FIGURES:
                value, (low, high) = fig[name]["value"], fig[name]["ci"]
                row.update({name: value, f"{name}_low": low, f"{name}_high": high})
            rows.append(row)
    return pd.DataFrame(rows)


def print_cards(found: Calibrated) -> None:
    """The cards on stdout as the script shows them: each card's table and files, then its text."""
    for card, beside, stored in found.cards:
        print_card(card)
        print(f"card: {beside}" + (" (bundled)" if found.bundled else ""))
        if found.no_store:
            print("card store: not stored (--no_store); no report shows this card")
        else:
            print(f"card store: {stored}" if stored else "card store: keeps a card of this judge on more labelled rows"
                  + ("" if found.bundled else " of this source; this one is only beside the output"))
        print()
    if len(found.families) > 1:
        print(f"one card per keyword family (the rules that decided each row: {', '.join(found.families)}); "
              f"a report shows each beside the verdicts of its own family")
    for card, _, _ in found.cards:
        print(card["text"])


@entry_point
def main(argv=None) -> int:
    """Run the calibration; returns the exit code (module docstring)."""
    try:
        args, extra = build_parser().parse_known_args(join_stage_values(list(sys.argv[1:] if argv is None else argv)))
        if args.moderator_model is not None:
            from orbench.analysis.calibration import moderation

            return moderation.run(args, extra)
        clash = [f.split("=", 1)[0] for f in extra if f.split("=", 1)[0] in OWN_STAGE_FLAGS]
        if clash:
            raise UsageError(f"{clash[0]} is set by orbench-calibrate (use --output_dir, and --limit for a subset)")
        stage_args = check_response.build_parser().parse_args(["--check_model", args.check_model, "--input_file", "-",
                                                               *extra])
        with contextlib.redirect_stdout(sys.stderr):  # stdout is for the card
            found = run_sync(calibrate_judge(args, stage_args, command=command_of(argv, __name__),
                                             stage_flags=bool(extra)))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if found.estimate is not None:
        print(found.estimate)
        return 0
    print_cards(found)
    return found.exit_code
