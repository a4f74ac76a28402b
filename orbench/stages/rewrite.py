"""Stage 2: rewrite each toxic seed into 5 prompts that look toxic but are safe to answer.

Reads a CSV of seeds (``--toxic_seed_path``, the output of stage 1) with the columns ``prompt``
and ``category``; any further columns are kept. One call per seed (temperature 0.7, the paper's
setting; the few-shot template is ``orbench.benchmark.prompts.REWRITE_TEMPLATE``, or the text of
``--template FILE`` with the placeholder ``{seed}``) asks for 5 rewrites in ``[[1. ...]]`` form,
read with ``orbench.scoring.parsing.reply_items``, as stage 1 reads its replies.

Writes ``--output_file`` (default ``./{input stem}_rewrite.csv`` in the current directory, as the
original tool: ``../toxic_prompt_generator/harmful_prompts.csv`` -> ``./harmful_prompts_rewrite.csv``)
with one row per rewrite, seeds in input order:

- ``prompt``: the rewritten prompt;
- ``toxic_seed``: the seed it came from; ``category``: the seed's category;
- ``rewriter_model``: the model that wrote it;
- ``rewrite_note``: empty, or why the row is not a full set (``no rewrite parsed from reply``,
  ``every rewrite in the reply repeated a few-shot example``, ``only 3 of 5 rewrites parsed
  from reply``, ``empty seed``, ``blocked by the provider``);
- ``few_shot_repeats``: how many items of this seed's reply repeated an example of the template
  (an example rewrite or an example seed, compared after ``normalise_for_dedup``) and were
  dropped; the same number on every row of the seed, empty on a failed row;
- ``rewrite_raw``: the model's reply, only on rows where no rewrite was kept from it;
- the seed file's other columns, then ``error`` (a failed call, after the SDK's retries; such a
  row has an empty ``prompt`` and the seed in ``toxic_seed``; a rerun retries it).

A model that copies the few-shot block back would otherwise have the template's own example
rewrites accepted as new prompts: such items are dropped before the 5 are taken, and counted
(``few_shot_repeats`` and the summary line). A seed whose reply yields no rewrite stays as one
row with an empty ``prompt`` and a note, so nothing is lost silently. Rewrites are deduplicated
across the whole file (near-exact match, ``orbench.scoring.parsing.normalise_for_dedup``; the first
occurrence in input order wins) after the runner has assembled the output, which is then
rewritten atomically.

Example (the original command, from inside this folder)::

    MISTRAL_API_KEY=... python mixtral_rewrite_only.py \\
        --toxic_seed_path=../toxic_prompt_generator/harmful_prompts.csv

Resume: built on ``orbench.run.stage.run_stage``; a rerun skips seeds already rewritten (their
replies are in ``<output>.progress.jsonl``) and retries the ones that failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pandas as pd

from orbench.benchmark.prompts import REWRITE_TEMPLATE
from orbench.llm.errors import UsageError
from orbench.llm.models import ModelSpec, parse_model
from orbench.llm.types import Completion, Request
from orbench.run.cli import ArgumentParser, add_model_flags, run
from orbench.run.lifecycle import Job
from orbench.run.outcomes import WARN_SHARE
from orbench.run.provenance import sha256_text
from orbench.run.settings import rule, setting
from orbench.run.stage import Finished, Stage
from orbench.run.tables import default_output_path
from orbench.run.templates import add_template_flag, load_template
from orbench.scoring.parsing import dedupe, example_forms, normalise_for_dedup, reply_items

REWRITES_PER_SEED = 5
DEFAULT_MODEL = "mixtral"  # -> mistral/open-mixtral-8x7b, the paper's rewriter
NEEDS = ("prompt", "category")
ADDS = ("toxic_seed", "rewriter_model", "rewrite_note", "few_shot_repeats", "rewrite_raw")
FIRST_COLUMNS = ("prompt", "toxic_seed", "category", "rewriter_model", "rewrite_note",
                 "few_shot_repeats", "rewrite_raw")
NO_REWRITE = "no rewrite parsed from reply"
ONLY_EXAMPLES = "every rewrite in the reply repeated a few-shot example"


def build_parser() -> ArgumentParser:
    """The command line of this stage."""
    parser = ArgumentParser(
        prog="rewrite.py",
        description="Rewrite toxic seeds into prompts that look toxic but are safe to answer "
                    f"(OR-Bench stage 2): {REWRITES_PER_SEED} rewrites per seed, one call per seed.",
        epilog="Example: python rewrite.py --toxic_seed_path=../toxic_prompt_generator/harmful_prompts.csv\n"
               "Output columns: prompt (the rewrite), toxic_seed, category, rewriter_model, rewrite_note, "
               "few_shot_repeats, rewrite_raw, the seed file's other columns, error.",
    )
    parser.add_argument("--toxic_seed_path", "--input_file", dest="input_file", default=None,
                        metavar="PATH",
                        help="the seed CSV (columns prompt, category), a local path or any URL pandas "
                             "reads; required (--input_file is the same flag)")
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help="rewriter model, provider/model or a short name (default: mixtral = "
                             "mistral/open-mixtral-8x7b, as in the paper)")
    add_model_flags(parser, temperature_default=0.7, max_tokens_default=1000,
                    output_help="where to write the rewrites (default: ./{input stem}_rewrite.csv in "
                                "the current directory)",
                    limit_help="rewrite only the first N seeds (a trial run)")
    add_template_flag(parser, "{seed}")
    return parser


@dataclass(frozen=True, kw_only=True)
class RewriteSettings:
    """What a rewrite depends on (each in every row's key: ``orbench.run.settings``)."""

    model: ModelSpec = setting(record=str)
    temperature: float
    max_tokens: int
    #: The few-shot template (placeholder ``{seed}``), recorded by its hash.
    template: str = rule(record=sha256_text)
    per_seed: int = rule(default=REWRITES_PER_SEED)

    @cached_property
    def examples(self) -> frozenset[str]:
        """The template's own example texts (:func:`orbench.scoring.parsing.example_forms`): a reply item
        that repeats one is dropped and counted, never taken as a rewrite."""
        return example_forms(self.template)


def _row(s: RewriteSettings, seed: str, prompt: str = "", note: str = "", raw: str = "", repeats: int = 0) -> dict:
    return {"prompt": prompt, "toxic_seed": seed, "rewriter_model": str(s.model),
            "rewrite_note": note, "few_shot_repeats": repeats, "rewrite_raw": raw}


def requests(s: RewriteSettings, record: dict) -> list[Request]:
    """One call per seed (none for an empty seed): the template filled in with it."""
    seed = str(record.get("prompt", ""))
    if not seed.strip():
        return []
    return [Request.user(s.model, s.template.format(seed=seed.strip()), temperature=s.temperature,
                         max_tokens=s.max_tokens)]


def decide(s: RewriteSettings, record: dict, answers: list[Completion]) -> list[dict]:
    """One output row per rewrite read from the reply, or one row with a note saying why none."""
    seed = str(record.get("prompt", ""))
    if not answers:
        return [_row(s, seed, note="empty seed; nothing to rewrite")]
    reply = answers[0]
    if reply.provider_refusal:
        return [_row(s, seed, note=f"blocked by the provider ({reply.finish_reason})", raw=reply.text)]
    fresh, repeats = reply_items(reply.text, s.examples)  # as stage 1 reads its replies
    items = dedupe(fresh)[:s.per_seed]
    if not items:
        return [_row(s, seed, note=ONLY_EXAMPLES if repeats else NO_REWRITE, raw=reply.text, repeats=repeats)]
    note = "" if len(items) == s.per_seed else f"only {len(items)} of {s.per_seed} rewrites parsed from reply"
    return [_row(s, seed, prompt=item, note=note, repeats=repeats) for item in items]


def make_stage(settings: RewriteSettings, template_source: str = "built-in") -> Stage:
    """The runner's view of this stage: one seed row in, one output row per rewrite out."""
    return Stage(name="rewrite", needs=NEEDS, adds=ADDS, requests=requests, decide=decide, settings=settings,
                 stage_id="rewrite", finish=finish,
                 provenance={"templates": {"rewrite": sha256_text(settings.template)},
                             "template_source": template_source})


def few_shot_repeats(frame: pd.DataFrame) -> int:
    """Few-shot repeats dropped over the whole output, counting each seed (key) once.

    Every row of a seed carries the seed's count, and input rows with the same seed and category
    share one request, so the count is summed over distinct (``toxic_seed``, ``category``).
    """
    if "few_shot_repeats" not in frame.columns or frame.empty:
        return 0
    counts = pd.to_numeric(frame["few_shot_repeats"], errors="coerce").fillna(0).astype(int)
    keys = frame["toxic_seed"].astype(str) + "\0" + frame["category"].astype(str)
    return int(counts.groupby(keys).max().sum())


def finalise(frame: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Tidy the runner's assembled output: failed rows, cross-file dedup, column order.

    A failed row (non-empty ``error``) still holds the seed in ``prompt``: it moves to
    ``toxic_seed`` and ``prompt`` is emptied, so the seed is never mistaken for a rewrite.
    Non-empty rewrites are then deduplicated over the whole file, first occurrence kept.
    Returns the new frame and the number of duplicates dropped.
    """
    frame = frame.copy()
    failed = frame["error"].astype(str).str.strip() != ""
    empty_seed = frame["toxic_seed"].astype(str) == ""
    frame.loc[failed & empty_seed, "toxic_seed"] = frame.loc[failed & empty_seed, "prompt"]
    frame.loc[failed, "prompt"] = ""
    seen: set[str] = set()
    keep = []
    for text in frame["prompt"].astype(str):
        form = normalise_for_dedup(text)
        keep.append(not form or form not in seen)
        if form:
            seen.add(form)
    dropped = keep.count(False)
    frame = frame[keep]
    columns = [c for c in FIRST_COLUMNS if c in frame.columns]
    columns += [c for c in frame.columns if c not in columns and c != "error"] + ["error"]
    return frame[columns].reset_index(drop=True), dropped


def finish(s: RewriteSettings, frame: pd.DataFrame) -> Finished:
    """The output tidied (:func:`finalise`), its counts for the meta file and the summary, and a
    warning when more than 5% of the seeds gave no parsable rewrite."""
    repeats = few_shot_repeats(frame)
    frame, dropped = finalise(frame)
    kept = int((frame["prompt"] != "").sum())
    unparsed = int((frame["rewrite_note"] == NO_REWRITE).sum())
    done = frame[frame["error"].astype(str).str.strip() == ""]
    seeds = int(done[["toxic_seed", "category"]].drop_duplicates().shape[0])
    counts = {"rewrites_kept": kept, "duplicates_dropped": dropped, "few_shot_repeats_dropped": repeats,
              "seeds_without_parsable_rewrite": unparsed}
    line = (f"rewrite: {kept} rewrites kept, {dropped} duplicates dropped, {repeats} few-shot example repeats "
            f"dropped, {unparsed} seeds with no parsable rewrite")
    warnings = []
    if seeds and unparsed / seeds > WARN_SHARE:
        warnings.append(f"{unparsed} of {seeds} seeds ({100 * unparsed / seeds:.0f}%) gave no parsable rewrite "
                        f"(rewrite_note '{NO_REWRITE}'; the reply is in rewrite_raw)")
    return Finished(frame, meta={"rewrite_counts": counts}, lines=[line], warnings=warnings)


def setup(args) -> Job:
    """The job of one command line: the settings from the flags, the seed file, the output."""
    if not args.input_file:
        raise UsageError("no seed file given: pass --toxic_seed_path=PATH (a CSV with columns "
                         "prompt, category)")
    output = Path(args.output_file) if args.output_file else default_output_path(args.input_file, "rewrite")
    template, source = load_template(args.template, REWRITE_TEMPLATE, {"seed"})
    settings = RewriteSettings(model=parse_model(args.model), temperature=args.temperature,
                               max_tokens=args.max_tokens, template=template)
    return Job(stage=make_stage(settings, source), input=args.input_file, output=output,
               models=[settings.model], typed=[args.model])


def main(argv=None) -> int:
    """Command-line entry point; returns the exit code (0 done, 1 some seeds failed, 2 bad input)."""
    return run(build_parser(), setup, argv)


if __name__ == "__main__":  # python -m orbench.stages.rewrite (the command a meta file records)
    raise SystemExit(main())
