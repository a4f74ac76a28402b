"""Stage 5: judge each response with an LLM (or re-score it with the keyword matchers).

Reads a CSV with ``prompt`` and ``response`` columns, typically stage 4's output as it is, and
writes every input column plus:

- ``judge_model``: who made the verdict: the judge's resolved ``provider/model``, or ``keyword``;
- ``answer_category``: the judge's class, ``direct_answer``, ``direct_refusal`` or
  ``indirect_refusal``; ``unparsed`` when the judge's reply names no class or names it
  ambiguously (or the judge's own provider blocked the judging request); and, for rows the
  judge is not asked about: ``provider_block`` (stage 4 recorded ``refusal_source=provider_block``,
  or ``provider`` in files written before the spelling was unified: the tested model's provider
  blocked the reply, a rejection), ``empty_response`` (no response text) and ``skipped_empty``
  (stage 4 skipped the row: its prompt is empty; it stays skipped here);
- ``answer_type_response``: the judge's raw reply (or what decided the row);
- ``is_rejected``: True for both refusal classes and provider blocks, False for
  direct_answer, EMPTY for every other outcome (the input's ``is_rejected``, stage 4's keyword
  verdict, is replaced, never carried over);
- ``keyword_is_rejected``: this stage's own keyword verdict on the same response (computed here
  with the keyword matcher, never copied from the input), so judge and rules can be compared.

An input row whose ``error`` is set (an earlier stage failed on it) is not judged: it is written
back with this stage's columns empty and its error kept.

``--cascade`` (with a judge): the keyword matcher decides the responses it is sure of (the
confidence classes of :mod:`orbench.cascade`: a first-person refusal in the first sentence; an
answer with no refusal cue anywhere and no hedge in its opening) and only the rest go to the
judge. Two more columns: ``verdict_source`` (``keyword``, the judge's name, or ``provider_block`` for a
provider block; empty when there is no verdict) and ``cascade_class`` (the row's class, or
empty when it was not classed). A keyword-decided row has ``answer_category`` ``keyword_refusal`` or
``keyword_answer``. ``judge_model`` names the cascade (``keyword+<judge>``), so a report never
pools its verdicts with the judge's alone; the meta file counts the rows each source decided
(``verdict_sources``) and ``--estimate`` prices only the rows that reach the judge.

``--check_model=keyword`` calls no model: each response is re-scored with the keyword matcher
(family: ``--matcher`` if given, else from the row's ``model`` column, else ``default``);
``answer_category`` is then ``keyword_refusal`` or ``keyword_answer`` and
``answer_type_response`` names the matcher and the cue it found.

The judge runs at temperature 0 with at most 1000 tokens: the original set no limit, and a
reply cut short before its ``[[class]]`` would be unparsed, so the limit leaves ample room for
the brief explanation the template asks for.

Default output (the one rule of every stage, ``orbench.tables.default_output_path``):
``./{input stem}_{check_model}_judged.csv`` (``_cascade_judged`` with ``--cascade``).

Example (from inside ``response_checker/``)::

    python check_response.py --check_model=gpt4 --input_file=gpt-4o_merged_hard.csv
    python judge_responses.py --check_model=keyword --input_file=gpt-4o_merged_hard.csv
"""

from __future__ import annotations

from orbench import cli, outcomes
from orbench.cascade import CLASSES, cascade_fingerprint, confidence
from orbench.clients import Client
from orbench.errors import UsageError
from orbench.labels import UNPARSED, judge_is_rejected, parse_judge
from orbench.models import parse_model
from orbench.prompts import JUDGE_TEMPLATE
from orbench.provenance import sha256_text
from orbench.refusal import (
    FAMILIES,
    explain,
    family_for_model,
    is_refusal,
    rules_fingerprint,
)
from orbench.stage import Stage
from orbench.tables import default_output_path
from orbench.templates import add_template_flag, load_template
from orbench.types import Request
from orbench.vocab import (
    EMPTY_RESPONSE,
    KEYWORD,
    KEYWORD_ANSWER,
    KEYWORD_REFUSAL,
    PROVIDER_BLOCK,
    SKIPPED_EMPTY,
    is_provider_block,
)

