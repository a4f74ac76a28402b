"""Starting and stopping a model's own server: ``--serve`` and ``orbench-serve``.

A self-hosted model (``vllm/<hf-id>``, ``sglang/<hf-id>``, ``llamacpp/<path>.gguf``) is served by
an engine the suite starts itself, as inspect_ai's ``vllm/`` and ``sglang/`` providers do
(``inspect_ai/_util/local_server.py``); the engine does the serving, this module only runs it:

- **A reserved free port.** The port is one the OS hands out (bind to port 0) and stays bound, with
  ``SO_REUSEADDR``, until the server answers, so no other process on the machine can take it in
  between (the engines' HTTP servers, uvicorn and cpp-httplib, bind with ``SO_REUSEADDR`` too). The
  server never reuses whatever may answer at the provider's default address.
- **The command.** vLLM: ``vllm serve <hf-id>`` (the ``vllm`` on ``PATH``); SGLang: ``python -m
  sglang.launch_server --model-path <hf-id>`` (this interpreter's); llama.cpp: ``python -m
  orbench.llm.llama_server --model <path>.gguf`` (the ``xllamacpp`` wheel's server); each with
  ``--host``, ``--port`` and (vLLM, SGLang) ``--served-model-name`` set to the id as typed, then the
  user's ``--serve_args``.
- **Devices.** ``CUDA_VISIBLE_DEVICES`` (or the replica's share of it) sets the tensor-parallel size:
  vLLM's ``--tensor-parallel-size``, SGLang's ``--tp``, one per listed device, unless the user's
  own server arguments (``--serve_args``) set it. llama.cpp splits a model over the visible GPUs
  by itself and takes no such flag.
- **The log** goes to a file (beside the output: ``<output>.server.log``); a failure quotes its last lines.
- **The health wait.** ``GET /v1/models`` until it answers 200 and lists the model: at once, then
  after :data:`POLL_FIRST` seconds, the wait doubling up to every :data:`POLL` seconds; at most
  ``timeout`` seconds (``--serve_timeout``; inspect_ai's default, 600 s, is the default here). A
  server that exits, never answers, or serves another model's name stops the run with
  ``ServeError`` (a ``UsageError``: exit 2) naming the command and the log's last lines.
  llama.cpp's server answers to any model name, so for it the check is only that it answers.
- **Stopping.** The server runs in a session (process group) of its own, so a terminal's Ctrl-C
  does not reach it half-way; :meth:`Server.stop` sends SIGTERM to its whole process tree (the group
  and any descendant that left it), waits :data:`GRACE` seconds for it to shut down, then
  SIGKILLs what is left. Every started server is also stopped when the interpreter exits
  (``atexit``), whatever path it takes.

A served model's **cache identity** (:meth:`Server.identity`) is the engine, its version, the model
and the server arguments that change outputs (quantisation, dtype, context length, the chat
template...), not the port, the host or which replica answered: a ``--serve`` run made twice
answers from the cache the second time.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from orbench.llm.errors import UsageError
from orbench.llm.models import ModelSpec, api_key_for

#: Seconds between health checks once the server is slow to come up: one local GET; the wait is spent
#: loading weights (seconds to minutes).
POLL = 0.5
#: The first wait between health checks, doubled after each until it is :data:`POLL`: a small model's
#: server (llama.cpp's, a GGUF in the page cache) answers within a few hundred milliseconds, and a fixed
#: 0.5 s would add up to half a second to every start; a slow server costs only a few more local GETs.
POLL_FIRST = 0.05
#: Seconds a stopping server gets between SIGTERM and SIGKILL: ``docker stop``'s default grace period.
GRACE = 10.0
#: inspect_ai's default wait for a server it starts (``local_server.DEFAULT_TIMEOUT``).
DEFAULT_SERVE_TIMEOUT = 600.0
#: Lines of the server's log quoted when it fails to start.
LOG_LINES = 20


class ServeError(UsageError):
    """The server did not start, or did not serve the model: a configuration problem (exit 2)."""


class _NeedsKey(Exception):
    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


@dataclass(frozen=True)
class Engine:
    """How one engine is started and what of its arguments changes outputs."""

    name: str
    #: Flags of the user's own arguments that already set how many devices one server spans.
    parallel_flags: tuple[str, ...]
    #: The flag this module adds for it (None: the engine splits over the visible devices itself).
    parallel_flag: str | None
    #: Flags that change what the model answers (recorded in the cache identity with their values).
    output_flags: tuple[str, ...]
    #: Whether ``/v1/models`` names the model (llama.cpp's server answers to any name).
    checks_name: bool = True

    def command(self, model: str, host: str, port: int, parallel: int | None, args: list[str]) -> list[str]:
        """The command line that serves ``model`` on ``host:port``."""
        if self.name == "vllm":
            # --served-model-name: the name requests carry is the id as typed (vLLM's default too)
            head = ["vllm", "serve", model, "--host", host, "--port", str(port), "--served-model-name", model]
        elif self.name == "sglang":
            head = [sys.executable, "-m", "sglang.launch_server", "--model-path", model, "--host", host,
                    "--port", str(port), "--served-model-name", model]
        else:
            head = [sys.executable, "-m", "orbench.llm.llama_server", "--model", model, "--host", host,
                    "--port", str(port)]
        if parallel and self.parallel_flag and not _given(args, self.parallel_flags):
            head += [self.parallel_flag, str(parallel)]
        return head + list(args)

    def version(self, command: list[str]) -> str:
        """The engine's version, as the installed engine reports it (``unknown`` if it says nothing)."""
        if self.name == "vllm":  # the vllm on PATH is the one run, maybe not this interpreter's
            try:
                done = subprocess.run([command[0], "--version"], capture_output=True, text=True, timeout=120)
                lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
                return lines[-1] if done.returncode == 0 and lines else "unknown"
            except (OSError, subprocess.TimeoutExpired):
                return "unknown"
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("sglang" if self.name == "sglang" else "xllamacpp")
        except PackageNotFoundError:
            return "unknown"


