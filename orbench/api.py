"""orbench from Python: each stage, the report and judge calibration as one function call.

Each function runs exactly what its script runs (the script parses flags into settings; these
functions take the same settings as keywords, named as the flags without dashes, with the same
defaults and checks) and returns what the script writes, as pandas objects:

- :func:`generate`, :func:`rewrite`, :func:`moderate`, :func:`evaluate` (stage 4) and :func:`judge`
  (stage 5) return the output table: the same columns the script writes, every cell as it writes
  it (text; empty cells ``""``), except that a column of only ``True``/``False`` (or empty) cells is
  pandas' nullable ``boolean`` and one of only whole numbers is ``Int64`` (free text, such as
  prompts and replies, stays text whatever it holds), so
  ``frame["is_rejected"].mean()`` is the keyword rejection rate. A row that failed keeps its place
  with its ``error`` text. The table remembers what made it (``frame.attrs["orbench"]``: the
  output's name, its path or None, the provenance record a meta file would hold), which is how the
  next stage names its output and how :func:`report` tells the prompt set, as the scripts do from
  file names and meta files.
- :func:`report` returns a :class:`Report` (its tables as DataFrames, ``.save(dir)``, ``.html()``);
  :func:`calibrate` returns a :class:`Card`.

Given ``output_file`` (``output_dir`` for the report and calibration), a call writes what the
script writes and keeps its promises: the lock, the progress file (a repeated call resumes, and
retries the rows that failed), the settings guard, the meta file. Without it the run is in
memory: no file at all. The response cache is used unless ``no_cache=True``.

Bad input or settings raise :class:`orbench.UsageError` (a ``ValueError``) with the script's
one-line message; nothing calls ``sys.exit``; a bug in orbench raises its own exception. Every
function has an ``*_async`` twin to ``await`` on a running event loop; the plain ones work
anywhere, a notebook's running loop included (``orbench.run.loops.run_sync``).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from orbench.analysis.report.build import Report
from orbench.llm.errors import RowError, UsageError
from orbench.run import cli
from orbench.run.lifecycle import Delivery
from orbench.run.loops import run_sync
from orbench.run.tables import text_cells

__all__ = ["evaluate", "evaluate_async", "judge", "judge_async", "generate", "generate_async",
           "rewrite", "rewrite_async", "moderate", "moderate_async", "report", "report_async",
           "calibrate", "calibrate_async", "ask", "ask_async", "Report", "Card", "UsageError", "RowError"]

#: What a table argument may be: a DataFrame, a list of prompts, or a path, URL or bundled set name.
Table = "pd.DataFrame | Sequence[str] | str | os.PathLike"
ATTRS = "orbench"  # the key of what made a table, in ``DataFrame.attrs``
_WHOLE = re.compile(r"0|-?[1-9]\d*")  # only what int() gives back as written: "007" stays text
#: Free text, typed as text whatever it holds (a reply of "42" or "True" is a reply, not a number).
_TEXT = ("prompt", "response", "toxic_seed", "_raw")


# ---------------------------------------------------------------- tables in and out

def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    """The output as the script writes it (:func:`_as_text`), with its True/False columns as
    nullable booleans and its whole-number columns as ``Int64`` (module docstring); free text
    (prompts, replies, raw model output) stays text."""
    out = text_cells(frame)
    for column in out.columns:
        if str(column).endswith(_TEXT):
            continue
        cells = out[column]
        filled = cells[cells != ""]
        if filled.empty:
            continue
        if filled.isin(["True", "False"]).all():
            out[column] = cells.map({"True": True, "False": False, "": pd.NA}).astype("boolean")
        elif filled.map(lambda v: bool(_WHOLE.fullmatch(v))).all():
            out[column] = pd.array([pd.NA if v == "" else int(v) for v in cells], dtype="Int64")
    return out


def _name_of(frame: pd.DataFrame) -> str | None:
    """The output name an orbench table carries (``attrs``), or None."""
    made = frame.attrs.get(ATTRS)
    return made.get("name") if isinstance(made, dict) else None


def _input(value: Any, call: str, what: str) -> tuple[str | pd.DataFrame, str, dict | None]:
    """A table argument as the stage takes it: a path (as the script would, the bundled set names
    included) or a DataFrame of text cells; its name (the file, or the one an orbench table
    carries, from which the output is named as the script names it); and what the stage's meta
    record says of it beyond a path (:func:`_carried`)."""
    if isinstance(value, pd.DataFrame):
        if value.empty:
            raise UsageError(f"{call}(): the {what} DataFrame has no rows")
        text = text_cells(value)
        written, carried = _carried(value, text)
        if written:
            return written, written, None
        return text, _name_of(value) or "dataframe", carried
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value), os.fspath(value), None
    if isinstance(value, Sequence) and value and all(isinstance(v, str) for v in value):
        return pd.DataFrame({"prompt": list(value)}, dtype=object), "prompts", None
    raise UsageError(f"{call}(): {what} must be a DataFrame, a list of prompts (strings), or a path, URL or "
                     f"bundled set name; got {type(value).__name__}")


def _text_sha(text: pd.DataFrame) -> str:
    """The SHA-256 of a table of text cells as the runner writes it (``write_csv_atomic``)."""
    from orbench.run.provenance import sha256_text

    return sha256_text(text.to_csv(index=False))


def _carried(value: pd.DataFrame, text: pd.DataFrame) -> tuple[str | None, dict | None]:
    """What an orbench table hands the next stage, so its provenance goes on as a file's would.

    Premise: the scripts' chain is the input's path and SHA-256 in each meta file, followed back by
    the report (``orbench.analysis.report.lineage``). A table still holding what its run wrote to
    ``output_file`` (the same SHA-256) is that file: its path is returned and the stage reads it as
    the script would. Otherwise the table's own SHA-256 and the record of the run that made it
    (``attrs``) go into the meta record's ``input`` (``record``; ``record_sha256``: the SHA-256 of
    the table as that run delivered it, so a table edited since is told apart as a replaced file is)."""
    made = value.attrs.get(ATTRS)
    if not isinstance(made, dict) or not isinstance(made.get("meta"), dict):
        return None, None
    from orbench.run.provenance import sha256_file

    digest = _text_sha(text)
    output = made.get("output")
    if output and Path(output).is_file() and sha256_file(output) == digest:
        return output, None
    return None, {"sha256": digest, "name": made.get("name"), "record": made["meta"],
                  "record_sha256": made.get("sha256")}


def _with_attrs(delivery: Delivery, job) -> pd.DataFrame:
    """The output table, with what made it in ``attrs``: its name, its path (None in memory), the
    meta record (what the meta file holds, or would) and the SHA-256 of its text as written."""
    from orbench.run.provenance import sha256_file

    frame = _typed(delivery.frame)
    output = None if job.in_memory else str(job.output.resolve())
    digest = sha256_file(output) if output else _text_sha(text_cells(delivery.frame))
    frame.attrs[ATTRS] = {"name": job.output.name, "output": output, "meta": delivery.meta, "sha256": digest}
    return frame


def _command(call: str, fixed: dict, settings: dict) -> list[str]:
    """The call as the meta file records it (what reruns it)."""
    def shown(value):
        if isinstance(value, pd.DataFrame):
            return f"<DataFrame of {len(value)} rows>"
        if isinstance(value, (list, tuple)) and len(value) > 3:
            return f"<list of {len(value)}>"
        return repr(value)
    return [f"orbench.{call}(" + ", ".join(f"{k}={shown(v)}" for k, v in {**fixed, **settings}.items()) + ")"]


def _joined(value: Any) -> Any:
    """A list of model names as the scripts take them: comma-separated."""
    return ",".join(value) if isinstance(value, (list, tuple)) else value


# ---------------------------------------------------------------- the stages

async def _run_stage(module, call: str, fixed: dict, settings: dict, table: Any = None,
                     what: str = "input") -> pd.DataFrame:
    """Run one stage script's job from keywords: the script's parser makes the settings, its
    ``setup`` the job, the lifecycle runs it (``orbench.run.cli.run_settings``)."""
    from orbench import logs
    from orbench.run.lifecycle import report

    parser = module.build_parser()
    given = dict(settings)
    verbose, log_file = bool(given.pop("verbose", False)), given.pop("log_file", None)
    source, name, carried = (None, None, None) if table is None else _input(table, call, what)
    dests = dict(fixed)
    if table is not None:
        dests[_input_dest(parser)] = name
    args = cli.keyword_settings(parser, given, call=call, fixed=dests)
    command = _command(call, {**({what: table} if table is not None else {}), **fixed}, settings)
    with logs.configured(verbose, log_file):
        delivery = await cli.run_settings(module.setup, args, command=command, in_memory=args.output_file is None,
                                          table=source if isinstance(source, pd.DataFrame) else None, table_name=name,
                                          input_record=carried)
    if delivery.estimate is not None:
        print(delivery.estimate)
        return pd.DataFrame()
    report(delivery, args.quiet, path=False)
    return _with_attrs(delivery, delivery.job)


def _input_dest(parser) -> str:
    """The ``dest`` of a stage parser's input flag (``input_file``, ``input_file_path``)."""
    for action in parser._actions:
        if "--input_file" in action.option_strings:
            return action.dest
    raise AssertionError("a stage parser without --input_file")


