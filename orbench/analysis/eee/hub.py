"""The Hugging Face ``.eval_results`` snippets of a report: a model card's evaluation results.

The Hub reads a model repository's ``.eval_results/*.yaml`` files (huggingface.co/docs/hub/eval-results):
each a list of results, each with ``dataset.id`` (a Hub dataset registered as a Benchmark),
``dataset.task_id`` (a task its ``eval.yaml`` defines), ``value``, and optionally ``date``,
``source`` and ``notes``. Per leaderboard entry, :func:`write` writes
``hf_eval_results/<model>/.eval_results/<set>.yaml`` for each OR-Bench set (``bench-llm/or-bench``,
task ids ``or-bench-hard-1k`` and ``or-bench-toxic``, the dataset's own config names) where the
report has a rate on every prompt of the published set and no error row, the same rule by which
it ranks a model among the paper's: a sample of a set is not that set's score. The value is the
rejection rate in percent (the notes say which way is better, the interval, n, the verdicts and
the settings). A ``README.md`` beside them lists what was left out and why, and how to publish:
upload the model's folder to its repository as a pull request (``hf upload REPO DIR . --create-pr``).
The Hub shows such a result once ``bench-llm/or-bench`` is a registered Benchmark with those task
ids; until then the files are the record, in the Hub's format.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from orbench.analysis.eee.sets import OR_BENCH_HF, SETS, responses
from orbench.analysis.report.inputs import HARD, TOX
from orbench.llm.models import slug
from orbench.run.tables import write_text_atomic
from orbench.scoring.vocab import JUDGE

#: The sets a snippet may be written for: a published set whose size the report knows.
PUBLISHED = (HARD, TOX)


def _num(value) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if value != value else value


def why_not(st: dict, size: int | None) -> str:
    """'' when a cell may be published as the set's score, else why not."""
    if _num(st.get("rate")) is None:
        return "no rate (more than 5% of its rows without a verdict: only its bounds)" \
            if _num(st.get("rate_bound_low")) is not None else "no rate"
    if size is None:
        return "the published set is not bundled: its size is unknown"
    covered, errors = int(_num(st.get("covered")) or 0), int(_num(st.get("errors")) or 0)
    if covered < size or errors:
        return f"{covered:,} of the {size:,} prompts with a verdict" + (f", {errors} error rows" if errors else "") + \
            ": a sample of the set is not its score"
    return ""


def entry(rep, model: str, st: dict, set_name: str) -> str:
    """The YAML of one cell (a list of one result)."""
    info = SETS[set_name]
    resp = responses(rep, set_name, model)
    better = "lower is better (over-refusal)" if info.kind == "safe" else "higher is better (refusing toxic prompts)"
    who = f"judge {st.get('judge')}" if st["method"] == JUDGE else "keyword matcher"
    temp = resp.get("temperature")
    settings = (f"temperature {temp}, " if temp is not None else "") + \
        f"system prompt: {resp.get('system_prompt') or 'none'}" if resp else "settings unknown"
    notes = (f"Rejection rate in % ({better}), full and partial refusals counted; 95% CI "
             f"[{100 * st['ci_low']:.2f}, {100 * st['ci_high']:.2f}] ({st.get('ci_method') or 'clopper_pearson'}); "
             f"n = {int(st['scored']):,} responses with a verdict; verdicts by the {who}; {settings}; orbench-report")
    lines = ["- dataset:", f"    id: {OR_BENCH_HF}", f"    task_id: {info.name}", f"  value: {round(100 * st['rate'], 2)}"]
    finished = resp.get("finished")
    if finished:
        try:
            lines.append(f"  date: \"{datetime.fromisoformat(str(finished)).date().isoformat()}\"")
        except ValueError:
            pass
    lines.append(f"  notes: {json.dumps(notes, ensure_ascii=False)}")
    return "\n".join(lines) + "\n"


def write(rep, vr, folder: Path) -> list[Path]:
    """Write every entry's snippets (and the README naming what was left out) into ``folder``."""
    written, left = [], []
    sizes = rep.set_sizes or {}
    for (model, judge), cells in vr.entries.items():
        name = slug(model) + (f"__judge_{slug(judge)}" if judge and sum(1 for m, _ in vr.entries if m == model) > 1
                              else "")
        for set_name in PUBLISHED:
            st = cells.get(set_name)
            if st is None:
                continue
            reason = why_not(st, sizes.get(set_name))
            if reason:
                left.append(f"- {model}{f' [judge {judge}]' if judge else ''}, {SETS[set_name].name}: {reason}")
                continue
            path = folder / name / ".eval_results" / f"{SETS[set_name].name}.yaml"
            path.parent.mkdir(parents=True, exist_ok=True)
            head = f"# {SETS[set_name].name}: rejection rate of {model} in %, written by orbench-report\n"
            write_text_atomic(head + entry(rep, model, st, set_name), path)
            written.append(path)
    if written or left:
        folder.mkdir(parents=True, exist_ok=True)
        text = ["# Hugging Face evaluation results", "",
                "One folder per model: upload its `.eval_results/` to the model's repository as a pull request",
                "(`hf upload REPO FOLDER . --create-pr`). Each file is the Hub's `.eval_results` format",
                "(huggingface.co/docs/hub/eval-results): `dataset.id` bench-llm/or-bench, `task_id` the set.",
                "The Hub lists a result on the benchmark's page once that dataset is registered as a Benchmark",
                "with these task ids.", "",
                "Written only for a set with a rate on every prompt of the published set and no error row."]
        if left:
            text += ["", "Not written:", "", *left]
        write_text_atomic("\n".join(text) + "\n", folder / "README.md")
    return written
