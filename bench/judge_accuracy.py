"""Validate a refusal judge on human-labelled responses before trusting the rate it reports.

Usage:
    python bench/judge_accuracy.py --check_model MODEL (XSTEST_DIR | --labels CSV) [--template FILE] [--limit N]
                                   [--output_dir DIR] [any other stage-5 flag]

Reads the XSTest v2 labelled responses in ``XSTEST_DIR`` (the five
``xstest_v2_completions_<model>.csv`` files; columns ``id, type, prompt, completion, ...,
final_label``), writes them as one stage-5 input CSV into the output folder (default
``./judge_accuracy_<judge>/``) with ``response`` = the completion, ``model`` = the id of the model
that wrote it (so the keyword matcher uses that family's rules), ``xstest_model`` = the source
file's model key and ``final_label`` = the human label, and runs stage 5
(``response_checker/check_response.py``) on it in this process. That is the real stage: the
response cache, resume from the progress file and the ``.meta.json`` provenance file beside the
output all apply, so a second run sends no request. Flags this script does not know are passed
to stage 5 unchanged (``--concurrency``, ``--max_retries``, ``--matcher``, ``--base_url``, ...).

Then it prints, per responding model and pooled, the accuracy, precision and recall of the
judge's ``is_rejected`` against the human label (refusal = ``2_full_refusal`` or
``3_partial_refusal``), with and without the partial-refusal rows, beside the keyword matcher's
figures on the same rows (stage 5's ``keyword_is_rejected``); the rejection rate per model and prompt kind
(XSTest's contrast prompts are ``unsafe``, the rest ``safe``; given to stage 5 as ``prompt_kind``)
beside the humans' and its bias, for the judge and for the matcher; the judge's three classes
against the three human labels where the judge gives classes; and the counts of unparsed rows (no
verdict: ``is_rejected`` empty) and error rows, both left out of every figure. ``orbench-calibrate``
is the installed command that keeps these figures as the judge's card.

``--limit N`` keeps the first N responses of each file (every model stays represented); a limited
run writes its own files (``..._limitN.csv``), so it never disturbs a full run's output.
``--check_model keyword`` asks no model: stage 5 re-scores with the keyword matcher.
``--estimate`` prints stage 5's estimate of the requests and their price and stops.

``--labels CSV`` scores other labelled responses instead of XSTest's: a CSV of ``prompt,
response, label`` with ``model`` (the responding model: the groups) and ``prompt_kind`` where
known, as ``orbench-calibrate --labels`` reads it; every table is the same, grouped by model.

Cascade (stage 5 ``--cascade``, :mod:`orbench.scoring.cascade`): ``--perfect_judge`` asks no model and
runs no stage: each response gets its confidence class, the keyword matcher decides the confident
ones and the human label stands in for a perfect judge on the rest. It prints, per model and
pooled, the share of responses that would reach the judge, the accuracy of the confident rows
alone, the cascade's accuracy, each class's size and accuracy, the cascade's rejection rate per
model and prompt kind beside the humans' with its bias (the goal: within 1.5 points everywhere),
and the judged share and largest bias on a split of the models (the development models named in
``bench/refusal_accuracy.py`` and the others, outside the rules' development). With a
real judge, pass ``--cascade`` (a stage-5 flag): the table above is printed for the judge's own
verdicts, followed by the cascade figures read from stage 5's ``verdict_source`` column, with the
perfect-judge figure on the same rows beside them.

    python bench/judge_accuracy.py --perfect_judge ../shared/data/xstest-v2
    python bench/judge_accuracy.py --check_model gpt4 --cascade ../shared/data/xstest-v2

Exit status: 0 after printing; 1 when some rows still have errors (the table is printed with
them counted; rerun to retry them); 2 on bad input (a missing folder, file or column, an unknown
label) and whenever stage 5 exits 2 (bad judge spec, missing key, bad flag); 130 interrupted.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from refusal_accuracy import DEV_MODELS, scores  # noqa: E402 (needs the sys.path set-up above)

from orbench.analysis.calibration.calibrate import join_stage_values  # noqa: E402 (needs the sys.path set-up above)
from orbench.llm.errors import UsageError  # noqa: E402 (needs the sys.path set-up above)
from orbench.llm.models import slug  # noqa: E402 (needs the sys.path set-up above)
from orbench.run import cli  # noqa: E402 (needs the sys.path set-up above)
from orbench.run.provenance import meta_path_for  # noqa: E402 (needs the sys.path set-up above)
from orbench.scoring.cascade import CLASSES, UNSURE, confidence  # noqa: E402 (needs the sys.path set-up above)
from orbench.scoring.refusal import family_for_model  # noqa: E402 (needs the sys.path set-up above)
from orbench.scoring.vocab import DIRECT_ANSWER, DIRECT_REFUSAL, INDIRECT_REFUSAL  # noqa: E402 (needs the sys.path set-up above)
from orbench.stages import check_response  # noqa: E402 (needs the sys.path set-up above)

#: XSTest v2 completion files (``xstest_v2_completions_<key>.csv``) -> the model that wrote them,
#: as a provider/model id so the keyword matcher applies that model's family rules.
XSTEST_MODELS = {
    "gpt4": "openai/gpt-4",
    "llama2new": "together/meta-llama/Llama-2-70b-chat-hf",
    "llama2orig": "together/meta-llama/Llama-2-70b-chat-hf",
    "mistralguard": "together/mistralai/Mistral-7B-Instruct-v0.1",
    "mistralinstruct": "together/mistralai/Mistral-7B-Instruct-v0.1",
}
NEEDED = ("prompt", "completion", "final_label")
#: Human labels, their binary meaning (True = refusal) and the judge class that corresponds.
HUMAN_LABELS = ("1_full_compliance", "2_full_refusal", "3_partial_refusal")
JUDGE_FOR_HUMAN = {"1_full_compliance": DIRECT_ANSWER, "2_full_refusal": DIRECT_REFUSAL,
                   "3_partial_refusal": INDIRECT_REFUSAL}
PARTIAL = "3_partial_refusal"
#: Flags this script sets for stage 5 itself.
OWN_STAGE_FLAGS = ("--input_file", "--output_file", "--limit")


class InputError(Exception):
    """Bad input: one line on stderr, exit status 2."""


# --------------------------------------------------------------------------- input
def read_xstest(folder: Path, limit: int | None = None) -> pd.DataFrame:
    """The XSTest responses as one stage-5 input table (columns: id, type, xstest_model, model,
    prompt, response, final_label), the files in :data:`XSTEST_MODELS` order; ``limit`` keeps the
    first rows of each file."""
    if not folder.is_dir():
        raise InputError(f"{folder}: no such folder (expected the XSTest v2 data folder)")
    paths = {key: folder / f"xstest_v2_completions_{key}.csv" for key in XSTEST_MODELS}
    missing = [p.name for p in paths.values() if not p.is_file()]
    if missing:
        raise InputError(f"{folder} lacks {', '.join(missing)}")
    parts = []
    for key, path in paths.items():
        try:
            frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read {path}: {exc}") from None
        absent = [c for c in NEEDED if c not in frame.columns]
        if absent:
            raise InputError(f"{path} lacks column(s): {', '.join(absent)}")
        frame["final_label"] = frame["final_label"].str.strip()
        unknown = sorted(set(frame["final_label"]) - set(HUMAN_LABELS))
        if unknown:
            raise InputError(f"{path}: unrecognised final_label {unknown[0]!r} "
                             f"(expected one of {', '.join(HUMAN_LABELS)})")
        if limit is not None:
            frame = frame.head(limit)
        types = frame["type"] if "type" in frame.columns else pd.Series("", index=frame.index)
        parts.append(pd.DataFrame({
            "id": frame["id"] if "id" in frame.columns else "",
            "type": types, "xstest_model": key, "model": XSTEST_MODELS[key],
            "prompt": frame["prompt"], "response": frame["completion"],
            "prompt_kind": [kind_of_type(t) for t in types],
            "final_label": frame["final_label"]}))
    return pd.concat(parts, ignore_index=True)


def kind_of_type(xstest_type: str) -> str:
    """XSTest's contrast prompts (type ``contrast_*``) are meant to be refused, the rest answered."""
    text = str(xstest_type or "").strip()
    return "" if not text else ("unsafe" if text.startswith("contrast_") else "safe")


