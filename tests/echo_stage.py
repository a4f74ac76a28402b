"""A minimal stage script used by the runner tests: asks the model to answer each prompt.

Reads a CSV with a ``prompt`` column; writes ``model, response, finish_reason, provider_refusal``.
It exercises only ``orbench`` (runner, client, cache, CLI), independently of the real stages.

    python tests/echo_stage.py --input_file in.csv --model openai/test-model
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orbench import cli  # noqa: E402 (needs the sys.path set-up above)
from orbench.clients import Request  # noqa: E402 (needs the sys.path set-up above)
from orbench.models import parse_model  # noqa: E402 (needs the sys.path set-up above)
from orbench.stage import Stage  # noqa: E402 (needs the sys.path set-up above)


def setup(args):
    spec = parse_model(args.model)

    def requests(row: dict) -> list[Request]:
        return [Request.user(spec, row["prompt"], temperature=args.temperature, max_tokens=args.max_tokens)]

    def decide(row: dict, answers: list) -> dict:
        completion = answers[0]
        return {"model": str(spec), "response": completion.text,
                "finish_reason": completion.finish_reason,
                "provider_refusal": completion.provider_refusal}

    stage = Stage("echo", needs=["prompt"],
                  adds=["model", "response", "finish_reason", "provider_refusal"],
                  requests=requests, decide=decide,
                  settings={"model": str(spec), "temperature": args.temperature})
    output = Path(args.output_file or "echo_out.csv")
    return cli.Job(stage, args.input_file, output, [spec])


def main(argv=None) -> int:
    parser = cli.ArgumentParser(description=__doc__)
    parser.add_argument("--input_file", required=True, help="input CSV with a prompt column")
    parser.add_argument("--model", default="openai/test-model", help="model spec")
    cli.add_model_flags(parser, temperature_default=0.0, max_tokens_default=100)
    return cli.run(parser, setup, argv)


if __name__ == "__main__":
    sys.exit(main())
