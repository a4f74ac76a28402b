"""A minimal stage script used by the runner tests: asks the model to answer each prompt.

Reads a CSV with a ``prompt`` column; writes ``model, response, finish_reason, provider_refusal``.
It exercises only ``orbench`` (runner, client, cache, CLI), independently of the real stages.

    python tests/echo_stage.py --input_file in.csv --model openai/test-model
"""

import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orbench.llm.clients import Request  # noqa: E402 (needs the sys.path set-up above)
from orbench.llm.models import ModelSpec, parse_model  # noqa: E402 (needs the sys.path set-up above)
from orbench.run import cli  # noqa: E402 (needs the sys.path set-up above)
from orbench.run.settings import setting  # noqa: E402 (needs the sys.path set-up above)
from orbench.run.stage import Stage  # noqa: E402 (needs the sys.path set-up above)


@dataclass(frozen=True)
class EchoSettings:
    model: ModelSpec = setting(record=str)
    temperature: float = 0.0
    max_tokens: int = 100
    bug_on: str | None = setting(default=None, unkeyed="a planted bug, not a setting of the rows' results")


def requests(s: EchoSettings, row: dict) -> list[Request]:
    return [Request.user(s.model, row["prompt"], temperature=s.temperature, max_tokens=s.max_tokens)]


def decide(s: EchoSettings, row: dict, answers: list) -> dict:
    if s.bug_on is not None and row["prompt"] == s.bug_on:  # a planted bug (tests/test_bugs_raise.py)
        return {}["a key that is not there"]
    completion = answers[0]
    return {"model": str(s.model), "response": completion.text, "finish_reason": completion.finish_reason,
            "provider_refusal": completion.provider_refusal}


def setup(args):
    settings = EchoSettings(model=parse_model(args.model), temperature=args.temperature, max_tokens=args.max_tokens,
                            bug_on=args.bug_on)
    stage = Stage("echo", needs=["prompt"], adds=["model", "response", "finish_reason", "provider_refusal"],
                  requests=requests, decide=decide, settings=settings)
    output = Path(args.output_file or "echo_out.csv")
    return cli.Job(stage, args.input_file, output, [settings.model])


def main(argv=None) -> int:
    parser = cli.ArgumentParser(description=__doc__)
    parser.add_argument("--input_file", required=True, help="input CSV with a prompt column")
    parser.add_argument("--model", default="openai/test-model", help="model spec")
    parser.add_argument("--bug_on", default=None, metavar="PROMPT",
                        help="plant a bug: decide raises KeyError on the row whose prompt is PROMPT")
    cli.add_model_flags(parser, temperature_default=0.0, max_tokens_default=100)
    return cli.run(parser, setup, argv)


if __name__ == "__main__":
    sys.exit(main())