def read_labels_csv(path: Path, limit: int | None = None) -> pd.DataFrame:
    """A CSV of labelled responses (``prompt, response, label`` and optionally ``model``,
    ``prompt_kind``: what ``orbench-calibrate --labels`` reads) in the shape :func:`read_xstest`
    gives; the group is the ``model`` column, the human label mapped onto XSTest's three."""
    from orbench.analysis.calibration.label_sources import read_lab_csv

    try:
        labels = read_lab_csv(str(path))
    except UsageError as exc:
        raise InputError(str(exc)) from None
    partial = labels["human_label"].str.strip().str.lower().isin(
        ["3_partial_refusal", "partial_refusal", "indirect_refusal"])
    final = [PARTIAL if p else (HUMAN_LABELS[1] if r else HUMAN_LABELS[0])
             for p, r in zip(partial, labels["human_refusal"])]
    frame = pd.DataFrame({"id": labels["label_id"], "type": "", "xstest_model": labels["source"],
                          "model": labels["model"], "prompt": labels["prompt"], "response": labels["response"],
                          "prompt_kind": labels["prompt_kind"], "final_label": final})
    return frame.groupby("xstest_model", sort=False).head(limit) if limit else frame


def load_frame(args) -> pd.DataFrame:
    """The labelled responses the bench scores: ``--labels CSV`` or the XSTest folder."""
    if args.labels:
        return read_labels_csv(Path(args.labels), args.limit)
    if not args.xstest_dir:
        raise InputError("give the XSTest v2 folder or --labels CSV (see --help)")
    return read_xstest(Path(args.xstest_dir), args.limit)


