"""A finished output is never replaced silently (issue 30, item 1), through the real scripts.

A change of what the user asked for (model, system prompt, temperature, max tokens, samples,
judge, moderators, seed of a release...) against an output that is finished or partly done
stops before any request: exit 2, one line naming the output, the setting (old and new value)
and the ways on; the first output and its meta file stay byte-identical. A change of the
project's own rules (keyword rules, templates, cascade classes) re-scores in place and the
summary says so. Outputs made by the previous version (``tests/data/legacy``, made by its code)
still resume with nothing sent.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

LEGACY = Path(__file__).resolve().parent / "data" / "legacy"
sys.path.insert(0, str(LEGACY))

from make_fixtures import COMMANDS  # noqa: E402 (the fixtures' folder is put on sys.path just above)


def _copy_legacy(tmp_path: Path) -> None:
    for path in LEGACY.iterdir():
        if path.is_file() and path.suffix != ".py":
            shutil.copy(path, tmp_path / path.name)


@pytest.mark.parametrize("index", range(len(COMMANDS)),
                         ids=[f"{Path(s).stem}-{a[a.index('--output_file') + 1]}" for s, a in COMMANDS])
def test_outputs_of_the_previous_version_resume_with_nothing_sent(index, env, fake, script, tmp_path):
    _copy_legacy(tmp_path)
    path, args = COMMANDS[index]
    output = tmp_path / args[args.index("--output_file") + 1]
    before = pd.read_csv(output, dtype=str, keep_default_na=False)
    proc = script(path, *args, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert fake.count() == 0, proc.stderr
    assert "0 new" in proc.stderr, proc.stderr
    after = pd.read_csv(output, dtype=str, keep_default_na=False)
    assert after.equals(before)
