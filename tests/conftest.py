"""Shared fixtures: the in-process mock provider (``mock/<name>`` models), the loopback fake
servers for what only HTTP shows, an isolated cache and environment, and a script runner."""

from __future__ import annotations

import contextlib
import dis
import functools
import gc
import inspect
import io
import os
import runpy
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import types
from pathlib import Path

# Bytecode caches are written even where PYTHONDONTWRITEBYTECODE is set (as in many CI images, and where
# pip then installs without them): without them every worker recompiles pandas, numpy and the package
# and re-rewrites every test module's asserts on every run, and every script a test runs as a process
# recompiles them too (2.4 s against 1.1 s to import pandas). So before anything big is imported, and
# for every process started from here on (xdist's workers, the scripts the tests run). The caches go
# where Python puts them (``__pycache__``, ignored by git).
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# Ctrl-C as in a terminal, for this process and (at exec, a handler becomes the default action) every
# process it starts: a shell without job control starts a background job with SIGINT ignored, which
# is inherited, and the tests that interrupt a run with SIGINT then saw it ignored (test_stage's kill
# and resume, test_serve's interrupts).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

import pandas as pd  # noqa: E402 (after the bytecode setting just above)
import pytest  # noqa: E402 (after the bytecode setting just above)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_gemini import FakeGemini  # noqa: E402 (tests/ is put on sys.path just above)
from fake_provider import FakeProvider  # noqa: E402 (tests/ is put on sys.path just above)

from orbench.llm.providers import mock as mock_provider  # noqa: E402 (tests/ is put on sys.path just above)

mock_provider.install()  # ``mock/<name>`` models resolve in every test (and in-process script runs)