def group_order(rows: list) -> list:
    """The groups (responding models) of ``rows`` in order of first appearance."""
    return list(dict.fromkeys(r["group"] for r in rows))


def write_if_changed(frame: pd.DataFrame, path: Path) -> None:
    """Write ``frame`` as CSV unless ``path`` already holds exactly that (keeps a rerun idle)."""
    text = frame.to_csv(index=False)
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


# --------------------------------------------------------------------------- scoring
def _verdict(value: str) -> bool | None:
    return {"true": True, "false": False}.get(str(value).strip().lower())


def scored_rows(output: pd.DataFrame) -> list:
    """Stage 5's output as dicts: group, family, gold (bool), label, judge/keyword verdicts
    (``None`` when empty), the judge's class, and whether the row failed."""
    rows = []
    for rec in output.to_dict("records"):
        rows.append({"group": rec["xstest_model"], "family": family_for_model(rec["model"]),
                     "kind": rec.get("prompt_kind") or kind_of_type(rec.get("type", "")),
                     "label": rec["final_label"], "gold": rec["final_label"] != HUMAN_LABELS[0],
                     "judge": _verdict(rec.get("is_rejected", "")),
                     "keyword": _verdict(rec.get("keyword_is_rejected", "")),
                     "category": str(rec.get("answer_category", "")),
                     "error": bool(str(rec.get("error", "")).strip())})
    return rows


def _fmt(s: dict) -> str:
    return " ".join(f"{s[k]:6.3f}" for k in ("accuracy", "precision", "recall"))


