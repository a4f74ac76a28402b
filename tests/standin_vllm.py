"""A stand-in for the ``vllm`` command, for tests of ``--serve`` without a GPU.

Installed by the tests as ``vllm`` on ``PATH`` (``tests/test_serve.py`` writes a two-line wrapper that
execs this file with the test's Python). It takes what the suite gives ``vllm serve`` (the model, vLLM's
``--host``, ``--port``, ``--served-model-name``, ``--tensor-parallel-size``, and any other flag, as vLLM
does) and serves OpenAI's API with the loopback fake provider (``tests/fake_provider.py``), plus the
``GET /v1/models`` list a vLLM server answers with. Like vLLM it starts a child process (vLLM's engine
core runs in one), so a test can check that the whole process tree is stopped. ``vllm --version``
prints :data:`VERSION`.

It misbehaves as the environment says (``STANDIN_MODE``):

- ``ok`` (default): serves the model after ``STANDIN_DELAY`` seconds;
- ``die``: writes a CUDA out-of-memory line to its log and exits 1 before serving;
- ``never``: never opens its port;
- ``wrong``: serves, but ``/v1/models`` lists ``other/model`` only;
- ``die_later``: serves, then exits after ``STANDIN_LIFE`` seconds (a replica lost mid-run).

In every mode a request whose body holds ``CRASH NOW`` makes it exit at once (code 1), as a
crashed engine does mid-run.

``STANDIN_RECORD`` names a file that gets one JSON line per start: the arguments, the process ids
(its own and its child's) and ``CUDA_VISIBLE_DEVICES``. ``STANDIN_RULES`` is a JSON list of fake-provider
rules (``tests/fake_provider.Rule`` fields), e.g. a slow reply or a 400 for one prompt.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_provider import FakeProvider, _Handler  # noqa: E402 (tests/ on sys.path just above)

VERSION = "0.0.0+standin"


def main(argv: list[str]) -> int:
    if argv[:1] == ["--version"]:
        print(VERSION)
        return 0
    if argv[:1] != ["serve"]:
        print(f"stand-in vllm: only 'serve' and '--version', got {argv}", file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(prog="vllm serve")
    parser.add_argument("model")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parser.add_argument("--api-key", default=None)
    args, _ = parser.parse_known_args(argv[1:])  # vLLM's other flags: taken, not used
    mode = os.environ.get("STANDIN_MODE", "ok")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])  # vLLM's engine core
    record = os.environ.get("STANDIN_RECORD")
    if record:
        with open(record, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"argv": argv, "pid": os.getpid(), "child": child.pid,
                                     "devices": os.environ.get("CUDA_VISIBLE_DEVICES")}) + "\n")
    print(f"INFO stand-in vllm {VERSION} loading {args.model}", flush=True)
    if mode == "die":
        print("ERROR torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", flush=True)
        child.kill()
        return 1
    if mode == "never":
        threading.Event().wait()
    time.sleep(float(os.environ.get("STANDIN_DELAY", "0")))
    served = "other/model" if mode == "wrong" else (args.served_model_name or args.model)

    class Handler(_Handler):
        def do_GET(self) -> None:
            if args.api_key and self.headers.get("Authorization") != f"Bearer {args.api_key}":
                self.json(401, {"error": {"message": "Unauthorized", "type": "invalid_request_error"}})
            elif self.path.rstrip("/") == "/v1/models":
                self.json(200, {"object": "list", "data": [{"id": served, "object": "model"}]})
            else:
                super().do_GET()

        def body_bytes(self) -> bytes:
            raw = super().body_bytes()
            if b"CRASH NOW" in raw:
                print("ERROR EngineCore died unexpectedly", flush=True)
                os._exit(1)  # its engine child is left to the process group, as a crashed vLLM leaves it
            return raw

    fake = FakeProvider()
    fake.handler = Handler
    for rule in json.loads(os.environ.get("STANDIN_RULES", "[]")):
        fake.add_rule(**rule)
    fake.start(args.port)
    print(f"INFO Uvicorn running on http://{args.host}:{fake.port}", flush=True)
    if mode == "die_later":
        time.sleep(float(os.environ.get("STANDIN_LIFE", "1")))
        os._exit(1)
    threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