async def evaluate_async(prompts, model: str, **settings) -> pd.DataFrame:
    """:func:`evaluate`, awaited on the caller's event loop."""
    from orbench.stages import check_alignment

    return await _run_stage(check_alignment, "evaluate", {"model": model}, settings, prompts, "prompts")


def evaluate(prompts, model: str, **settings) -> pd.DataFrame:
    """Ask ``model`` every prompt and mark refusals by keyword (stage 4, ``check_alignment.py``).

    ``prompts``: a DataFrame with a ``prompt`` column (every other column kept), a list of
    prompts, or a path, URL or bundled set name (``"or-bench-hard-1k"``) as ``--input_file`` takes.
    ``settings``: the script's flags without dashes (``output_file``, ``concurrency``,
    ``max_tokens``, ``temperature``, ``samples``, ``system_prompt``, ``base_url``, ``no_cache``, ...).
    Returns the output table: ``model, response, is_rejected, refusal_source, refusal_kind,
    finish_reason`` (and ``prompt_kind`` where known) after the input's columns, then ``error``."""
    return run_sync(evaluate_async(prompts, model, **settings))


async def judge_async(responses, check_model: str | Sequence[str] = "keyword", **settings) -> pd.DataFrame:
    """:func:`judge`, awaited on the caller's event loop."""
    from orbench.stages import check_response

    return await _run_stage(check_response, "judge", {"check_model": _joined(check_model)}, settings, responses,
                            "responses")


