"""The ``slow`` marker (tests/conftest.py): which tests ``pytest -m "not slow"`` leaves out.

A test is slow when it runs a script as a real process (``run_script``, or ``subprocess`` with
``sys.executable`` or ``bash``: in its body, in a helper of its module, or in a function it imports
from the project's tests or benchmarks), when its module is one slow kind as a whole (the local
model, Chromium, inspect_ai, llama.cpp's server) or when it uses a fixture that brings one. The
``case_*`` functions below are never run: they are the shapes a test can take, read as code.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import ROOT, run_script, slow_reason

PROCESS = "a script as a real process"


def _start(path):
    return subprocess.Popen([sys.executable, str(path)])


def case_a_process_through_a_helper(tmp_path):
    _start(tmp_path / "x.py").wait()


def case_a_shell_script():
    subprocess.run(["bash", "scripts/demo.sh"], check=True)


def case_run_script(env):
    run_script("alignment_checker/check_alignment.py", "--help", env=env)


def case_a_bench_function_that_starts_a_process(tmp_path):
    from bench.report_scale import measure_report

    measure_report(models=1, rows=1, folder=tmp_path)


def case_a_bench_function_in_process(tmp_path):
    from bench.report_scale import make_synthetic

    make_synthetic(tmp_path, 1, 1)


def case_a_system_command(tmp_path):  # a process, but no script: mount takes milliseconds
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(tmp_path)], capture_output=True)


def case_a_script_in_process(script, env):
    script("alignment_checker/check_alignment.py", "--help", env=env)


def case_a_process_object_only():  # names subprocess without starting anything
    return subprocess.CompletedProcess(["x"], 0)


def item(function, path: Path = Path(__file__), fixtures: tuple[str, ...] = ()):
    """What slow_reason reads of a collected test."""
    return SimpleNamespace(fspath=path, fixturenames=list(fixtures), module=sys.modules[__name__],
                           function=function, _fixtureinfo=SimpleNamespace(name2fixturedefs={}))


@pytest.mark.parametrize("function, reason", [
    (case_a_process_through_a_helper, PROCESS),
    (case_a_shell_script, PROCESS),
    (case_run_script, PROCESS),
    (case_a_bench_function_that_starts_a_process, PROCESS),
    (case_a_bench_function_in_process, None),
    (case_a_system_command, None),
    (case_a_script_in_process, None),
    (case_a_process_object_only, None),
])
def test_a_test_that_runs_a_script_as_a_process_is_slow(function, reason):
    assert slow_reason(item(function)) == reason


def test_slow_modules_and_fixtures():
    assert slow_reason(item(case_a_script_in_process, ROOT / "tests" / "test_local.py")) == \
        "the local model (llama.cpp in process)"
    assert slow_reason(item(case_a_script_in_process, ROOT / "tests" / "test_inspect.py")) == "inspect_ai"
    assert slow_reason(item(case_a_script_in_process, fixtures=("env", "limited"))) == \
        "a rate-limited server, in real time"
    assert slow_reason(item(case_a_script_in_process, ROOT / "tests" / "test_leaderboard_browser.py")) == "Chromium"
    assert slow_reason(item(case_a_script_in_process, fixtures=("browser",))) == "Chromium"
    assert slow_reason(item(case_a_script_in_process, fixtures=("standin",))).startswith("a stand-in vLLM server")
    assert slow_reason(item(case_a_script_in_process, fixtures=("env", "fake"))) is None


def test_the_marker_is_registered_and_set_on_what_was_collected(request):
    assert any(line.startswith("slow:") for line in request.config.getini("markers"))
    items = request.session.items
    assert items
    for collected in items:
        assert (collected.get_closest_marker("slow") is not None) == (slow_reason(collected) is not None), \
            collected.nodeid