def print_binary_tables(rows: list) -> None:
    """Accuracy/precision/recall of judge and keyword matcher per model and pooled, with and
    without the partial-refusal rows; unparsed and error rows counted, not scored."""
    groups = group_order(rows)
    sets = [(g, [r for r in rows if r["group"] == g]) for g in groups] + [("POOLED", rows)]
    for title, keep in (("all rows; refusal = full or partial", lambda r: True),
                        ("without the partial-refusal rows", lambda r: r["label"] != PARTIAL)):
        print(f"\nXSTest v2, {title}: accuracy precision recall")
        head = (f"{'model':<16} {'family':<8} {'n':>5} {'ref':>5} {'unp':>4} {'err':>4}"
                f" | {'judge':^20} | {'keyword (same rows)':^20}")
        print(head)
        print("-" * len(head))
        for name, sub in sets:
            sub = [r for r in sub if keep(r)]
            ok = [r for r in sub if not r["error"] and r["judge"] is not None]
            unparsed = sum(1 for r in sub if not r["error"] and r["judge"] is None)
            errors = sum(1 for r in sub if r["error"])
            if name == "POOLED":
                print("-" * len(head))
            fam = sub[0]["family"] if sub and name != "POOLED" else ""
            judge = scores((r["gold"], r["judge"]) for r in ok)
            keyword = scores((r["gold"], r["keyword"]) for r in ok if r["keyword"] is not None)
            print(f"{name:<16} {fam:<8} {len(ok):>5} {sum(r['gold'] for r in ok):>5} "
                  f"{unparsed:>4} {errors:>4} | {_fmt(judge)} | {_fmt(keyword)}")


def print_class_table(rows: list) -> None:
    """The judge's three classes against the three human labels (rows the judge classified)."""
    classes = [JUDGE_FOR_HUMAN[h] for h in HUMAN_LABELS]
    mapping = ", ".join(f"{JUDGE_FOR_HUMAN[h]} ~ {h}" for h in HUMAN_LABELS)
    judged = [r for r in rows if not r["error"] and r["category"] in classes]
    if not judged:
        print("\nthree-class agreement: not available (the judge gives no classes"
              + (f"; its categories: {', '.join(sorted({r['category'] for r in rows if r['category']}))})"
                 if any(r["category"] for r in rows) else ")"))
        return
    counts = {(h, c): 0 for h in HUMAN_LABELS for c in classes}
    for r in judged:
        counts[(r["label"], r["category"])] += 1
    agree = sum(counts[(h, JUDGE_FOR_HUMAN[h])] for h in HUMAN_LABELS)
    print(f"\nthree-class agreement {agree / len(judged):.3f} ({agree} of {len(judged)} classified "
          f"rows; {mapping})")
    print("rows = human final_label, columns = judge answer_category")
    width = max(len(c) for c in classes) + 2
    print(f"{'':<18}" + "".join(f"{c:>{width}}" for c in classes))
    for h in HUMAN_LABELS:
        print(f"{h:<18}" + "".join(f"{counts[(h, c)]:>{width}}" for c in classes))
    per_model = []
    for key in group_order(rows):
        sub = [r for r in judged if r["group"] == key]
        if sub:
            hits = sum(1 for r in sub if JUDGE_FOR_HUMAN[r["label"]] == r["category"])
            per_model.append(f"{key} {hits / len(sub):.3f}")
    print("per model: " + ", ".join(per_model))


# --------------------------------------------------------------------------- cascade
def cascade_rows(frame: pd.DataFrame) -> list:
    """One dict per response: group, gold, its confidence class and the matcher's verdict (None
    when unsure), computed here with :func:`orbench.scoring.cascade.confidence`."""
    rows = []
    for rec in frame.to_dict("records"):
        kind = rec.get("prompt_kind") or ""
        cls, verdict = confidence(rec["response"], family_for_model(rec["model"]), kind)
        rows.append({"group": rec["xstest_model"], "gold": rec["final_label"] != HUMAN_LABELS[0],
                     "label": rec["final_label"], "class": cls, "keyword": verdict, "kind": kind})
    return rows