ENGINES: dict[str, Engine] = {e.name: e for e in (
    # vLLM's engine arguments (docs.vllm.ai, "Engine Arguments"): those that change the numbers or
    # the text the model sees; -tp is the short form of --tensor-parallel-size
    Engine("vllm", ("--tensor-parallel-size", "-tp"), "--tensor-parallel-size",
           ("--quantization", "-q", "--dtype", "--max-model-len", "--kv-cache-dtype", "--tokenizer", "--revision",
            "--tokenizer-revision", "--chat-template", "--generation-config", "--seed", "--load-format",
            "--hf-overrides", "--override-generation-config")),
    # SGLang's server arguments (docs.sglang.ai, "Server Arguments")
    Engine("sglang", ("--tp", "--tp-size", "--tensor-parallel-size"), "--tp",
           ("--quantization", "--dtype", "--context-length", "--kv-cache-dtype", "--tokenizer-path", "--revision",
            "--chat-template", "--random-seed", "--load-format")),
    # orbench.llm.llama_server's flags
    Engine("llamacpp", (), None, ("--ctx_size", "--chat_template"), checks_name=False),
)}


def engine_of(spec: ModelSpec) -> Engine:
    """The engine that serves ``spec``; ``UsageError`` for a provider the suite cannot start."""
    engine = ENGINES.get(spec.provider.name)
    if engine is None:
        raise UsageError(f"--serve starts a self-hosted model's server: vllm/<hf-id>, sglang/<hf-id> or "
                         f"llamacpp/<path>.gguf, not {spec}")
    return engine


#: Server flags whose value is a secret: never written to a log, a message or a meta file.
SECRET_FLAGS = ("--api-key", "--api_key", "--hf-token")


def shown(command: list[str]) -> list[str]:
    """``command`` as it may be shown: the values of :data:`SECRET_FLAGS` replaced by ``[redacted]``."""
    out: list[str] = []
    for i, arg in enumerate(command):
        name = arg.split("=", 1)[0]
        if name in SECRET_FLAGS and "=" in arg:
            out.append(f"{name}=[redacted]")
        elif i and command[i - 1] in SECRET_FLAGS:
            out.append("[redacted]")
        else:
            out.append(arg)
    return out


def _given(args: list[str], flags: tuple[str, ...]) -> bool:
    return any(a.split("=", 1)[0] in flags for a in args)


def output_args(engine: Engine, args: list[str]) -> list[str]:
    """The server arguments that change outputs, as given (``--dtype bfloat16`` or ``--dtype=bfloat16``)."""
    found = []
    for i, arg in enumerate(args):
        name = arg.split("=", 1)[0]
        if name in engine.output_flags:
            value = arg.split("=", 1)[1] if "=" in arg else (args[i + 1] if i + 1 < len(args) and
                                                            not args[i + 1].startswith("-") else "")
            found.append(f"{name}={value}")
    return sorted(found)


