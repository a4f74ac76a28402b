"""The engine flags of every model-calling stage, the servers a run starts, and ``orbench-serve``.

``--serve`` starts the server of the run's self-hosted model (``vllm/``, ``sglang/``, ``llamacpp/``:
``orbench.llm.serve``) before the first request and stops it when the run ends, however it ends
(done, exit 1, Ctrl-C, SIGTERM from a job scheduler, a bug); ``--replicas N`` starts N of them, the
visible devices split evenly between them. ``--shard i/N`` (``orbench.run.shards``) is read here
too. None of these flags changes a row's result: they are run options (``RunOptions``), like
``--concurrency``, not stage settings, so no row key, progress header or settings check sees them,
and a served model's requests are cached under the model's identity (engine, version, model,
output-changing arguments), never its port: a second ``--serve`` run answers from the cache.

``orbench-serve MODEL`` (``orbench.run.serve_command``) runs one such server in the foreground, prints
its address and writes it to a file, for a chain of stages that share one server through ``--base_url``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import shlex
import signal
import sys
import tempfile
import threading
from pathlib import Path

from orbench.llm import serve as engine_lifecycle
from orbench.llm.errors import UsageError


@dataclasses.dataclass(frozen=True)
class ServeOptions:
    """The engine flags, read once; ``servers`` are the ones this run started (set while it runs)."""

    serve: bool = False
    args: tuple[str, ...] = ()
    timeout: float = engine_lifecycle.DEFAULT_SERVE_TIMEOUT
    replicas: int = 1
    servers: tuple = ()


def add_flags(parser: argparse.ArgumentParser, positive_int, positive_float) -> None:
    """``--serve``, ``--serve_args``, ``--serve_timeout``, ``--replicas`` and ``--shard``; the number
    types are the command line's own (``orbench.run.cli``)."""
    from orbench.run.shards import parse_shard

    group = parser.add_argument_group("self-hosted models and clusters (docs/scale_out.md)")
    group.add_argument("--serve", action="store_true",
                       help="start the model's own server for this run and stop it at the end: vllm/<hf-id> "
                            "(vllm serve), sglang/<hf-id> (SGLang), llamacpp/<path>.gguf (llama.cpp's server); "
                            "a free port, devices from CUDA_VISIBLE_DEVICES, its log in <output>.server.log")
    group.add_argument("--serve_args", default=None, metavar="'ARGS'",
                       help="the server's own arguments, as one shell-quoted string (e.g. \"--dtype bfloat16 "
                            "--max-model-len 8192\"); a tensor-parallel size here overrides the one from the devices")
    group.add_argument("--serve_timeout", type=positive_float, default=engine_lifecycle.DEFAULT_SERVE_TIMEOUT,
                       help="seconds to wait for a started server to answer before stopping with exit 2 "
                            f"(default: {engine_lifecycle.DEFAULT_SERVE_TIMEOUT:g})")
    group.add_argument("--replicas", type=positive_int, default=1,
                       help="with --serve: start N servers, CUDA_VISIBLE_DEVICES split evenly between them "
                            "(default: 1)")
    group.add_argument("--shard", type=parse_shard, default=None, metavar="i/N",
                       help="run shard i of N: a fixed 1/N of the input rows, chosen by a hash of each row's key "
                            "(default output <name>.shard-i-of-N.csv); orbench-merge joins the N outputs")


def options_from(args: argparse.Namespace) -> ServeOptions:
    """The engine flags of ``args``; ``UsageError`` for flags that need ``--serve`` without it."""
    extra = shlex.split(args.serve_args) if getattr(args, "serve_args", None) else []
    options = ServeOptions(serve=bool(getattr(args, "serve", False)), args=tuple(extra),
                           timeout=getattr(args, "serve_timeout", engine_lifecycle.DEFAULT_SERVE_TIMEOUT),
                           replicas=getattr(args, "replicas", 1))
    if not options.serve and (extra or options.replicas > 1):
        given = "--serve_args" if extra else f"--replicas {options.replicas}"
        raise UsageError(f"{given} needs --serve (it configures the server --serve starts)")
    return options


def _served_spec(job):
    from orbench.llm.models import ModelSpec

    specs: list[ModelSpec] = list(dict.fromkeys(s for s in job.models if s.provider.name in engine_lifecycle.ENGINES))
    if not specs:
        found = ", ".join(str(s) for s in job.models) or "no model"
        raise UsageError(f"--serve starts a self-hosted model's server (vllm/<hf-id>, sglang/<hf-id> or "
                         f"llamacpp/<path>.gguf); this run has {found}")
    if len(specs) > 1:
        raise UsageError(f"--serve starts one model's server; this run has {len(specs)} ({', '.join(map(str, specs))}): "
                         f"start each with orbench-serve and give each provider its address in VLLM_BASE_URL, "
                         f"SGLANG_BASE_URL or LLAMACPP_BASE_URL")
    return specs[0]