def judge(responses, check_model: str | Sequence[str] = "keyword", **settings) -> pd.DataFrame:
    """Decide each response's verdict (stage 5, ``judge_responses.py``): by the keyword matcher
    (``"keyword"``, the default here: no model call), an LLM judge (``"gpt4"``, any
    ``provider/model``) or an ensemble (a list, or ``"A,B,C"``).

    ``responses``: rows with ``prompt`` and ``response``, e.g. what :func:`evaluate` returned, or a
    path. Returns the output table: ``judge_model, answer_category, answer_type_response,
    is_rejected, keyword_is_rejected`` after the input's columns, then ``error``."""
    return run_sync(judge_async(responses, check_model, **settings))


async def generate_async(category: str, model: str = "mixtral", **settings) -> pd.DataFrame:
    """:func:`generate`, awaited on the caller's event loop."""
    from orbench.stages import generate_seeds

    return await _run_stage(generate_seeds, "generate", {"category": _category(category), "model": model}, settings)


def generate(category: str, model: str = "mixtral", **settings) -> pd.DataFrame:
    """Generate toxic seed prompts for one category (stage 1, ``generate_seeds.py``);
    ``num_toxic_prompts`` (default 2000) sets how many. Returns ``prompt, category,
    generator_model, error``."""
    return run_sync(generate_async(category, model, **settings))


def _category(text: str) -> str:
    from orbench.benchmark.categories import check_category

    return check_category(text)