ADDS = ["judge_model", "answer_category", "answer_type_response", "is_rejected",
        "keyword_is_rejected"]
CASCADE_ADDS = ["verdict_source", "cascade_class"]

EPILOG = """judge_model: the judge as resolved, or keyword.
answer_category: direct_answer | direct_refusal | indirect_refusal | unparsed, or without a
judge call: provider_block (is_rejected True), empty_response and skipped_empty (an empty
prompt stage 4 skipped) (is_rejected empty);
keyword_refusal | keyword_answer with --check_model=keyword. Rows with an earlier stage's error
pass through with these columns empty.
is_rejected is empty whenever there is no verdict; such rows are never counted as refusals.

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
                             "llama3, any provider/model spec, or 'keyword' to re-score with the "
                             "keyword matchers and call no model")
    parser.add_argument("--input_file", required=True,
                        help="input CSV with 'prompt' and 'response' columns (stage 4's output "
                             "works as is); every other column is kept")
    parser.add_argument("--matcher", choices=FAMILIES, default=None,
                        help="keyword rule family for keyword_is_rejected and --check_model=keyword "
                             "(default: from the row's 'model' column, else 'default')")
    parser.add_argument("--cascade", action="store_true",
                        help="let the keyword matcher decide the responses it is sure of (a refusal "
                             "stated in the first sentence; a plain answer with no refusal cue) and "
                             "send only the rest to the judge; adds verdict_source and cascade_class")
    add_template_flag(parser, "{prompt} and {response}")
    cli.add_model_flags(parser, temperature_default=0.0, max_tokens_default=1000)
    return parser


def setup(args, client: Client) -> cli.Job:
    keyword_mode = args.check_model.strip().lower() == KEYWORD
    spec = None if keyword_mode else parse_model(args.check_model)
    template, template_source = load_template(args.template, JUDGE_TEMPLATE, {"prompt", "response"})
    if keyword_mode and args.template:
        raise UsageError("--template has no effect with --check_model keyword (no model is asked)")
    cascade = bool(getattr(args, "cascade", False))
    if keyword_mode and cascade:
        raise UsageError("--cascade needs a judge: with --check_model keyword every row is decided "
                         "by the keyword matcher already")
    temperature, max_tokens = args.temperature, args.max_tokens

    def family(row: dict) -> str:
        return args.matcher or (family_for_model(row["model"]) if row.get("model") else "default")

    judge_name = KEYWORD if keyword_mode else (f"{KEYWORD}+{spec}" if cascade else str(spec))

    def keyword_verdict(row: dict) -> bool | None:
        """This stage's own keyword verdict on the response (never the input's ``is_rejected``)."""
        if is_provider_block(row.get("refusal_source")):
            return True
        return is_refusal(row["response"], family(row)) if row["response"].strip() else None

    async def run_row(row: dict) -> dict:
        base = {"judge_model": judge_name, "keyword_is_rejected": keyword_verdict(row)}
        if is_provider_block(row.get("refusal_source")):
            extra = {"verdict_source": PROVIDER_BLOCK, "cascade_class": ""} if cascade else {}
            return {**base, **extra, "answer_category": PROVIDER_BLOCK, "is_rejected": True,
                    "answer_type_response": "not judged: the provider blocked the response"}
        if str(row.get("refusal_source") or "").strip() == SKIPPED_EMPTY:  # stage 4 sent nothing
            extra = {"verdict_source": "", "cascade_class": ""} if cascade else {}
            return {**base, **extra, "answer_category": SKIPPED_EMPTY, "is_rejected": None,
                    "answer_type_response": "not judged: the prompt is empty (stage 4 skipped it)"}
        if not row["response"].strip():
            extra = {"verdict_source": "", "cascade_class": ""} if cascade else {}
            return {**base, **extra, "answer_category": EMPTY_RESPONSE, "is_rejected": None,
                    "answer_type_response": "not judged: the response is empty"}
        if cascade:
            cls, verdict = confidence(row["response"], family(row))
            if verdict is not None:
                return {**base, "verdict_source": KEYWORD, "cascade_class": cls,
                        "is_rejected": verdict,
                        "answer_category": KEYWORD_REFUSAL if verdict else KEYWORD_ANSWER,
                        "answer_type_response": f"not judged: keyword matcher {family(row)} is sure "
                                                f"({cls})"}
            judged = await ask_judge(row)
            return {**base, **judged, "verdict_source": str(spec), "cascade_class": cls}
        if keyword_mode:
            found = explain(row["response"], family(row))
            return {**base, "is_rejected": found["refusal"],
                    "answer_category": KEYWORD_REFUSAL if found["refusal"] else KEYWORD_ANSWER,
                    "answer_type_response": f"matcher {family(row)}; cue: {found['cue'] or 'none'}"}
        return {**base, **await ask_judge(row)}

    async def ask_judge(row: dict) -> dict:
        text = template.format(prompt=row["prompt"], response=row["response"])
        completion = await client.complete(
            Request.user(spec, text, temperature=temperature, max_tokens=max_tokens))
        if completion.provider_refusal:
            label = UNPARSED
            raw = completion.text or f"[provider block of the judge request: {completion.finish_reason}]"
        else:
            label, raw = parse_judge(completion.text), completion.text
        return {"answer_category": label, "answer_type_response": raw,
                "is_rejected": judge_is_rejected(label)}

    provenance = {"templates": {} if keyword_mode else {"judge": sha256_text(template)},
                  "template_source": None if keyword_mode else template_source,
                  "rules_fingerprint": rules_fingerprint(), "judge": judge_name}
    if cascade:
        provenance["cascade"] = {"classes": list(CLASSES), "fingerprint": cascade_fingerprint(),
                                 "judge": str(spec)}

    def count_sources(frame):
        """Put the rows each source decided into the meta file (``verdict_sources``)."""
        sources = frame["verdict_source"].astype(str).str.strip()
        counts = {str(k): int(v) for k, v in sources[sources != ""].value_counts().items()}
        classes = frame["cascade_class"].astype(str).str.strip()
        provenance["verdict_sources"] = counts
        provenance["cascade_classes"] = {c: int((classes == c).sum()) for c in CLASSES}
        provenance["judged_share"] = (counts.get(str(spec), 0) / int((sources != "").sum())
                                      if (sources != "").any() else None)
        return frame

    stage = Stage(
        name="check response" + (" (keyword)" if keyword_mode else f" {spec}"),
        needs=["prompt", "response"],
        adds=ADDS + (CASCADE_ADDS if cascade else []),
        run_row=run_row,
        stage_id="check_response",
        # a keyword re-score calls no model: no sampling settings to record
        settings={"judge": judge_name, "matcher": args.matcher,
                  "temperature": None if keyword_mode else temperature,
                  "max_tokens": None if keyword_mode else max_tokens},
        # improved keyword rules, templates or cascade classes re-score, not resume
        rules={"template": None if keyword_mode else sha256_text(template), "rules": rules_fingerprint(),
               **({"cascade": cascade_fingerprint()} if cascade else {})},
        key_columns=["prompt", "response", "refusal_source", "model"],
        finalise=count_sources if cascade else None,
        provenance=provenance,
        outcomes=outcomes.judged,
    )
    output = args.output_file or default_output_path(
        args.input_file, "cascade_judged" if cascade else "judged", args.check_model.strip())
    return cli.Job(stage=stage, input=args.input_file, output=output,
                   models=[] if spec is None else [spec],
                   typed=[] if spec is None else [args.check_model.strip()])


def main(argv=None) -> int:
    """Run stage 5; returns the exit code (0 done, 1 row errors, 2 bad input)."""
    return cli.run(build_parser(), setup, argv)


if __name__ == "__main__":  # python -m orbench.stages.judge_responses (the command a meta file records)
    raise SystemExit(main())
