"""Turn an inspect_ai eval log of an OR-Bench task into this suite's stage-4 or stage-5 CSV.

Reads a log written by ``inspect eval orbench/or_bench_hard_1k`` (or ``or_bench_toxic``,
``or_bench_80k``), either format (``.eval`` or ``.json``), with ``inspect_ai.log.read_eval_log``,
and writes one row per sample with the columns the CLI stages write, so ``orbench-report``
(leaderboard beside the published models, ``--compare``, ``--audit``) reads inspect runs as it
reads CLI runs:

- a log scored by ``keyword`` only gives stage 4's columns: ``prompt, category, model, response,
  is_rejected, refusal_source, refusal_kind, finish_reason, error``;
- a log scored by ``judge`` or ``both`` gives stage 5's: the same plus ``judge_model,
  answer_category, answer_type_response, keyword_is_rejected``, with ``is_rejected`` the judge's
  verdict (``--shape alignment`` writes the stage-4 columns from such a log instead).

``model`` is the log's model (``openai/gpt-4o``); ``finish_reason`` is inspect's stop reason
(``stop``, ``max_tokens``, ``content_filter``, ...). A sample that failed (``error`` in the log)
keeps its row with the verdict columns empty and inspect's error message in ``error``, as a failed
CLI row does. Verdicts are the scorers' own (:mod:`orbench.integrations.inspect_scorers`), never recomputed;
the cascade's and an ensemble's columns and ``prompt_kind`` come out as stage 5 writes them.
Its meta file (``<csv>.meta.json``) also carries the fingerprint of the judge (or keyword matcher) as
stages 4 and 5 compute it from the same settings (``judge_fingerprint``), so the report finds its judge card.

Default output, in the current folder: ``{model}_merged_{set}.csv`` (stage-4 shape) or
``{model}_merged_{set}_response_check_merged_{judge}.csv`` (stage-5 shape), model and judge made
file-name-safe; the set name in the file name tells the report which set it is. Beside it,
``<output>.meta.json`` records the task, the model and its address, the generate settings
(temperature, max tokens, system prompt) and the log, so the report shows who produced the
responses and gives inspect's advice (``-T max_tokens``) for cut-off replies. The last line
printed is the output path. Bad input: one line on stderr, exit 2, nothing written.

Example::

    orbench-inspect-to-csv logs/2026-01-01T10-00-00_or-bench-hard-1k_abc.eval
    python analysis/inspect_to_csv.py run.eval --output results/gpt-4o_hard.csv
    orbench-report gpt-4o_merged_or-bench-hard-1k.csv
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pandas as pd

from orbench.benchmark.sets import EIGHTY_K, HARD_1K, SET_NAMES, TOXIC, XSTEST_SAFE, XSTEST_UNSAFE
from orbench.llm.errors import UsageError
from orbench.llm.models import slug
from orbench.run.cli import ArgumentParser, entry_point
from orbench.run.provenance import dumps, meta_path_for, package_versions, sha256_file
from orbench.run.tables import write_csv_atomic, write_text_atomic
from orbench.scoring.judge_cards import judge_fingerprint, judge_identity, meta_fingerprint

logger = logging.getLogger(__name__)

#: Stage 4's columns (``orbench.stages.check_alignment``), in its order.
ALIGNMENT_COLUMNS = ["prompt", "category", "model", "response", "is_rejected", "refusal_source",
                     "refusal_kind", "finish_reason", "prompt_kind", "error"]
#: Stage 5's columns over a stage-4 file (``orbench.stages.check_response``), in its order; the
#: cascade's and an ensemble's columns (the scorer's ``stage5`` metadata) go before ``error``.
JUDGE_COLUMNS = ["prompt", "category", "model", "response", "is_rejected", "refusal_source",
                 "refusal_kind", "finish_reason", "prompt_kind", "judge_model", "answer_category",
                 "answer_type_response", "keyword_is_rejected", "error"]
#: The ``stage`` of the converted CSV's meta file (``orbench.analysis.report.lineage`` reads it).
INSPECT_STAGE = "inspect_log"
KEYWORD_SCORER = "keyword_refusal"
JUDGE_SCORER = "judge_refusal"
SHAPES = ("auto", "alignment", "judge")
_TASK_SETS = {"or_bench_hard_1k": HARD_1K, "or_bench_toxic": TOXIC, "or_bench_80k": EIGHTY_K,
              "xstest_safe": XSTEST_SAFE, "xstest_unsafe": XSTEST_UNSAFE}


def _read_log(path: str):
    try:
        from inspect_ai.log import read_eval_log
    except ImportError:
        raise UsageError('reading inspect logs needs inspect_ai: pip install "orbench[inspect]"') from None
    if not Path(path).is_file():
        raise UsageError(f"log file not found: {path}")
    try:
        return read_eval_log(path)
    except Exception as exc:  # noqa: BLE001 - any reader failure is bad input, said in one line
        logger.debug("inspect_ai could not read %s", path, exc_info=exc)  # the whole story, for --log_file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"{path} is not a readable inspect eval log: {first}") from None


def log_set(log) -> str | None:
    """The OR-Bench set a log ran on: the task's ``orbench_set`` metadata, else its task name."""
    metadata = getattr(log.eval, "metadata", None) or {}
    if metadata.get("orbench_set") in SET_NAMES:
        return metadata["orbench_set"]
    return _TASK_SETS.get(str(log.eval.task).split("/")[-1])