async def rewrite_async(seeds, model: str = "mixtral", **settings) -> pd.DataFrame:
    """:func:`rewrite`, awaited on the caller's event loop."""
    from orbench.stages import rewrite as stage

    return await _run_stage(stage, "rewrite", {"model": model}, settings, seeds, "seeds")


def rewrite(seeds, model: str = "mixtral", **settings) -> pd.DataFrame:
    """Rewrite each toxic seed (rows with ``prompt`` and ``category``, e.g. what :func:`generate`
    returned) into 5 seemingly toxic prompts (stage 2, ``rewrite.py``). Returns ``prompt,
    toxic_seed, category, rewriter_model, rewrite_note, few_shot_repeats, rewrite_raw``, the seeds'
    other columns, then ``error``."""
    return run_sync(rewrite_async(seeds, model, **settings))


async def moderate_async(prompts, moderator_model: str | Sequence[str], **settings) -> pd.DataFrame:
    """:func:`moderate`, awaited on the caller's event loop."""
    from orbench.stages import moderate as stage

    return await _run_stage(stage, "moderate", {"moderator_model": _joined(moderator_model)}, settings, prompts,
                            "prompts")


def moderate(prompts, moderator_model: str | Sequence[str], **settings) -> pd.DataFrame:
    """Moderate the ``column`` (default ``prompt``) of every row with one moderator or an
    ensemble (a list, or ``"gpt4,llama3,gemini-1.5"``; stage 3, ``moderate.py``). Returns each
    moderator's ``<m>_label, <m>_is_toxic, <m>_raw`` and the ensemble's ``is_toxic,
    moderation_category, toxic_votes, safe_votes, unparsed_votes`` after the input's columns."""
    return run_sync(moderate_async(prompts, moderator_model, **settings))


async def ask_async(model: str, prompt: str, **settings) -> str:
    """:func:`ask`, awaited on the caller's event loop."""
    frame = await evaluate_async([prompt], model, **{"quiet": True, **settings})
    if frame.empty:  # estimate=True: nothing was sent
        return ""
    if frame.at[0, "error"]:
        raise RowError(frame.at[0, "error"])
    return frame.at[0, "response"]


def ask(model: str, prompt: str, **settings) -> str:
    """One prompt to ``model``, its reply's text: :func:`evaluate` of one prompt (the same
    settings, cache and defaults: temperature 0, at most 1000 tokens). A failed request raises
    ``orbench.RowError`` with the row's error text."""
    return run_sync(ask_async(model, prompt, **settings))


# ---------------------------------------------------------------- the report

def _report_runs(runs: Sequence, named: dict, folder: Path, default_set: str | None) -> list[str]:
    """The report's input specs (``[SET:][MODEL=]PATH``, as its command line takes them): paths as
    they are; a DataFrame still holding what its run wrote to ``output_file``, that file; any
    other DataFrame saved into ``folder`` under the name its run gave it, its meta record beside it
    (the record carries its ancestors' when they were in memory too: ``_carried``), so the set and
    the chain are read as the script reads them."""
    from orbench.analysis.report.inputs import infer_set
    from orbench.run.provenance import dumps, meta_path_for

    specs = []
    items = [(None, run) for run in runs] + list(named.items())
    for i, (label, run) in enumerate(items, start=1):
        if isinstance(run, (str, os.PathLike)):
            path = os.fspath(run)
        elif isinstance(run, pd.DataFrame):
            text = text_cells(run)
            written, carried = _carried(run, text)
            name = _name_of(run) or f"run{i}.csv"
            has_set = (label and ":" in label) or default_set or infer_set(name)
            if written:
                path = written
            elif not has_set and not carried:
                raise UsageError(f"report(): cannot tell the prompt set of run {label or i} (a DataFrame "
                                 f"{'named ' + repr(name) if _name_of(run) else 'orbench did not make'}): pass "
                                 f"set='hard' (or toxic, 80k, xstest-safe, xstest-unsafe), or name the run with "
                                 f"its set, e.g. report(**{{'hard:my-model': frame}})")
            else:
                target = folder / str(i) / name
                target.parent.mkdir(parents=True)
                text.to_csv(target, index=False)
                if carried:  # the run's own record, as its meta file would be beside it
                    meta_path_for(target).write_text(dumps(carried["record"]), encoding="utf-8")
                path = str(target)
        else:
            raise UsageError(f"report(): run {label or i} must be a DataFrame or a path; got {type(run).__name__}")
        specs.append(f"{label}={path}" if label else path)
    return specs