def log_path(output: Path, index: int, count: int) -> Path:
    """Where a started server's log goes: ``<output>.server.log`` (``.server-2.log``... for replicas)."""
    return output.with_name(f"{output.name}.server{'' if count == 1 else f'-{index + 1}'}.log").resolve()


@contextlib.asynccontextmanager
async def engines(job, options):
    """The run's options with its servers started (``options.serve.servers``); the servers are
    stopped when the block ends, however it ends. Without ``--serve``: the options as they are."""
    config: ServeOptions | None = options.serve
    if config is None or not config.serve:
        yield options
        return
    spec = _served_spec(job)
    if options.base_url:
        raise UsageError("--serve starts the model's server at an address of its own: drop --base_url")
    if options.batch:
        raise UsageError(f"--batch: {spec.provider.name} has no batch API; drop --batch or --serve")
    groups = engine_lifecycle.device_groups(config.replicas, engine_lifecycle.visible_devices())
    # in memory (the API without output_file) nothing goes beside the output: the log goes to the temp folder
    where = job.output
    if job.in_memory and not options.estimate:
        where = Path(tempfile.mkdtemp(prefix="orbench-serve-")) / job.output.name
    servers = [engine_lifecycle.Server(spec, log_path(where, i, config.replicas), list(config.args), config.timeout,
                            devices=group if config.replicas > 1 else None) for i, group in enumerate(groups)]
    if options.estimate:  # nothing is sent: the cache identity is all that is needed, nothing is started
        for server in servers:
            server.command = server.engine.command(spec.model, server.host, 0, None, list(config.args))
            server.engine_version = server.engine.version(server.command)
        yield dataclasses.replace(options, serve=dataclasses.replace(config, servers=tuple(servers)))
        return
    with sigterm_as_interrupt():
        try:
            started = await asyncio.gather(*(asyncio.to_thread(s.start) for s in servers), return_exceptions=True)
            failed = [e for e in started if isinstance(e, BaseException)]
            if failed:
                raise failed[0]
            yield dataclasses.replace(options, serve=dataclasses.replace(config, servers=tuple(servers)))
        finally:  # all at once: each may take its grace period to shut down
            stopping = [threading.Thread(target=server.stop) for server in servers]
            for thread in stopping:
                thread.start()
            for thread in stopping:
                thread.join()
            for server in servers:
                if server.exit_code is not None:
                    print(f"warning: the {server.engine.name} server at {server.base_url} exited by itself with code "
                          f"{server.exit_code} during the run; the last lines of its log {server.log_path}:\n"
                          f"{engine_lifecycle.last_lines(server.log_path)}", file=sys.stderr)


@contextlib.contextmanager
def sigterm_as_interrupt():
    """While servers run, SIGTERM (a job scheduler's stop) ends the run as Ctrl-C does, so the
    servers are stopped too; only in the main thread, where signal handlers can be set."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def served_addresses(options) -> dict[str, tuple[list[str], str]]:
    """Per provider name, the started servers' addresses and the served model's cache identity."""
    config: ServeOptions | None = options.serve
    if config is None or not config.servers:
        return {}
    first = config.servers[0]
    return {first.spec.provider.name: ([s.base_url for s in config.servers], first.identity)}


def client_for(options, settings: dict):
    """The run's client (``orbench.llm.clients.Client``, made with ``settings``): requests to a
    server this run started go to its address, keyed in the cache by the served model's identity;
    several addresses (``--replicas``, a ``--base_url`` list) are shared by ``orbench.llm.replicas``."""
    from orbench.llm.clients import Client
    from orbench.llm.replicas import ReplicaClient, list_identity, split_addresses

    served = served_addresses(options)
    if served:
        [(name, (urls, identity))] = served.items()
        client = ReplicaClient(urls, identity, {name}, **settings) if len(urls) > 1 else Client(**settings)
        client.served = {name: (urls[0], identity)}
        return client
    listed = split_addresses(options.base_url)
    if len(listed) > 1:
        if options.batch:
            raise UsageError("--batch sends to the provider's own batch API: give one --base_url, not a list")
        return ReplicaClient(listed, list_identity(listed), None, **settings)
    return Client(**settings)


def record(meta: dict, options, client=None) -> None:
    """The servers this run started, in its meta file (command, engine and version, devices, log),
    and the replicas it shared the work between (each address, its answers, whether it was taken out)."""
    config: ServeOptions | None = options.serve
    if config is not None and config.servers:
        meta["served"] = [s.describe() for s in config.servers]
    if hasattr(client, "describe_replicas"):
        meta["replicas"] = client.describe_replicas()