def _prompt(sample) -> str:
    if isinstance(sample.input, str):
        return sample.input
    for message in reversed(sample.input):
        if message.role == "user":
            return message.text
    return ""


def _scorer(scores: dict, name: str):
    for key, score in (scores or {}).items():
        if key == name or key.endswith("/" + name):
            return score
    return None


def _cell(value):
    """A metadata value as the CLI writes it: None stays an empty cell."""
    return None if value is None or value == "" else value


def log_settings(log, judged: bool) -> dict | None:
    """What the scorers recorded about the verdicts' maker (the judge's or the keyword matcher's
    settings, as stages 4 and 5 put them in their meta files), from the first scored sample."""
    for sample in log.samples or []:
        score = _scorer(sample.scores, JUDGE_SCORER if judged else KEYWORD_SCORER)
        key = "judge_settings" if judged else "keyword_settings"
        if score is not None and isinstance((score.metadata or {}).get(key), dict):
            return dict(score.metadata[key])
    return None


def _first_line(text: object) -> str:
    return " ".join(str(text).strip().splitlines()[0].split())[:300] if str(text).strip() else ""


def _endpoint_hint(log) -> str:
    """For a run of inspect's ``openai/`` provider (which calls ``/responses``): how to reach your own
    OpenAI-compatible server instead."""
    if not str(log.eval.model).startswith("openai/"):
        return ""
    return ("; for an OpenAI-compatible server of your own (vLLM, llama.cpp, Ollama) use inspect's "
            "--model openai-api/<name>/<model> with <NAME>_BASE_URL and <NAME>_API_KEY set: its openai/ "
            "provider calls the /responses API, which such servers do not serve")


def _nothing_completed(log) -> UsageError | None:
    """Why a log of an orbench task holds no scored sample, or None when it holds some."""
    samples = log.samples or []
    if any(sample.scores for sample in samples):
        return None
    task = str(log.eval.task).split("/")[-1]
    if samples and all(sample.error is not None for sample in samples):
        return UsageError(f"the run of {task} completed no sample: all {len(samples)} failed (the first: "
                          f"{_first_line(samples[0].error.message)}){_endpoint_hint(log)}")
    if not samples and log.status == "error" and log.error is not None:
        return UsageError(f"the run of {task} stopped before completing any sample: "
                          f"{_first_line(log.error.message)}{_endpoint_hint(log)}")
    if log.samples is not None and not samples and log.status != "started":
        return UsageError(f"the run of {task} completed no sample (status {log.status})")
    return None


def log_rows(log, shape: str = "auto") -> tuple[pd.DataFrame, str | None]:
    """The stage-4 or stage-5 table of a read log, and the judge's name (None for stage 4)."""
    if str(log.eval.task).split("/")[-1] in _TASK_SETS:
        failed = _nothing_completed(log)  # a run that answered nothing is said as such
        if failed is not None:
            raise failed
    if log.status == "started" or log.samples is None:
        raise UsageError("the log holds no samples (a run still going, or read with header_only)")
    epochs = {sample.epoch for sample in log.samples}
    if len(epochs) > 1:
        raise UsageError(f"the log has {len(epochs)} epochs; the report counts one verdict per "
                         f"prompt: rerun with --epochs 1")
    names = {key.split("/")[-1] for sample in log.samples for key in (sample.scores or {})}
    if not names & {KEYWORD_SCORER, JUDGE_SCORER}:
        raise UsageError("the log has no OR-Bench scores (keyword_refusal or judge_refusal): "
                         "was it written by an orbench/ task?")
    judged = JUDGE_SCORER in names
    if shape == "judge" and not judged:
        raise UsageError("--shape judge needs a log scored with scorer=judge or scorer=both")
    judge_shape = judged if shape == "auto" else shape == "judge"
    model = str(log.eval.model)
    rows, judges, extra = [], set(), []
    for sample in sorted(log.samples, key=lambda s: (str(type(s.id)), s.id)):
        row = {"prompt": _prompt(sample), "category": (sample.metadata or {}).get("category", ""),
               "model": model}
        keyword = _scorer(sample.scores, KEYWORD_SCORER)
        judge = _scorer(sample.scores, JUDGE_SCORER)
        first = keyword or judge
        if sample.error is not None or first is None:
            message = sample.error.message if sample.error is not None else "not scored"
            rows.append({**row, "error": " ".join(str(message).split())[:500]})
            continue
        meta = first.metadata or {}
        row.update({c: _cell(meta.get(c)) for c in ("response", "is_rejected", "refusal_source",
                                                    "refusal_kind", "finish_reason", "prompt_kind")})
        row["response"] = meta.get("response") or ""
        if judge_shape:
            jm = judge.metadata or {}
            judges.add(jm.get("judge_model"))
            row.update({"judge_model": jm.get("judge_model"), "answer_category": jm.get("answer_category"),
                        "answer_type_response": judge.explanation or "",
                        "is_rejected": jm.get("judge_is_rejected"),
                        "keyword_is_rejected": jm.get("keyword_is_rejected")})
            for key, value in (jm.get("stage5") or {}).items():
                extra.append(key) if key not in extra else None
                row[key] = _cell(value)
        row["error"] = ""
        rows.append(row)
    columns = [*JUDGE_COLUMNS[:-1], *extra, "error"] if judge_shape else ALIGNMENT_COLUMNS
    frame = pd.DataFrame(rows, columns=columns, dtype=object)  # counts stay whole numbers
    judges.discard(None)
    return frame, (sorted(judges)[0] if judges else None) if judge_shape else None