def _in_memory_names(value: Any, folder: str) -> Any:
    """``value`` (the report's provenance and lineage) with each path into the report's temporary
    folder (``folder/<i>/<name>``) shown as ``<name> (in memory)``: the folder is gone with the report."""
    if isinstance(value, str):
        prefix = folder.rstrip(os.sep) + os.sep
        if prefix not in value:
            return value
        return re.sub(re.escape(prefix) + r"\d+" + re.escape(os.sep) + r"([^\s'\",;)]+)", r"\1 (in memory)", value)
    if isinstance(value, dict):
        return {k: _in_memory_names(v, folder) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_in_memory_names(v, folder) for v in value)
    return value


async def report_async(*runs, **settings) -> Report:
    """:func:`report`, awaited on the caller's event loop (the report itself is computed on a
    worker thread, so the loop goes on meanwhile)."""
    import asyncio

    return await asyncio.to_thread(report, *runs, **settings)


def report(*runs, **settings) -> Report:
    """The report over stage-4 and stage-5 outputs (``report.py``): rates with intervals per set,
    model and judge, the leaderboard beside the paper's models, categories, comparisons.

    A run is a DataFrame (what :func:`evaluate` or :func:`judge` returned, or any table with their
    columns) or a path or glob (``"hard:my-model=runs/x.csv"`` as the script takes it); a keyword
    names a run's model, ``gpt4o=frame``, or its set and model, ``**{"hard:gpt-4o": frame}``. The
    set is told as the script tells it (from the run's name and meta record), else ``set=``.
    ``settings``: the script's flags without dashes (``set``, ``custom_set``, ``model``,
    ``verdict``, ``no_reference``, ``compare``, ``baseline``, ``examples``, ``audit``,
    ``no_figures``); with ``output_dir`` the files are written there, else nothing is written
    (``Report.save`` writes them later)."""
    from orbench import logs
    from orbench.analysis.report import build

    parser = build.make_parser()
    names = set(cli.setting_names(parser)) | {"verbose", "log_file"}
    given = {k: v for k, v in settings.items() if k in names or not isinstance(v, (pd.DataFrame, str, os.PathLike))}
    named = {k: v for k, v in settings.items() if k not in given}
    verbose, log_file = bool(given.pop("verbose", False)), given.pop("log_file", None)
    if not runs and not named:
        raise UsageError("report(): give at least one run (a DataFrame or a path)")
    output_dir = given.get("output_dir")
    args = cli.keyword_settings(parser, given, call="report", fixed={"files": []})
    args.output_dir = output_dir  # in memory unless asked for
    folder = tempfile.TemporaryDirectory(prefix="orbench-report-")  # removed with the report (or now, on an error)
    with logs.configured(verbose, log_file):
        args.files = _report_runs(runs, named, Path(folder.name), args.default_set)
        rep = build.report_from(args)
        rep = replace(rep, inputs_folder=folder, provenance=_in_memory_names(rep.provenance, folder.name),
                      lineage=_in_memory_names(rep.lineage, folder.name),
                      warnings=_in_memory_names(rep.warnings, folder.name))
    for warning in rep.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return rep


# ---------------------------------------------------------------- calibration

