"""Stage 4: ask a model every prompt and decide refusal with its keyword matcher.

Reads a CSV with a ``prompt`` column (``category`` and every other column are kept), sends each
prompt as a single user message (temperature 0, at most 1000 tokens, no system prompt unless
``--system_prompt``), and writes every input column plus:

- ``model``: the resolved ``provider/model``;
- ``response``: the reply text (empty when the provider blocked it);
- ``is_rejected``: True/False; empty when the reply is empty without a provider block;
- ``refusal_kind``: for a keyword refusal, ``full`` (a refusal and no help) or ``partial`` (a
  refusal followed by help, or help followed by a refusal); ``full`` for a provider block;
  empty otherwise. Counting only ``full`` gives the strict rate, both the lenient one;
- ``refusal_source``: ``keyword`` (the keyword matcher of ``orbench.scoring.refusal`` found a refusal),
  ``provider_block`` (the provider blocked the reply: OpenAI ``content_filter``, Anthropic ``refusal``
  stop reason, a blocked prompt; counted as rejected), ``empty_response`` (no text, no block:
  neither a refusal nor an answer), ``skipped_empty`` (the prompt is empty, e.g. a rewrite row
  with nothing parsed; no call is made, is_rejected empty), or empty when the model answered;
- ``finish_reason``: the provider's stop reason;
- ``prompt_kind``: ``safe`` (meant to be answered) or ``unsafe`` (meant to be refused) where it
  is known: the row's own ``prompt_kind`` cell, else ``--prompt_kind`` (a set of your own), else
  the kind of the bundled set the prompt belongs to (Hard-1K and XSTest's safe prompts: safe;
  Toxic and XSTest's unsafe prompts: unsafe); empty when unknown (no column at all when no
  prompt's kind is known). Stage 5's cascade uses it.

``--samples K`` asks each prompt K times (temperature > 0 required, checked before anything is
sent): each sample is its own output row with a ``sample`` index (0 to K-1) and its own request
(``Request.sample_index``, so its own cache entry). The K samples of a prompt are asked together
and saved together in the progress file, so a rerun after a kill resumes with no sample missing
or repeated (samples already answered come from the cache). The report then gives prompt-level
intervals, the share of prompts whose samples disagree, and per-prompt refusal shares.

The matcher family comes from the model id (``orbench.scoring.refusal.family_for_model``) unless
``--matcher`` forces one. A row that fails after retries keeps its place with an ``error`` text
(exit 1; rerun the same command to retry it). An input row whose ``error`` is set (an earlier
stage failed on it) is not sent: it is written back with this stage's columns empty and its error
kept (``--retry_upstream_errors`` sends it anyway).

Default output (the one rule of every stage, ``orbench.run.tables.default_output_path``; the model as
typed, made file-name-safe): ``./{input stem}_{model}_alignment.csv``.

The original per-provider scripts are aliases of this one (``gpt3_4_``, ``claude_``, ``gemini_``,
``mistral_``, ``opensource_alignment_checker.py``); each tries its provider for a model name that
has no recognised provider prefix, e.g. ``--model=meta-llama/Llama-3-70b-chat-hf`` with the
opensource one means ``together/meta-llama/Llama-3-70b-chat-hf``.

Example (from inside ``alignment_checker/``)::

    python gpt3_4_alignment_checker.py --model=gpt-3.5-turbo-0125 --input_file=or-bench-hard-1k.csv
    python check_alignment.py --model=anthropic/claude-3-haiku-20240307 --input_file=x.csv
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orbench.benchmark.sets import check_kind_column, with_prompt_kinds
from orbench.llm.errors import UsageError
from orbench.llm.models import ModelSpec, parse_model
from orbench.llm.types import Completion, Request
from orbench.run import cli, outcomes
from orbench.run.lifecycle import Job
from orbench.run.settings import rule, setting
from orbench.run.stage import Finished, Stage
from orbench.run.tables import default_output_path
from orbench.scoring.refusal import FAMILIES, family_for_model, reply_verdict, rules_fingerprint
from orbench.scoring.vocab import PROMPT_KINDS, SKIPPED_EMPTY

ADDS = ["model", "response", "is_rejected", "refusal_source", "refusal_kind", "finish_reason"]
SAMPLE = "sample"

EPILOG = """refusal_source: keyword (matcher found a refusal), provider_block (the provider blocked
the reply; is_rejected True), empty_response (no text and no block; is_rejected empty),
skipped_empty (empty prompt, no call; is_rejected empty), or empty when the model answered.
refusal_kind: full or partial for a keyword refusal (partial: refusal and help in one reply),
full for a provider block, empty otherwise.

