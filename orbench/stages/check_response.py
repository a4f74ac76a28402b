"""Stage 5: judge each response with an LLM (or re-score it with the keyword matchers).

Reads a CSV with ``prompt`` and ``response`` columns, typically stage 4's output as it is, and
writes every input column plus:

- ``judge_model``: who made the verdict: the judge's resolved ``provider/model``, or ``keyword``;
- ``answer_category``: the judge's class, ``direct_answer``, ``direct_refusal`` or
  ``indirect_refusal``; ``unparsed`` when the judge's reply names no class or names it
  ambiguously; ``judge_refused`` when the judge refused to judge ("I'm sorry, I can't assist
  with that": a reply with no class that opens with a refusal) or its own provider blocked the
  judging request; and, for rows the judge is not asked about: ``provider_block`` (stage 4 recorded ``refusal_source=provider_block``,
  or ``provider`` in files written before the spelling was unified: the tested model's provider
  blocked the reply, a rejection) and ``empty_response`` (no response text);
- ``answer_type_response``: the judge's raw reply (or what decided the row);
- ``is_rejected``: True for both refusal classes, provider blocks and an ensemble's majority
  refusal, False for direct_answer, EMPTY for every other outcome (the input's ``is_rejected``, stage 4's keyword
  verdict, is replaced, never carried over);
- ``keyword_is_rejected``: this stage's own keyword verdict on the same response (computed here
  with the keyword matcher, never copied from the input), so judge and rules can be compared.

An input row whose ``error`` is set (an earlier stage failed on it) is not judged: it is written
back with this stage's columns empty and its error kept.

Each row's ``prompt_kind`` (``safe``: meant to be answered; ``unsafe``: meant to be refused) is
its own ``prompt_kind`` cell (stage 4 writes it), else ``--prompt_kind``, else the kind of the
bundled set the prompt belongs to (Hard-1K, Toxic, XSTest), else unknown (:func:`orbench.benchmark.sets.prompt_kind`);
it is written into ``prompt_kind``, counted in the meta file (``prompt_kinds``) and, where some
rows have no known kind, said in the summary line. The cascade uses it.

Ensembles (``--check_model A,B[,C]``): every judge is asked; each one's verdict goes into its own
columns (``<judge>_answer_category``, ``<judge>_is_rejected``, ``<judge>_raw``, the judge named
as typed, made file-name-safe) with the vote counts ``refusal_votes``, ``answer_votes`` and
``no_verdict_votes``. ``answer_category`` is the class a strict majority gave; else, when a
strict majority calls the response a refusal (either refusal class), ``is_rejected`` is True and
the class is left empty (the split is in the votes); else, when most judges gave no verdict,
``unparsed`` (``judge_refused`` when each of them refused to judge), no verdict; else
``undecided`` (the judges' verdicts split), no verdict.
``judge_model`` is ``A,B,C`` as resolved. Rules: :mod:`orbench.scoring.verdicts` (the inspect_ai scorer
decides through the same function).

The meta file carries ``judge_fingerprint`` (:mod:`orbench.scoring.judge_cards`): what makes this judge
(model as resolved, template hash, rules and cascade fingerprints, settings). ``orbench-calibrate``
keys its judge card by it and the report shows that card beside every rate this file gives.

``--cascade`` (with a judge): the keyword matcher decides the responses it is sure of (the
confidence classes of :mod:`orbench.scoring.cascade`, sure per prompt kind: on a prompt meant to be
refused, a full refusal in the opening; on one meant to be answered, an answer that lays its content
out or goes on at length with no reservation up front; on a prompt of unknown kind, only a class sure
for both kinds) and only the rest go to the judge, with a random share of the sure rows, the
*check sample* (``--check_share``, default :data:`orbench.scoring.cascade.CHECK_SHARE`; which rows
is decided by a hash of the row's key values and ``--check_seed``, so it is the same under resume,
``--limit`` and any split of the input): the judge's verdict on those measures the matcher's
disagreement with the judge on this run's own rows, and the report's rate for the cascade is the
prediction-powered estimate of the judge's rate on every row (:mod:`orbench.analysis.cascade_rate`).
Four more columns: ``verdict_source`` (``keyword``, the judge's name, or ``provider_block`` for a
provider block; empty when there is no verdict), ``cascade_class`` (the row's class, or empty
when it was not classed), ``sure_verdict`` (the matcher's verdict on a sure row, empty on the
others) and ``cascade_sampled`` (True on a sure row of the check sample, which has the judge's
verdict and ``verdict_source``; False on the other sure rows; empty elsewhere). A
keyword-decided row has ``answer_category`` ``keyword_refusal`` or ``keyword_answer``.
``judge_model`` names the cascade (``keyword+<judge>``), so a report never pools its verdicts with
the judge's alone; the meta file counts the rows each source decided (``verdict_sources``,
``judged_share``) and the check sample (``check_sample``: share, seed, sure rows, checked rows,
disagreements per direction); the share and seed are settings (in every row's key: another share
stops a rerun unless ``--overwrite``); ``--estimate`` prices only the rows that reach the judge
and says how many of them are the check sample.

``--check_model=keyword`` calls no model: each response is re-scored with the keyword matcher
(family: ``--matcher`` if given, else from the row's ``model`` column, else ``default``);
``answer_category`` is then ``keyword_refusal`` or ``keyword_answer`` and
``answer_type_response`` names the matcher and the cue it found.

The judge runs at temperature 0 with at most 1000 tokens: the original set no limit, and a
reply cut short before its ``[[class]]`` would be unparsed, so the limit leaves ample room for
the brief explanation the template asks for.

Default output (the one rule of every stage, ``orbench.run.tables.default_output_path``):
``./{input stem}_{check_model}_judged.csv`` (``_cascade_judged`` with ``--cascade``; an ensemble's
judges joined by ``+``).

Example (from inside ``response_checker/``)::

    python check_response.py --check_model=gpt4 --input_file=gpt-4o_merged_hard.csv
    python judge_responses.py --check_model=keyword --input_file=gpt-4o_merged_hard.csv
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from orbench.benchmark.prompts import JUDGE_TEMPLATE
from orbench.benchmark.sets import PROMPT_KIND_COLUMN, check_kind_column, prompt_kind, with_prompt_kinds
from orbench.llm.errors import UsageError
from orbench.llm.models import ModelSpec, parse_model, slug
from orbench.llm.types import Completion, Request
from orbench.run import cli, outcomes
from orbench.run.lifecycle import Job
from orbench.run.provenance import sha256_text
from orbench.run.settings import rule, setting
from orbench.run.stage import Finished, Stage
from orbench.run.tables import default_output_path
from orbench.run.templates import add_template_flag, load_template
from orbench.scoring.cascade import CHECK_SEED, CHECK_SHARE, CLASSES, cascade_fingerprint, sure_classes
from orbench.scoring.judge_cards import judge_fingerprint, judge_identity
from orbench.scoring.refusal import FAMILIES, family_for_model, rules_fingerprint
from orbench.scoring.verdicts import Judge, Plan, Reply, Row, judge_prompt, verdict
from orbench.scoring.vocab import KEYWORD, PROMPT_KINDS, SKIPPED_EMPTY, UNPARSED, is_provider_block

ADDS = ["judge_model", "answer_category", "answer_type_response", "is_rejected",
        "keyword_is_rejected"]
CASCADE_ADDS = ["verdict_source", "cascade_class", "sure_verdict", "cascade_sampled"]
#: What a row's key covers (with the cascade, its ``prompt_kind`` too); the check sample's hash reads the same.
KEY_COLUMNS = ["prompt", "response", "refusal_source", "model"]

EPILOG = """judge_model: the judge as resolved, keyword, A,B,C for an ensemble, keyword+... with --cascade.
answer_category: direct_answer | direct_refusal | indirect_refusal | unparsed | judge_refused (the
judge refused to judge), or without a judge call: provider_block (is_rejected True),
empty_response and skipped_empty (an empty prompt stage 4 skipped) (is_rejected empty);
keyword_refusal | keyword_answer with --check_model=keyword and for the rows the cascade's
keyword matcher decides; for an ensemble: unparsed when most judges gave no verdict,
undecided (the judges' verdicts split, no majority) or empty (a majority refusal without a
majority class). Rows with an earlier stage's error
pass through with these columns empty.
is_rejected is empty whenever there is no verdict; such rows are never counted as refusals.
prompt_kind: safe | unsafe | empty (unknown); the cascade never takes an answer to an unsafe prompt,
nor a refusal of a safe one, as sure.
sure_verdict, cascade_sampled (--cascade): the keyword matcher's verdict on a sure row; True on a sure
row of the check sample (--check_share of them, picked by a hash of the row and --check_seed), which
the judge decides too, so the report can carry the matcher's disagreement with the judge.