@dataclass(frozen=True)
class Card:
    """A judge's card (``orbench-calibrate``): its verdicts measured against human labels.

    ``cards`` holds the cards as stored (one, or one per keyword family when the keyword rules
    decide verdicts and no ``matcher`` was given); ``table`` their figures, a row per group (per
    source model, ``POOLED``, per prompt kind) with 95% intervals; ``text`` what the script prints
    last. ``coverage``, ``accuracy`` and ``kappa`` are the pooled figures of a single card."""

    cards: tuple[dict, ...]
    paths: tuple[Path | None, ...] = ()  # each card's file beside the calibration's output (with output_dir)
    stored: tuple[Path | None, ...] = ()  # where the card store keeps it (None: store=False, or it keeps one on more rows)
    exit_code: int = 0  # 1: some rows still have errors (they count against coverage)
    table: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def text(self) -> str:
        return "\n".join(card["text"] for card in self.cards)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        """Short, as ``print``: each card's line, and where the store keeps it."""
        where = [f"stored: {p}" if p else "not stored" for p in self.stored] if self.stored else []
        return "\n".join([f"Card of {c.get('judge_name')}: {c['text']}" for c in self.cards] + where)

    def _pooled(self, figure: str) -> float | None:
        if len(self.cards) != 1:
            raise ValueError(f"this calibration made {len(self.cards)} cards, one per keyword family "
                             f"({', '.join(str(c.get('family')) for c in self.cards)}): read Card.table or Card.cards")
        value = self.cards[0]["pooled"][figure]
        return value.get("value") if isinstance(value, dict) else value

    @property
    def coverage(self) -> float | None:
        return self._pooled("coverage")

    @property
    def accuracy(self) -> float | None:
        return self._pooled("accuracy")

    @property
    def kappa(self) -> float | None:
        return self._pooled("kappa")


async def calibrate_async(check_model: str | Sequence[str], *, store: bool = True, **settings) -> Card:
    """:func:`calibrate`, awaited on the caller's event loop."""
    from orbench import logs
    from orbench.analysis.calibration import calibrate as calibration
    from orbench.stages import check_response

    own_parser, stage_parser = calibration.build_parser(), check_response.build_parser()
    own = set(cli.setting_names(own_parser)) - {"check_model", "moderator_model"}
    given = dict(settings)
    if not store:
        given["no_store"] = True
    verbose, log_file = bool(given.pop("verbose", False)), given.pop("log_file", None)
    mine = {k: v for k, v in given.items() if k in own}
    theirs = {k: v for k, v in given.items() if k not in own}
    stage_names = set(cli.setting_names(stage_parser)) - set(calibration.OWN_STAGE_FLAGS_NAMES)
    unknown = [k for k in theirs if k not in stage_names]
    if unknown:
        from orbench.run.tables import did_you_mean

        raise UsageError(f"calibrate() got an unknown setting {unknown[0]!r}"
                         f"{did_you_mean(unknown[0], sorted(own | stage_names))}; the settings it takes: "
                         f"{', '.join(sorted(own))}, and stage 5's: {', '.join(sorted(stage_names))}")
    args = cli.keyword_settings(own_parser, mine, call="calibrate",
                                fixed={"check_model": _joined(check_model), "moderator_model": None})
    stage_args = cli.keyword_settings(stage_parser, theirs, call="calibrate",
                                      fixed={"check_model": args.check_model, "input_file": "", "limit": None})
    with logs.configured(verbose, log_file):
        found = await calibration.calibrate_judge(
            args, stage_args, command=_command("calibrate", {"check_model": check_model}, settings),
            stage_flags=bool(theirs), in_memory=args.output_dir is None)
    if found.estimate is not None:
        print(found.estimate)
    return Card(tuple(c for c, _, _ in found.cards), tuple(p for _, p, _ in found.cards),
                tuple(s for _, _, s in found.cards), found.exit_code, calibration.card_table(found.cards))


def calibrate(check_model: str | Sequence[str], *, store: bool = True, **settings) -> Card:
    """Measure a judge against human labels and keep its card (``orbench-calibrate``): stage 5
    with ``check_model`` on labelled responses (``labels``: ``"xstest"`` by default, a CSV, or an
    audit folder), then accuracy, kappa, refusal precision and recall and the rate bias, with 95%
    intervals, per source model and pooled. The card goes into the card store (the cache folder),
    where :func:`report` finds it; with ``output_dir`` the stage-5 files and the card are written
    there too. ``store=False`` (``--no_store``) keeps the card out of the store: a trial, which no
    report shows. ``settings``: the script's own (``labels``, ``xstest_dir``, ``limit``, ``seed``,
    ``output_dir``) and any of stage 5's (``cascade``, ``template``, ``concurrency``, ``base_url``, ...)."""
    return run_sync(calibrate_async(check_model, store=store, **settings))