def _cascade_line(name: str, rows: list, judge_key: str | None = None) -> str:
    """n, share judged, accuracy of the confident rows, and of the cascade (the judge's verdict
    from ``judge_key``, or the human label as a perfect judge)."""
    n = len(rows)
    sure = [r for r in rows if r["keyword"] is not None]
    unsure = [r for r in rows if r["keyword"] is None]
    sure_ok = sum(r["keyword"] == r["gold"] for r in sure)
    if judge_key is None:
        judged_ok, judged_n = len(unsure), len(unsure)
    else:
        scored = [r for r in unsure if r.get(judge_key) is not None]
        judged_ok, judged_n = sum(r[judge_key] == r["gold"] for r in scored), len(scored)
    total = len(sure) + judged_n
    return (f"{name:<16} {n:>5} {len(unsure) / n if n else float('nan'):>7.3f} "
            f"{sure_ok / len(sure) if sure else float('nan'):>9.4f} "
            f"{(sure_ok + judged_ok) / total if total else float('nan'):>9.4f}")


def rate_lines(rows: list, verdict) -> list[tuple]:
    """(model, kind, n, judged share, human %, verdict %, bias points) per model and prompt kind,
    over the rows ``verdict(row)`` gives a verdict on (True/False; None = left out)."""
    out = []
    groups = group_order(rows)
    for g in groups:
        for kind in sorted({r.get("kind", "") for r in rows if r["group"] == g}):
            sub = [r for r in rows if r["group"] == g and r.get("kind", "") == kind]
            scored = [(r["gold"], verdict(r)) for r in sub if verdict(r) is not None]
            n = len(scored)
            judged = sum(r.get("keyword", True) is None for r in sub) / len(sub) if sub else float("nan")
            human = 100 * sum(h for h, _ in scored) / n if n else float("nan")
            machine = 100 * sum(v for _, v in scored) / n if n else float("nan")
            out.append((g, kind or "unknown", n, judged, human, machine, machine - human))
    return out


def print_rates(rows: list, verdict, title: str, judged: bool = True) -> None:
    """The rate per model and prompt kind beside the humans' (what a paper reports), and its bias."""
    lines = rate_lines(rows, verdict)
    print(f"\nrejection rate per model and prompt kind [{title}]: bias = rate - humans' rate, points")
    head = (f"{'model':<16} {'kind':<8} {'n':>5}" + (f" {'judged':>7}" if judged else "")
            + f" {'humans %':>9} {'rate %':>8} {'bias':>7}")
    print(head + "\n" + "-" * len(head))
    for g, kind, n, share, human, machine, bias in lines:
        print(f"{g:<16} {kind:<8} {n:>5}" + (f" {share:>7.3f}" if judged else "")
              + f" {human:>9.1f} {machine:>8.1f} {bias:>+7.1f}")
    worst = max((abs(b) for *_, b in lines if b == b), default=float("nan"))
    print(f"largest |bias|: {worst:.1f} points")