def visible_devices(environ=None) -> list[str]:
    """The devices ``CUDA_VISIBLE_DEVICES`` lists (empty when unset or empty)."""
    text = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES", "")
    return [d.strip() for d in text.split(",") if d.strip()]


def device_groups(replicas: int, devices: list[str]) -> list[list[str]]:
    """``devices`` split into ``replicas`` equal groups, one per server (none listed: each gets none);
    ``UsageError`` when they do not split evenly."""
    if not devices:
        return [[] for _ in range(replicas)]
    if len(devices) % replicas:
        raise UsageError(f"--replicas {replicas}: CUDA_VISIBLE_DEVICES lists {len(devices)} devices "
                         f"({','.join(devices)}), which do not split into {replicas} equal groups")
    size = len(devices) // replicas
    return [devices[i * size:(i + 1) * size] for i in range(replicas)]


def reserve_port(host: str) -> socket.socket:
    """A socket bound to a free port of ``host``, held until the server answers (module docstring)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    return sock


_RUNNING: set[Server] = set()


@atexit.register
def _stop_all() -> None:
    for server in list(_RUNNING):
        server.stop()


@dataclass
class Server:
    """One engine serving ``spec`` (module docstring): :meth:`start`, then :meth:`stop`."""

    spec: ModelSpec
    log_path: Path
    args: list[str] = field(default_factory=list)
    timeout: float = DEFAULT_SERVE_TIMEOUT
    devices: list[str] | None = None  # None: CUDA_VISIBLE_DEVICES as it is
    host: str = "127.0.0.1"
    engine: Engine = field(init=False)
    command: list[str] = field(default_factory=list)
    port: int = 0
    process: subprocess.Popen | None = None
    engine_version: str = ""
    #: Set when the server had exited by itself before it was stopped (its exit code).
    exit_code: int | None = None
    _stopped: threading.Event = field(default_factory=threading.Event, repr=False)

    def __post_init__(self) -> None:
        self.engine = engine_of(self.spec)

    def __hash__(self) -> int:
        return id(self)

    @property
    def base_url(self) -> str:
        """The address requests go to (``--base_url``)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{'127.0.0.1' if self.host == '0.0.0.0' else host}:{self.port}/v1"

    @property
    def identity(self) -> str:
        """What the cache key records as the served model's endpoint (module docstring)."""
        found = {"served": self.engine.name, "version": self.engine_version, "model": self.spec.model,
                 "args": output_args(self.engine, self.args)}
        if self.engine.name == "llamacpp":  # a file path: a replaced file must not hit the old answers
            with contextlib.suppress(OSError):
                stat = Path(self.spec.model).expanduser().resolve().stat()
                found["file"] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        return json.dumps(found, sort_keys=True)

    def describe(self) -> dict:
        """What the meta file records: the command, the engine and its version, the devices, the log."""
        return {"command": shown(self.command), "engine": self.engine.name, "engine_version": self.engine_version,
                "devices": self.devices if self.devices is not None else visible_devices(),
                "log": str(self.log_path), "base_url": self.base_url}

    def start(self) -> Server:
        """Start the server and wait until it serves the model; ``ServeError`` (stopped again) if not."""
        if self.engine.name == "llamacpp" and not Path(self.spec.model).expanduser().is_file():
            raise ServeError(f"{self.spec}: no such file (llamacpp/ takes the path of a .gguf file)")
        devices = visible_devices() if self.devices is None else self.devices
        env = dict(os.environ)
        if self.devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.devices)
        holder = reserve_port(self.host)
        try:
            self.port = holder.getsockname()[1]
            self.command = self.engine.command(self.spec.model, self.host, self.port, len(devices) or None, self.args)
            self.engine_version = self.engine.version(self.command)
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "ab") as log:
                log.write(f"$ {shlex.join(shown(self.command))}\n".encode())
                log.flush()
                try:
                    self.process = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=log,
                                                    stderr=subprocess.STDOUT, env=env, start_new_session=True)
                except OSError as exc:
                    hint = (f" ({self.command[0]} is not on PATH: install {self.engine.name} where this runs, "
                            f"e.g. pip install {self.engine.name})" if isinstance(exc, FileNotFoundError) else "")
                    raise ServeError(f"cannot start the server: {shlex.join(shown(self.command))}: "
                                     f"{exc.strerror or exc}{hint}") from None
            _RUNNING.add(self)
            try:
                if self._stopped.is_set():  # stopped (the run interrupted) while it was being started
                    raise ServeError(f"the {self.engine.name} server for {self.spec} was stopped while starting")
                self._wait_healthy()
            except BaseException:
                self.stop()
                raise
        finally:
            holder.close()
        return self

    def _failure(self, what: str) -> ServeError:
        return ServeError(f"{what}; the command: {shlex.join(shown(self.command))}; the last lines of its log "
                          f"{self.log_path}:\n{last_lines(self.log_path)}")

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.timeout
        models_url = self.base_url + "/models"
        key = api_key_for(self.spec.provider)  # a server started with --api-key asks for it (VLLM_API_KEY ...)
        served: list[str] | None = None
        pause = POLL_FIRST
        while True:
            process = self.process
            if process is None or self._stopped.is_set():
                raise ServeError(f"the {self.engine.name} server for {self.spec} was stopped while starting")
            code = process.poll()
            if code is not None:
                raise self._failure(f"the {self.engine.name} server for {self.spec} exited with code {code} "
                                    f"before it served")
            try:
                served = _served_models(models_url, key)
            except _NeedsKey as exc:
                raise self._failure(f"the server at {self.base_url} answers {exc.code}: it was started with an API "
                                    f"key (--api-key); set {' or '.join(self.spec.provider.key_vars)} to the same "
                                    f"value") from None
            if served is not None:
                if not self.engine.checks_name or self.spec.model in served:
                    return
                raise self._failure(f"the server at {self.base_url} serves {', '.join(served) or 'no model'}, "
                                    f"not {self.spec.model}")
            if time.monotonic() >= deadline:
                raise self._failure(f"the {self.engine.name} server for {self.spec} did not answer within "
                                    f"--serve_timeout {self.timeout:g} s (a large model may need longer)")
            self._stopped.wait(pause)
            pause = min(POLL, 2 * pause)

    def stop(self) -> None:
        """Stop the server's whole process tree (module docstring); safe to call twice."""
        self._stopped.set()
        _RUNNING.discard(self)
        process, self.process = self.process, None
        if process is not None:
            if process.poll() is not None and self.exit_code is None:
                self.exit_code = process.returncode  # it ended by itself (a crash mid-run)
            stop_tree(process, group=process.pid)  # its own session: the group id is its process id