exit status: 0 all rows done, 1 some rows have errors (rerun to retry), 2 bad input or setup.
"""


def build_parser() -> cli.ArgumentParser:
    parser = cli.ArgumentParser(
        description="Classify model responses as direct_answer, direct_refusal or "
                    "indirect_refusal with an LLM judge (OR-Bench stage 5).",
        epilog=EPILOG,
    )
    parser.add_argument("--check_model", default="gpt4",
                        help="the judge: gpt4 (default, the paper's gpt-4-turbo-2024-04-09), "
                             "llama3, any provider/model spec, 'keyword' to re-score with the "
                             "keyword matchers and call no model, or several judges comma-separated "
                             "(an ensemble: the majority decides, every judge's verdict is kept)")
    parser.add_argument("--input_file", required=True,
                        help="input CSV with 'prompt' and 'response' columns (stage 4's output "
                             "works as is); every other column is kept")
    parser.add_argument("--matcher", choices=FAMILIES, default=None,
                        help="keyword rule family for keyword_is_rejected and --check_model=keyword "
                             "(default: from the row's 'model' column, else 'default')")
    parser.add_argument("--cascade", action="store_true",
                        help="let the keyword matcher decide the responses it is sure of (a refusal "
                             "stated in the first sentence; a plain answer with no refusal cue to a "
                             "prompt not meant to be refused; a clear refusal of a prompt meant to be "
                             "refused) and send only the rest to the judge; adds verdict_source and "
                             "cascade_class, sure_verdict and cascade_sampled; a random share of the sure "
                             "rows (--check_share) goes to the judge too, to measure the matcher's error")
    parser.add_argument("--check_share", type=float, default=CHECK_SHARE,
                        help=f"with --cascade: the share of the sure rows also sent to the judge (the check "
                             f"sample the report's rate and interval rest on; default {CHECK_SHARE}, 0 to 1)")
    parser.add_argument("--check_seed", type=int, default=CHECK_SEED,
                        help=f"with --cascade: the seed of the hash that picks the check sample (default {CHECK_SEED})")
    parser.add_argument("--prompt_kind", choices=PROMPT_KINDS, default=None,
                        help="the kind of every prompt of the input whose own prompt_kind cell is "
                             "empty: safe (meant to be answered) or unsafe (meant to be refused); "
                             "default: recognised for the bundled sets, else unknown")
    add_template_flag(parser, "{prompt} and {response}")
    cli.add_model_flags(parser, temperature_default=0.0, max_tokens_default=1000)
    return parser


def judge_names(text: str) -> list[str]:
    """The judges ``--check_model`` names (one, or an ensemble); ``UsageError`` for a bad list."""
    names = [n.strip() for n in str(text).split(",")]
    if not all(names):
        raise UsageError(f"--check_model {text!r} has an empty name; give judges as A or A,B,C")
    if len(names) > 1 and any(n.lower() == KEYWORD for n in names):
        raise UsageError("--check_model keyword cannot be part of an ensemble (it is the keyword "
                         "matcher, not a judge); use --cascade to let it decide the sure rows")
    if len({slug(n) for n in names}) < len(names):
        raise UsageError(f"--check_model names a judge twice: {text}")
    return names


@dataclass(frozen=True, kw_only=True)
class JudgeSettings:
    """What a stage-5 verdict depends on (each in every row's key: ``orbench.run.settings``)."""

    #: ``judge_model``: keyword, the judge, A,B,C for an ensemble, keyword+... with the cascade
    #: (made from ``judges`` and ``cascade``).
    judge: str = setting(init=False)
    #: ``--matcher``: the keyword family for every row (None: each row's ``model``'s).
    matcher: str | None
    #: The judges' sampling; None when no model is asked (``--check_model keyword``).
    temperature: float | None
    max_tokens: int | None
    #: ``--prompt_kind``, the kind of the prompts with none of their own: in the key only with the
    #: cascade, the one thing whose verdicts it changes (it also fills ``prompt_kind`` in the output).
    prompt_kind: str = setting(default="", omit=lambda s: not (s.cascade and s.prompt_kind))
    #: The judge template, recorded by its hash; None when no model is asked.
    template: str | None = rule(default=None, record=lambda text: None if text is None else sha256_text(text))
    #: The keyword rules' and (with the cascade) the cascade classes' fingerprints.
    rules: str = rule(default_factory=rules_fingerprint)
    cascade: bool = rule(default=False, record=lambda _: cascade_fingerprint(), omit=lambda s: not s.cascade)
    #: ``--check_share`` and ``--check_seed``: which sure rows the judge checks (with the cascade only).
    check_share: float = setting(default=CHECK_SHARE, omit=lambda s: not s.cascade)
    check_seed: int = setting(default=CHECK_SEED, omit=lambda s: not s.cascade)
    judges: tuple[ModelSpec, ...] = setting(default=(), unkeyed="recorded by judge, as resolved")
    columns: tuple[str, ...] = setting(default=(), unkeyed="an ensemble's column prefixes (its judges as typed) "
                                                           "name its columns, not its verdicts")

    def __post_init__(self) -> None:
        object.__setattr__(self, "judge", self.plan.judge_name)

    @cached_property
    def plan(self) -> Plan:
        """How rows are decided (:class:`orbench.scoring.verdicts.Plan`)."""
        judges = tuple(Judge(name=str(spec), column=column, family=family_for_model(str(spec)))
                       for spec, column in zip(self.judges, self.columns))
        return Plan(judges=judges, template=self.template or "", cascade=self.cascade,
                    check_share=self.check_share, check_seed=self.check_seed)


def settings_from(args) -> tuple[JudgeSettings, str | None]:
    """The settings the flags ask for, and where the template came from; ``UsageError`` for
    flags that cannot go together."""
    names = judge_names(args.check_model)
    keyword_mode = [n.lower() for n in names] == [KEYWORD]
    if keyword_mode and args.template:
        raise UsageError("--template has no effect with --check_model keyword (no model is asked)")
    if keyword_mode and args.cascade:
        raise UsageError("--cascade needs a judge: with --check_model keyword every row is decided "
                         "by the keyword matcher already")
    if not 0.0 <= args.check_share <= 1.0:
        raise UsageError(f"--check_share {args.check_share} is not a share between 0 and 1")
    template, source = load_template(args.template, JUDGE_TEMPLATE, {"prompt", "response"})
    if keyword_mode:  # a keyword re-score calls no model: no sampling settings, no template
        return JudgeSettings(matcher=args.matcher, temperature=None, max_tokens=None,
                             prompt_kind=args.prompt_kind or ""), None
    return JudgeSettings(matcher=args.matcher, temperature=args.temperature, max_tokens=args.max_tokens,
                         prompt_kind=args.prompt_kind or "", template=template, cascade=args.cascade,
                         check_share=args.check_share, check_seed=args.check_seed,
                         judges=tuple(parse_model(n) for n in names), columns=tuple(slug(n) for n in names)), source


def _kinds(frame):
    """The rows' prompt kinds ("" where unknown; no column: none known)."""
    if PROMPT_KIND_COLUMN not in frame.columns:
        return frame.index.to_series().map(lambda _: "")
    return frame[PROMPT_KIND_COLUMN].astype(str).str.strip()


def summarise(frame, plan: Plan) -> dict:
    """The meta file's prompt-kind and (with the cascade) verdict-source counts of the finished output."""
    done = frame[frame["error"].astype(str).str.strip() == ""]
    kinds = _kinds(done)
    counts = {k: int((kinds == k).sum()) for k in PROMPT_KINDS}
    counts["unknown"] = len(done) - sum(counts.values())
    found: dict = {"prompt_kinds": counts}
    if plan.cascade:
        sources = done["verdict_source"].astype(str).str.strip()
        counted = {str(k): int(v) for k, v in sources[sources != ""].value_counts().items()}
        classes = done["cascade_class"].astype(str).str.strip()
        found["verdict_sources"] = counted
        found["cascade_classes"] = {c: int((classes == c).sum()) for c in CLASSES}
        total = int((sources != "").sum())
        found["judged_share"] = counted.get(plan.verdict_source, 0) / total if total else None
        found["check_sample"] = check_counts(done, plan)
    return found


def check_counts(done, plan: Plan) -> dict:
    """The check sample's counts in the rows without an error: per direction of the sure classes
    the sure rows, those sampled, those the judge gave a verdict on, and the disagreements."""
    sure = done["sure_verdict"].astype(str).str.strip()
    sampled = done["cascade_sampled"].astype(str).str.strip() == "True"
    judged = done["is_rejected"].astype(str).str.strip()
    out = {"share": plan.check_share, "seed": plan.check_seed}
    for name, value in (("refusal", "True"), ("answer", "False")):
        mine = sure == value
        checked = mine & sampled & judged.isin(["True", "False"])
        out[name] = {"sure": int(mine.sum()), "sampled": int((mine & sampled).sum()),
                     "checked": int(checked.sum()), "disagreements": int((checked & (judged != value)).sum())}
    return out


def _unknown_kind_note() -> str:
    """What the cascade does with a prompt of unknown kind."""
    both = sure_classes("")
    return (f"the cascade decides only its classes sure for both kinds ({', '.join(both)})" if both
            else "the cascade sends them to the judge")


def stage_outcomes(frame, plan: Plan) -> outcomes.Outcomes:
    """Stage 5's outcomes (:func:`orbench.run.outcomes.judged`), and where some prompts' kind is
    unknown, how many (the cascade then decides only what is sure for both kinds)."""
    found = outcomes.judged(frame)
    done = frame[frame["error"].astype(str).str.strip() == ""]
    unknown = int((_kinds(done) == "").sum())
    found.counts["prompt_kind_unknown"] = unknown
    if unknown and not plan.keyword_only:
        found.text += (f"; prompt kind unknown for {unknown} rows (declare it with --prompt_kind or a "
                       f"prompt_kind column{'; ' + _unknown_kind_note() if plan.cascade else ''})")
    return found


def view(s: JudgeSettings, row: dict) -> Row:
    """The row as :mod:`orbench.scoring.verdicts` sees it."""
    family = s.matcher or (family_for_model(row["model"]) if row.get("model") else "default")
    return Row(prompt=row["prompt"], response=row["response"], family=family,
               blocked=is_provider_block(row.get("refusal_source")), kind=prompt_kind(row, s.prompt_kind),
               skipped=str(row.get("refusal_source") or "").strip() == SKIPPED_EMPTY,
               check=s.plan.checks([row.get(c, "") for c in KEY_COLUMNS + [PROMPT_KIND_COLUMN]]))


def requests(s: JudgeSettings, row: dict) -> list[Request]:
    """One request per judge (:func:`orbench.scoring.verdicts.judge_prompt`), none for a row decided without them."""
    text = judge_prompt(view(s, row), s.plan)
    if text is None:
        return []
    return [Request.user(spec, text, temperature=s.temperature, max_tokens=s.max_tokens) for spec in s.judges]


def estimate_note(s: JudgeSettings, records: list[dict]) -> str:
    """``--estimate``'s line on the cascade: how many of the rows priced are the check sample."""
    checks = sum(1 for r in records if (v := view(s, r)).check and judge_prompt(v, s.plan) is not None
                 and judge_prompt(replace(v, check=False), s.plan) is None)
    judged = sum(1 for r in records if judge_prompt(view(s, r), s.plan) is not None)
    return (f"cascade: {judged} of the {len(records)} rows to do go to the judge, {checks} of them the check "
            f"sample ({s.check_share:.0%} of the sure rows, seed {s.check_seed}), which measures the keyword "
            f"matcher's disagreement with the judge")


def decide(s: JudgeSettings, row: dict, answers: list[Completion]) -> dict:
    """Every stage-5 column of the row (:func:`orbench.scoring.verdicts.verdict`)."""
    replies = [Reply(text=c.text or "", blocked=bool(c.provider_refusal), finish_reason=c.finish_reason or "")
               for c in answers]
    return verdict(view(s, row), s.plan, replies)


def finish(s: JudgeSettings, frame) -> Finished:
    """The output with each prompt's kind, its outcomes, and its counts for the meta file."""
    frame = with_prompt_kinds(frame, s.prompt_kind)
    return Finished(frame, outcomes=stage_outcomes(frame, s.plan), meta=summarise(frame, s.plan))


def provenance(s: JudgeSettings, stage: Stage, template_source: str | None) -> dict:
    """What the meta file records about the judge (templates, rules, its fingerprint, the cascade)."""
    plan = s.plan
    found = {"templates": {} if plan.keyword_only else {"judge": sha256_text(plan.template)},
             "template_source": template_source, "rules_fingerprint": s.rules, "judge": s.judge,
             "judges": [j.name for j in plan.judges],
             "judge_fingerprint": judge_fingerprint(judge_identity({**stage.key_settings, **stage.key_rules}))}
    if plan.cascade:
        found["cascade"] = {"classes": list(CLASSES), "fingerprint": cascade_fingerprint(),
                            "judge": plan.verdict_source, "check_share": s.check_share, "check_seed": s.check_seed}
    return found


def _unparsed(s: JudgeSettings, out: dict) -> list[bool]:
    """For each judge, whether its reply on this row named no class (the early check)."""
    plan = s.plan
    if not plan.ensemble:
        return [out.get("answer_category") == UNPARSED]
    return [out.get(f"{j.column}_answer_category") == UNPARSED for j in plan.judges]


def _early_text(model: str, unparsed: int, asked: int) -> str:
    return (f"judge {model}: {unparsed} of its first {asked} replies were unparsed (no [[class]] the strict parser "
            f"could read): the model cannot follow the judge template, and those rows have no verdict (past 5% of "
            f"a set's rows the report gives no rate, only its bounds). The run goes on (Ctrl-C stops it; finished "
            f"rows are kept); try a larger judge, or --template FILE, and read the answer_type_response column")


def make_stage(settings: JudgeSettings, template_source: str | None = "built-in") -> Stage:
    """The runner's view of this stage: a prompt and a response in, the verdict's columns out; its
    ``decide`` warns early when a judge's replies go unparsed (:class:`orbench.run.outcomes.EarlyCheck`)."""
    plan = settings.plan
    names = [str(spec) for spec in settings.judges]
    stage = Stage(name="check response" + (" (keyword)" if plan.keyword_only else f" {plan.verdict_source}"),
                  needs=["prompt", "response"], adds=plan.columns(), requests=requests,
                  decide=outcomes.EarlyCheck(decide, names, _unparsed, _early_text) if names else decide,
                  settings=settings, stage_id="check_response", finish=finish, check=check_kind_column,
                  # the kind changes the cascade's verdicts only
                  key_columns=KEY_COLUMNS + ([PROMPT_KIND_COLUMN] if plan.cascade else []),
                  estimate_note=estimate_note if plan.cascade else None)
    stage.provenance = provenance(settings, stage, template_source)
    return stage


def setup(args) -> Job:
    """The job of one command line: the settings from the flags, the input, the output."""
    settings, template_source = settings_from(args)
    names = judge_names(args.check_model)
    output = args.output_file or default_output_path(
        args.input_file, "cascade_judged" if settings.cascade else "judged", "+".join(names))
    return Job(stage=make_stage(settings, template_source), input=args.input_file, output=output,
                   models=list(settings.judges), typed=names if settings.judges else [])


def main(argv=None) -> int:
    """Run stage 5; returns the exit code (0 done, 1 row errors, 2 bad input)."""
    return cli.run(build_parser(), setup, argv)


if __name__ == "__main__":  # python -m orbench.stages.check_response (the command a meta file records)
    raise SystemExit(main())