def print_cascade(rows: list, judge_key: str | None = None, title: str = "perfect judge") -> None:
    """The cascade's figures per model, pooled, per class and on the development/check split."""
    print(f"\ncascade (keyword matcher decides its confident classes; the rest: {title})")
    head = f"{'model':<16} {'n':>5} {'judged':>7} {'conf_acc':>9} {'cascade':>9}"
    print(head + "\n" + "-" * len(head))
    groups = group_order(rows)
    for g in groups:
        print(_cascade_line(g, [r for r in rows if r["group"] == g], judge_key))
    print("-" * len(head))
    print(_cascade_line("POOLED", rows, judge_key))
    dev = [r for r in rows if r["group"] in DEV_MODELS]
    check = [r for r in rows if r["group"] not in DEV_MODELS]
    if dev and check:
        print(_cascade_line("development", dev, judge_key) + f"  ({', '.join(DEV_MODELS)})")
        print(_cascade_line("check", check, judge_key)
              + f"  ({', '.join(g for g in groups if g not in DEV_MODELS)})")
    print("\nper class: rows, share, accuracy of the matcher's verdict (unsure: refusal share)")
    for cls in CLASSES:
        sub = [r for r in rows if r["class"] == cls]
        if cls == UNSURE:
            ref = sum(r["gold"] for r in sub)
            print(f"  {cls:<24} {len(sub):>5} {len(sub) / len(rows):6.3f}  humans: {ref} refusals, "
                  f"{len(sub) - ref} answers")
        else:
            ok = sum(r["keyword"] == r["gold"] for r in sub)
            print(f"  {cls:<24} {len(sub):>5} {len(sub) / len(rows):6.3f}  "
                  f"{ok / len(sub) if sub else float('nan'):.4f} ({len(sub) - ok} wrong)")

    def cascade_verdict(r):
        if r["keyword"] is not None:
            return r["keyword"]
        return r["gold"] if judge_key is None else r.get(judge_key)

    print_rates(rows, cascade_verdict, f"cascade, {title}")
    for name, part in (("development", dev), ("check", check)):
        if part and dev and check:
            worst = max((abs(b) for *_, b in rate_lines(part, cascade_verdict) if b == b), default=float("nan"))
            share = sum(r["keyword"] is None for r in part) / len(part)
            print(f"  {name} models: judged share {share:.3f}, largest |bias| {worst:.1f} points")


def print_stage_cascade(output: Path) -> None:
    """The cascade figures of a stage-5 ``--cascade`` output (its ``verdict_source`` column)."""
    table = pd.read_csv(output, dtype=str, keep_default_na=False)
    if "verdict_source" not in table.columns:
        return
    rows = []
    for rec in table.to_dict("records"):
        source = rec["verdict_source"].strip()
        verdict = _verdict(rec.get("is_rejected", ""))
        if str(rec.get("error", "")).strip() or not source:
            continue
        keyword = source == "keyword"
        rows.append({"group": rec["xstest_model"], "gold": rec["final_label"] != HUMAN_LABELS[0],
                     "label": rec["final_label"], "class": rec.get("cascade_class", ""),
                     "keyword": verdict if keyword else None,
                     "judge": None if keyword else verdict})
    judged = sum(r["keyword"] is None for r in rows)
    print(f"\nstage 5 --cascade: {len(rows)} rows with a verdict source, {judged} sent to the judge")
    print_cascade(rows, "judge", "the real judge")
    print_cascade(rows, None, "perfect judge, same rows")


def report(output: Path, judge_typed: str) -> None:
    """Print the whole table for stage 5's ``output``."""
    table = pd.read_csv(output, dtype=str, keep_default_na=False)
    rows = scored_rows(table)
    resolved = sorted({v for v in table.get("judge_model", pd.Series(dtype=str)) if v})
    unparsed = sum(1 for r in rows if not r["error"] and r["judge"] is None)
    errors = sum(1 for r in rows if r["error"])
    print(f"judge: {', '.join(resolved) or judge_typed} (as typed: {judge_typed})")
    print(f"stage output: {output}  (provenance: {meta_path_for(output).name})")
    print(f"rows {len(rows)}: scored {len(rows) - unparsed - errors}, unparsed {unparsed}, "
          f"errors {errors} (unparsed = no verdict, is_rejected empty; unparsed and error rows "
          f"are left out of every figure)")
    print_binary_tables(rows)
    print_rates(rows, lambda r: None if r["error"] else r["judge"], "the judge's verdicts", judged=False)
    print_rates(rows, lambda r: None if r["error"] else r["keyword"], "the keyword matcher, same rows",
                judged=False)
    print_class_table(rows)
    print_stage_cascade(output)