def _served_models(url: str, key: str | None = None) -> list[str] | None:
    """The model ids ``GET url`` lists, or None while the server does not answer 200; ``ServeError``
    when it asks for a key it was not given."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            body = json.loads(reply.read() or b"{}")
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise _NeedsKey(exc.code) from None
        return None
    except (OSError, ValueError):
        return None
    items = body.get("data") if isinstance(body, dict) else None
    return [str(m.get("id")) for m in items or [] if isinstance(m, dict)]


def last_lines(path: Path, count: int = LOG_LINES) -> str:
    """The last ``count`` lines of ``path`` (empty if it cannot be read)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 64 * 1024))
            lines = handle.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-count:])


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux: read from /proc; elsewhere none)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie has ended; only its parent's wait is missing
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) != "Z"
    except OSError:
        return True


def _signal(pids: list[int], group: int | None, sig: int) -> None:
    if group is not None:
        with contextlib.suppress(OSError):
            os.killpg(group, sig)
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def stop_tree(process: subprocess.Popen, grace: float = GRACE, group: int | None = None) -> None:
    """SIGTERM to ``process``, its process group (``group``, else the one it is in) and every
    descendant; SIGKILL after ``grace`` s. The group reaches the children of a server that has
    died already (they are no longer its descendants then)."""
    if group is None:
        try:
            group = os.getpgid(process.pid)
        except OSError:
            group = None
    if group is not None and group == os.getpgid(0):
        group = None  # never our own group
    pids = [process.pid, *descendants(process.pid)]
    _signal(pids, group, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        process.poll()
        if not any(_alive(p) for p in pids):
            break
        time.sleep(0.05)
    pids += [p for p in descendants(process.pid) if p not in pids]
    _signal([p for p in pids if _alive(p)], group, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)