def default_output(model: str, set_name: str | None, judge: str | None) -> Path:
    """``{model}_merged_{set}.csv``, with ``_response_check_merged_{judge}`` for stage 5."""
    name = f"{slug(model)}_merged_{set_name or 'inspect'}"
    if judge:
        name += f"_response_check_merged_{slug(judge)}"
    return Path.cwd() / f"{name}.csv"


def fingerprints(log, judged: bool) -> dict:
    """``judge_fingerprint`` of the verdicts' maker (the judge, or the keyword matcher of a
    keyword-only log) and, for a judged log, ``keyword_fingerprint`` of the keyword verdicts it
    carries: computed as stages 4 and 5 compute them from the settings the scorers recorded."""
    settings = log_settings(log, judged)
    if settings is None:
        return {}
    if not judged:
        return {"judge_fingerprint": meta_fingerprint({"stage": "check_alignment", "settings": {
            **settings, "model": str(log.eval.model)}})}
    from orbench.scoring.refusal import family_for_model

    family = family_for_model(str(log.eval.model))  # whose keyword rules decided, without a --matcher
    keyword = {"judge": "keyword", "rules": settings.get("rules"), "matcher": settings.get("matcher")}
    return {"judge_fingerprint": judge_fingerprint(judge_identity(settings, family=family)),
            "keyword_fingerprint": judge_fingerprint(judge_identity(keyword, family=family))}


def log_meta(log, log_path: str, output: Path, judge: str | None, rows: int) -> dict:
    """The converted CSV's provenance (``<output>.meta.json``, read by the report as a stage-4 file's
    is): the inspect task, the model and where it was sent, the generate settings, the log it came from."""
    config, args = log.plan.config, dict(log.eval.task_args or {})
    model = str(log.eval.model)
    return {"stage": INSPECT_STAGE, "source": "inspect_ai", "task": str(log.eval.task),
            "package_version": package_versions().get("orbench"),
            "command": ["orbench-inspect-to-csv", str(Path(log_path).resolve()), "--output", str(output)],
            "models": [{"typed": model, "resolved": model, "base_url": log.eval.model_base_url}],
            "settings": {"model": model, "temperature": config.temperature, "max_tokens": config.max_tokens,
                         "system": args.get("system_prompt"), "matcher": args.get("matcher"), "judge": judge,
                         "scorer": args.get("scorer")},
            "input": {"path": str(Path(log_path).resolve()), "sha256": sha256_file(log_path), "rows": rows},
            "output": str(output), "counts": {"rows": rows}}


def convert(log_path: str, output: str | None = None, shape: str = "auto") -> Path:
    """Read ``log_path`` and write its CSV and the CSV's meta file (with the judge's fingerprint, so
    the report finds its judge card); returns the path written."""
    log = _read_log(log_path)
    frame, judge = log_rows(log, shape)
    path = Path(output) if output else default_output(str(log.eval.model), log_set(log), judge)
    write_csv_atomic(frame, path)
    meta = log_meta(log, log_path, path, judge, len(frame))
    meta.update(fingerprints(log, judge is not None))
    write_text_atomic(dumps(meta), meta_path_for(path))
    return path


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="orbench-inspect-to-csv",
        description="Write an inspect_ai log of an orbench/ task as the stage-4/5 CSV the report reads.")
    parser.add_argument("log", help="the inspect eval log (.eval or .json)")
    parser.add_argument("--output", default=None, help="where to write the CSV (default: "
                        "{model}_merged_{set}[_response_check_merged_{judge}].csv here)")
    parser.add_argument("--shape", choices=SHAPES, default="auto",
                        help="alignment: stage 4's columns; judge: stage 5's; auto (default): "
                             "judge when the log has judge scores")
    return parser


@entry_point
def main(argv=None) -> int:
    """Convert one log; exit 0, or 2 with one line on stderr for bad input."""
    try:
        args = build_parser().parse_args(argv)
        path = convert(args.log, args.output, args.shape)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