# The local model's threads (llama.cpp) in this process and every process it starts: each xdist worker
# gets its share of the physical cores. llama.cpp's threads wait for each other at every step, so a
# thread on a core the other worker is busy on stalls all of them (orbench.llm.providers.local.
# default_threads); with the default (every core) on both workers of ``-n 2`` the local-model tests
# took 3-4x longer. Set ORBENCH_LOCAL_THREADS to choose otherwise.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    from orbench.llm.providers.local import default_threads  # noqa: E402 (beside the set-up above)

    os.environ.setdefault("ORBENCH_LOCAL_THREADS",
                          str(max(1, default_threads() // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))

# Hypothesis (tests/test_properties.py): a few examples by default, so the suite stays fast; the
# ``slow`` profile (pytest --hypothesis-profile=slow) runs many more. No deadline: the machine is shared.
from hypothesis import HealthCheck, settings  # noqa: E402 (beside the set-up above)

settings.register_profile("default", max_examples=12, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("slow", max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("default")

# Fake keys: distinctive so a test can search every output for them.
FAKE_KEYS = {
    "OPENAI_API_KEY": "sk-test-openai-SECRET-0123456789",
    "ANTHROPIC_API_KEY": "sk-ant-test-SECRET-abcdef012345",
    "TOGETHER_API_KEY": "together-SECRET-key-987654321",
    "MISTRAL_API_KEY": "mistral-SECRET-key-123123123",
    "GEMINI_API_KEY": "gemini-SECRET-key-456456456",
}
PROVIDER_URL_VARS = ("OPENAI", "ANTHROPIC", "TOGETHER", "MISTRAL", "GEMINI", "GEMINI_OPENAI", "VLLM", "OLLAMA",
                     "OPENAI_COMPATIBLE")


def read(path) -> pd.DataFrame:
    """A CSV as the stages write it, read back with every cell a string (empty cells as "")."""
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def write(path, rows: list[dict]) -> Path:
    """``rows`` written as a CSV at ``path`` (no index column); returns ``path``."""
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


@contextlib.contextmanager
def serving(fake):
    """``fake`` (a loopback fake server) started on a free port, and stopped when the block ends."""
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture(scope="session")
def fake_server():
    with serving(FakeProvider()) as server:
        yield server


@pytest.fixture
def fake(fake_server):
    """The fake provider with no rules, an empty request log and a URL of its own for this test."""
    fake_server.new_epoch()
    yield fake_server
    fake_server.new_epoch()


@pytest.fixture
def mock():
    """The mock provider's rules (``orbench.llm.providers.mock.RULES``), empty, with an empty request
    log: ``mock.add(match=..., text=...)``; models are named ``mock/<anything>``."""
    mock_provider.RULES.reset()
    yield mock_provider.RULES
    mock_provider.RULES.reset()


@pytest.fixture
def quick_backoff(monkeypatch):
    """The retry loop's backoff when the server asks no wait (``orbench.llm.retry``: 0-0.5 s, doubling)
    drawn from 0-10 ms instead, for tests whose assertions are which requests were sent and what came
    out, not the pauses between them (which only made them sleep for seconds in all)."""
    from orbench.llm import retry

    monkeypatch.setattr(retry, "BACKOFF_FIRST", 0.01)


@pytest.fixture
def closed_port():
    """A function giving a loopback port that refuses connections for the test's length: bound and
    never listening, so no other test's server can take it (a port freed at once may be handed to
    the next bind, the same test's included)."""
    held = []

    def port() -> int:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        held.append(sock)
        return sock.getsockname()[1]

    yield port
    for sock in held:
        sock.close()


@pytest.fixture(scope="session")
def gem_server():
    with serving(FakeGemini()) as server:
        yield server


@pytest.fixture
def gem(gem_server, env):
    """The fake Gemini REST server, reset, with ``GEMINI_BASE_URL`` in ``env`` pointing at it."""
    gem_server.reset()
    env["GEMINI_BASE_URL"] = gem_server.url
    yield gem_server
    gem_server.reset()


def _env_values(folder: Path, fake) -> dict[str, str]:
    """Fake keys, every provider pointed at ``fake``, a private cache in ``folder``."""
    values = dict(FAKE_KEYS)
    for name in PROVIDER_URL_VARS:
        values[f"{name}_BASE_URL"] = fake.url if name == "ANTHROPIC" else fake.openai_url
    values["ORBENCH_CACHE_DIR"] = str(folder / "cache")
    return values


def _full_env(values: dict[str, str]) -> dict[str, str]:
    """This process's environment with ``values`` set, the Claude/Google key aliases removed and the
    project on ``PYTHONPATH``."""
    full = {k: v for k, v in os.environ.items() if k not in ("CLAUDE_API_KEY", "GOOGLE_API_KEY")}
    full.update(values)
    full["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    return full


@pytest.fixture
def env(tmp_path, fake, monkeypatch):
    """Environment for a stage run: fake keys, every provider pointed at the fake, a private cache.

    Also applied to this process, so in-process calls see the same settings.
    """
    monkeypatch.chdir(tmp_path)
    values = _env_values(tmp_path, fake)
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("CLAUDE_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    return _full_env(values)


@pytest.fixture(scope="module")
def module_env(tmp_path_factory, fake_server):
    """``env`` for a build a module's tests share (a module- or class-scoped fixture): the same settings
    with a cache of its own, as a dict for ``script(..., env=module_env)``; not applied to this process
    and no change of folder (so a shared build names its paths in full). The fake is shared by the
    module: a shared build must not add rules to it or count its requests."""
    return _full_env(_env_values(tmp_path_factory.mktemp("module_env"), fake_server))


def run_script(script: str | Path, *args: str, env: dict, cwd: Path | None = None,
               timeout: float = 120) -> subprocess.CompletedProcess:
    """Run a project script (path relative to the repo root) as a real subprocess."""
    path = ROOT / script
    return subprocess.run([sys.executable, str(path), *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


class _Stream(io.StringIO):
    """Captured stdout/stderr; like a pipe, it is not a terminal (so progress bars stay off)."""

    def isatty(self) -> bool:
        return False


def run_in_process(script: str | Path, *args: str, env: dict, cwd: Path | None = None,
                   timeout: float = 120) -> subprocess.CompletedProcess:
    """Run a project script exactly as ``python SCRIPT ARGS`` would, inside this process.

    The script file itself is executed (``runpy.run_path`` as ``__main__``, so the thin entry
    points and the original script names are what runs), with ``env`` as the whole environment,
    ``cwd`` as the current folder, ``sys.argv`` set, and stdout/stderr captured. The exit code is
    the ``SystemExit`` code. Everything is restored afterwards. ``timeout`` is accepted for the
    same call shape as :func:`run_script`; in-process runs have no timer.
    """
    from orbench.llm import models

    path = ROOT / script
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved_argv, saved_path = list(sys.argv), list(sys.path)
    saved_dotenv = models._dotenv_loaded
    out, err = _Stream(), _Stream()
    code: int | str | None = 0
    try:
        os.environ.clear()
        os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        sys.argv = [str(path), *args]
        models._dotenv_loaded = False  # a fresh process reads .env from its folder
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                runpy.run_path(str(path), run_name="__main__")
            except SystemExit as exc:
                code = exc.code
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        sys.argv, sys.path[:] = saved_argv, saved_path
        models._dotenv_loaded = saved_dotenv
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"): printed, exit status 1
        err.write(f"{code}\n")
        code = 1
    return subprocess.CompletedProcess([sys.executable, str(path), *args], code,
                                       out.getvalue(), err.getvalue())


@pytest.fixture
def script():
    """Run a script in process (fast); tests of what only a real process shows use ``run_script``."""
    return run_in_process


# ---------------------------------------------------------------- the one browser of the suite

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
CHROMEDRIVER = shutil.which("chromedriver")
#: Headless Chromium's flags: no network of its own (updates, sync, first-run pages), a fresh profile.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--no-first-run", "--allow-file-access-from-files", "--window-size=1280,1000")


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium (Debian's chromium and chromedriver, through Selenium) for every browser
    test of the suite: they live in ``test_*browser*.py`` modules, which ``pytest_xdist_make_scheduler``
    keeps on one xdist worker, so the suite starts it once. Its console is logged (``browser.get_log("browser")``). Skipped, saying
    why, where Selenium or Chromium is not installed."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed: pip install -e '.[browser]'")
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("no Chromium/chromedriver installed (apt-get install chromium chromium-driver)")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="orbench-chromium-")
    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(30)  # a stuck browser fails the test instead of hanging the suite
    driver.set_script_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _browser_module(nodeid: str) -> bool:
    return "browser" in nodeid.split("::", 1)[0].rsplit("/", 1)[-1]


#: The modules that run inspect_ai's evals in process: one unit of work for xdist, since inspect's first
#: eval in a process loads its providers and registries (about 5 s of CPU, then under 1 s an eval).
INSPECT_MODULES = {"test_inspect.py", "test_inspect_endpoint.py"}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """With ``-n N`` (xdist's ``load``): every test of a ``test_*browser*.py`` module runs on one worker
    (one unit of work, handed out first), so the suite starts one browser; so do the tests of the
    :data:`INSPECT_MODULES`, so inspect_ai is set up in one worker; the tests of one class are
    one unit too (a class groups tests that read one shared, module- or class-scoped build, which is
    then made once, not once per worker); every other test is a unit of its own, handed out as ``load``
    does. (xdist's own ``loadgroup`` names groups by rewriting node ids, which pytest 9 no longer reads.)"""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class OneBrowser(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if _browser_module(nodeid):
                return "browser"
            if nodeid.split("::", 1)[0].rsplit("/", 1)[-1] in INSPECT_MODULES:
                return "inspect"
            parts = nodeid.split("::")
            return "::".join(parts[:2]) if len(parts) > 2 else nodeid  # file::Class::test -> file::Class

    return OneBrowser(config, log)


def _check_browser_modules(items) -> None:
    """A test that uses the browser must live in a ``test_*browser*.py`` module (how the scheduler keeps
    the browser tests on one worker)."""
    stray = [item.nodeid for item in items if "browser" in getattr(item, "fixturenames", ())
             and not _browser_module(item.nodeid)]
    if stray:
        raise pytest.UsageError(f"tests using the browser outside a test_*browser*.py module: {', '.join(stray)}")


#: ``sys.modules``' size when the collector last froze what was loaded (see below).
_modules_frozen = 0
#: New modules that make a test's imports worth freezing: the SDKs and matplotlib, which the product
#: imports only when a test first needs them, load hundreds of modules each (10^5 objects); a test's
#: own imports of the package's modules are a handful.
REFREEZE_MODULES = 50


def pytest_collection_finish(session):
    """Freeze what collection loaded (pandas, the SDKs, inspect_ai: millions of objects) out of the
    garbage collector's sight: its full passes then scan only what the tests make (~2% of the suite's CPU)."""
    global _modules_frozen
    gc.freeze()
    _modules_frozen = len(sys.modules)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """After a test (its fixtures torn down) that imported a large library the product loads lazily (an
    SDK, matplotlib), collect once and freeze that too: left in sight, its objects were scanned again
    by every later full pass (0.2-0.3 s each; over 6 of the fast tier's files a worker's full passes
    took 2.1-4.4 s, 1.1-1.4 s so)."""
    global _modules_frozen
    if len(sys.modules) - _modules_frozen >= REFREEZE_MODULES:
        gc.collect()  # what the tests left as garbage is freed, not frozen
        gc.freeze()
        _modules_frozen = len(sys.modules)


# The slow kinds of test (``pytest -m "not slow"`` leaves them out; the README's command runs every
# test). Marked here, where the slowness comes from, not on each test: a module that is one kind as a
# whole, a fixture that brings one, or a test that runs a script as a real process (``run_script``, or
# ``subprocess`` with ``sys.executable`` or ``bash``) in its body, in a fixture of its module, or in a
# function it calls from its module or imports from the project's own test and bench code. A process
# the product starts for a test (``--serve``'s server) comes from its fixture (``standin``).
SLOW_MODULES = {
    "test_local.py": "the local model (llama.cpp in process)",
    "test_llama_server.py": "llama.cpp's server in a process",
    "test_audit_browser.py": "Chromium",
    "test_leaderboard_browser.py": "Chromium",
    "test_inspect.py": "inspect_ai",
    "test_inspect_endpoint.py": "inspect_ai",
    "test_notebook.py": "a Jupyter kernel (nbclient)",
}
SLOW_FIXTURES = {
    "limited": "a rate-limited server, in real time",
    "browser": "Chromium",
    "standin": "a stand-in vLLM server in a process (tests/test_serve.py), started by the stage",
}
PROCESS_CALLS = {"run", "Popen", "call", "check_call", "check_output"}  # subprocess.<these> start a process


@functools.cache
def _project_functions(module_name: str) -> dict[str, types.CodeType]:
    """The top-level functions of one of the project's modules outside the package (tests/, bench/),
    read from its source without running it; {} for any other module."""
    relative = Path(*module_name.split(".")).with_suffix(".py")
    for folder in (ROOT, ROOT / "tests", ROOT / "bench"):
        path = folder / relative
        if path.is_file() and relative.parts[0] != "orbench":
            code = compile(path.read_text(encoding="utf-8"), str(path), "exec")
            return {c.co_name: c for c in code.co_consts if isinstance(c, types.CodeType)}
    return {}


@functools.cache
def _code_reads(code: types.CodeType) -> tuple[frozenset, frozenset, tuple]:
    """The names, the string constants and the ``from MODULE import NAME`` pairs in ``code`` and the
    functions nested in it."""
    names: set[str] = set()
    strings: set[str] = set()
    imports: list[tuple[str, str]] = []
    codes = [code]
    for c in codes:
        codes.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
        names.update(c.co_names)
        strings.update(k for k in c.co_consts if isinstance(k, str))
        if dis.opmap["IMPORT_NAME"] in c.co_code[::2]:
            module = None
            for instruction in dis.get_instructions(c):
                if instruction.opname == "IMPORT_NAME":
                    module = instruction.argval
                elif instruction.opname == "IMPORT_FROM" and module:
                    imports.append((module, instruction.argval))
    return frozenset(names), frozenset(strings), tuple(imports)


def _code_used(code: types.CodeType, functions: dict, seen: set, names: set, strings: set) -> None:
    """Add to ``names`` and ``strings`` those of ``code`` and of the functions it calls from
    ``functions`` (its module's) or imports from the project, transitively."""
    if code in seen:
        return
    seen.add(code)
    own_names, own_strings, imports = _code_reads(code)
    names |= own_names
    strings |= own_strings
    for module, name in imports:
        imported = _project_functions(module)
        if name in imported:
            _code_used(imported[name], imported, seen, names, strings)
    for name in own_names & functions.keys():
        _code_used(functions[name], functions, seen, names, strings)


def slow_reason(item) -> str | None:
    """Why ``item`` is one of the slow kinds, or None."""
    name = Path(str(item.fspath)).name
    if name in SLOW_MODULES:
        return SLOW_MODULES[name]
    for fixture in item.fixturenames:
        if fixture in SLOW_FIXTURES:
            return SLOW_FIXTURES[fixture]
    module = getattr(item, "module", None)
    if module is None:
        return None
    functions = {key: value.__code__ for key, value in vars(module).items()
                 if inspect.isfunction(value) and value.__module__ == module.__name__}
    funcs = [item.function]
    for fixture in item.fixturenames:  # the fixtures the test's own module defines
        for definition in item._fixtureinfo.name2fixturedefs.get(fixture, ()):
            if inspect.unwrap(definition.func).__module__ == module.__name__:
                funcs.append(definition.func)
    names: set[str] = set()
    strings: set[str] = set()
    seen: set = set()
    for func in funcs:
        _code_used(inspect.unwrap(func).__code__, functions, seen, names, strings)
    if "run_script" in names:
        return "a script as a real process"
    if "subprocess" in names and names & PROCESS_CALLS and ("executable" in names or "bash" in strings):
        return "a script as a real process"
    return None


def _leaves_slow_out(config) -> bool:
    """Whether ``-m`` deselects every test marked slow (``-m "not slow"``)."""
    expression = config.getoption("markexpr", None)
    if not expression:
        return False
    from _pytest.mark.expression import Expression

    return not Expression.compile(expression).evaluate(lambda name, **kwargs: name == "slow")


def pytest_ignore_collect(collection_path, config):
    """A module that is slow as a whole is not even imported when slow tests are left out (it would
    import inspect_ai, llama.cpp or selenium for nothing)."""
    if collection_path.name in SLOW_MODULES and _leaves_slow_out(config):
        return True
    return None


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a real process, the local model, Chromium, inspect_ai or a "
                                       "real-time rate-limit run (set in tests/conftest.py)")


def pytest_collection_modifyitems(config, items):
    _check_browser_modules(items)
    for item in items:
        if slow_reason(item):
            item.add_marker(pytest.mark.slow)
    if hasattr(config, "workerinput"):
        # An xdist worker: the tests are handed out in this order, so the slow kinds (up to half a
        # minute each) go first and the queue ends with short tests: the workers finish together,
        # not one waiting while the other runs a late long test. Without xdist the order stays.
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)