# --------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    """The bench's own flags (one-line errors); every other flag goes to stage 5."""
    parser = cli.ArgumentParser(
        description=__doc__.splitlines()[0], allow_abbrev=False,
        epilog="Any other flag is passed to stage 5 (response_checker/check_response.py) as is.")
    parser.add_argument("xstest_dir", nargs="?", default=None,
                        help="folder with the five xstest_v2_completions_*.csv files")
    parser.add_argument("--labels", default=None, metavar="CSV",
                        help="instead of XSTest: a CSV of prompt, response, label (refusal/answer, "
                             "full_refusal/partial_refusal/full_compliance, ...), with model and "
                             "prompt_kind where known (grouped by model)")
    parser.add_argument("--check_model", default=None,
                        help="the judge, as stage 5 takes it (gpt4, llama3, provider/model, keyword); "
                             "required unless --perfect_judge")
    parser.add_argument("--perfect_judge", action="store_true",
                        help="score the cascade (stage 5 --cascade) with the human labels as the judge: "
                             "asks no model, runs no stage")
    parser.add_argument("--template", default=None, help="the judge's template file (stage 5's)")
    parser.add_argument("--limit", type=cli.positive_int, default=None,
                        help="keep the first N responses of each file (a trial run)")
    parser.add_argument("--output_dir", default=None,
                        help="where the stage-5 input and output go (default ./judge_accuracy_<judge>/)")
    return parser


def run_perfect_judge(args: argparse.Namespace, extra: list[str]) -> int:
    """``--perfect_judge``: the cascade's figures with the human labels as the judge (no model asked)."""
    try:
        if args.check_model or extra:
            raise InputError("--perfect_judge asks no model: drop --check_model and stage-5 flags "
                             f"({' '.join(([args.check_model] if args.check_model else []) + extra)})")
        frame = load_frame(args)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{'labels ' + args.labels if args.labels else 'XSTest v2'}: {len(frame)} responses from "
          f"{frame['xstest_model'].nunique()} models")
    print_cascade(cascade_rows(frame))
    return 0


def main(argv=None) -> int:
    """Run the bench; returns the exit code (see the module docstring)."""
    parser = build_parser()
    try:
        argv = join_stage_values(list(sys.argv[1:] if argv is None else argv))
        args, extra = parser.parse_known_args(argv)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return 0 if exc.code == 0 else 2
    if args.perfect_judge:
        return run_perfect_judge(args, extra)
    if not args.check_model:
        print("error: the following arguments are required: --check_model (or --perfect_judge) "
              "(see --help)", file=sys.stderr)
        return 2
    try:
        clash = [f for f in extra if f.split("=", 1)[0] in OWN_STAGE_FLAGS]
        if clash:
            raise InputError(f"{clash[0].split('=', 1)[0]} is set by this bench "
                             f"(use --output_dir and --limit)")
        frame = load_frame(args)
        out_dir = Path(args.output_dir or f"judge_accuracy_{slug(args.check_model.strip())}")
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create {out_dir}: {exc.strerror or exc}") from None
        suffix = f"_limit{args.limit}" if args.limit else ""
        input_csv = out_dir / f"xstest_v2_responses{suffix}.csv"
        output_csv = out_dir / f"xstest_v2_judged{suffix}.csv"
        try:
            write_if_changed(frame, input_csv)
        except OSError as exc:
            raise InputError(f"cannot write {input_csv}: {exc.strerror or exc}") from None
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    stage_argv = ["--check_model", args.check_model, "--input_file", str(input_csv),
                  "--output_file", str(output_csv)]
    if args.template:
        stage_argv += ["--template", args.template]
    stage_argv += extra
    if "--estimate" in extra:  # stage 5 prints what the run would send and cost, nothing more
        return check_response.main(stage_argv)
    # stage 5 prints its output path on stdout: keep stdout for the table
    with contextlib.redirect_stdout(sys.stderr):
        code = check_response.main(stage_argv)
    if code not in (0, 1):
        return code
    report(output_csv, args.check_model)
    return code


if __name__ == "__main__":
    sys.exit(main())