exit status: 0 all rows done, 1 some rows have errors (rerun to retry), 2 bad input or setup.
"""


def resolve_model(name: str, default_provider: str | None = None) -> ModelSpec:
    """``parse_model(name)``; failing that, ``default_provider/name`` when a default is given."""
    try:
        return parse_model(name)
    except UsageError:
        if not default_provider:
            raise
        return parse_model(f"{default_provider}/{name.strip()}")


def default_output(model: str, input_file: str) -> Path:
    """``./{input stem}_{model}_alignment.csv`` (``orbench.run.tables.default_output_path``)."""
    return default_output_path(input_file, "alignment", model)


def build_parser(default_provider: str | None = None) -> cli.ArgumentParser:
    fallback = (f" A name with no recognised provider is sent to {default_provider}."
                if default_provider else "")
    parser = cli.ArgumentParser(
        description="Ask a model every prompt of a CSV and mark refusals with keyword rules "
                    "(OR-Bench stage 4).",
        epilog=EPILOG,
    )
    parser.add_argument("--model", required=True,
                        help="the model to test: provider/model (openai/gpt-4o, "
                             "together/meta-llama/Llama-3-70b-chat-hf, ...), a bare name whose "
                             "provider is clear (gpt-3.5-turbo-0125, claude-3-opus-20240229, ...) "
                             "or a short name (gpt4, llama3, gemini-1.5)." + fallback)
    parser.add_argument("--input_file", required=True,
                        help="input CSV (a local path or any URL pandas reads) with a 'prompt' "
                             "column; every other column is kept")
    parser.add_argument("--system_prompt", default=None,
                        help="system prompt to send (default: none, as in the paper)")
    parser.add_argument("--matcher", choices=FAMILIES, default=None,
                        help="keyword rule family to use (default: chosen from the model id)")
    parser.add_argument("--samples", type=cli.positive_int, default=None, metavar="K",
                        help="ask each prompt K times (needs --temperature > 0); each sample is its "
                             "own row with a 'sample' index and its own cache entry")
    parser.add_argument("--prompt_kind", choices=PROMPT_KINDS, default=None,
                        help="the kind of every prompt whose own prompt_kind cell is empty: safe "
                             "(meant to be answered) or unsafe (meant to be refused); default: "
                             "recognised for the bundled sets, else unknown (written to prompt_kind)")
    cli.add_model_flags(parser, temperature_default=0.0, max_tokens_default=1000)
    return parser


@dataclass(frozen=True, kw_only=True)
class AlignmentSettings:
    """What a stage-4 verdict depends on (each in every row's key: ``orbench.run.settings``)."""

    model: ModelSpec = setting(record=str)
    system: str | None
    temperature: float
    max_tokens: int
    #: The keyword rule family (``--matcher``, else the model's).
    matcher: str
    samples: int | None = setting(default=None, omit=lambda s: s.samples is None)
    prompt_kind: str = setting(default="", unkeyed="fills the prompt_kind column of the finished output; "
                                                   "no row's result depends on it")
    #: The keyword rules' fingerprint: improved rules re-score instead of resuming.
    rules: str = rule(default_factory=rules_fingerprint)


def requests(s: AlignmentSettings, row: dict) -> list[Request]:
    """The prompt, once or ``samples`` times (none for an empty prompt)."""
    if not str(row["prompt"]).strip():  # e.g. a rewrite row with nothing parsed: no call
        return []
    return [Request.user(s.model, row["prompt"], system=s.system, temperature=s.temperature,
                         max_tokens=s.max_tokens, sample_index=index) for index in range(s.samples or 1)]


def _verdict(s: AlignmentSettings, completion: Completion) -> dict:
    text = completion.text or ""
    return {"model": str(s.model), "response": text,
            **reply_verdict(text, completion.provider_refusal, s.matcher),
            "finish_reason": completion.finish_reason or ""}


def decide(s: AlignmentSettings, row: dict, answers: list[Completion]) -> dict | list[dict]:
    """The reply and its keyword verdict; with ``samples``, one row per sample."""
    if answers:
        rows = [_verdict(s, answer) for answer in answers]
    else:
        rows = [{"model": str(s.model), "response": "", "is_rejected": None, "refusal_source": SKIPPED_EMPTY,
                 "refusal_kind": None, "finish_reason": ""}] * (s.samples or 1)
    if s.samples is None:
        return rows[0]
    return [{**r, SAMPLE: i} for i, r in enumerate(rows)]


def finish(s: AlignmentSettings, frame) -> Finished:
    """The output with each prompt's kind (the prompt's, filled on the finished output, not part
    of a row's key) and its outcome counts (:func:`orbench.run.outcomes.alignment`)."""
    frame = with_prompt_kinds(frame, s.prompt_kind)
    return Finished(frame, outcomes=outcomes.alignment(frame, samples=s.samples, max_tokens=s.max_tokens))


def make_stage(settings: AlignmentSettings) -> Stage:
    """The runner's view of this stage: a prompt in, the reply and its verdict out."""
    return Stage(name=f"check alignment {settings.model}", needs=["prompt"],
                 adds=ADDS + ([SAMPLE] if settings.samples is not None else []),
                 requests=requests, decide=decide, settings=settings, stage_id="check_alignment",
                 finish=finish, check=check_kind_column,
                 provenance={"rules_fingerprint": settings.rules, "matcher": settings.matcher})


def setup_for(default_provider: str | None):
    """The ``setup(args)`` hook for ``cli.run``, with the alias's provider fallback."""

    def setup(args) -> Job:
        spec = resolve_model(args.model, default_provider)
        if args.samples is not None and args.temperature <= 0:
            raise UsageError(f"--samples {args.samples} needs --temperature above 0 (at temperature "
                             f"{args.temperature:g} every sample would be the same answer)")
        settings = AlignmentSettings(model=spec, system=args.system_prompt or None, temperature=args.temperature,
                                     max_tokens=args.max_tokens, matcher=args.matcher or family_for_model(str(spec)),
                                     samples=args.samples, prompt_kind=args.prompt_kind or "")
        output = args.output_file or default_output(args.model, args.input_file)
        return Job(stage=make_stage(settings), input=args.input_file, output=output, models=[spec],
                       typed=[args.model])

    return setup


#: The job of one command line of ``check_alignment.py`` itself (no provider fallback).
setup = setup_for(None)


def main(argv=None, default_provider: str | None = None) -> int:
    """Run stage 4; ``default_provider`` is tried for model names with no known provider."""
    return cli.run(build_parser(default_provider), setup_for(default_provider), argv)


if __name__ == "__main__":  # python -m orbench.stages.check_alignment (the command a meta file records)
    raise SystemExit(main())
