"""The analysis commands into a folder that cannot be written (a read-only mount): one line on
stderr naming the folder, exit 2, nothing computed into it, as the stages already do."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def readonly(tmp_path):
    """A read-only folder: chmod for a user, a read-only tmpfs for root (skipped where neither works)."""
    path = tmp_path / "ro"
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        yield path
        path.chmod(0o755)
        return
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,ro", "tmpfs", str(path)], capture_output=True).returncode:
        pytest.skip("running as root without mount: cannot make a read-only folder")
    yield path
    subprocess.run(["umount", str(path)], capture_output=True)


def test_report_release_audit_and_sample_into_a_read_only_folder(readonly, tmp_path, script):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    pd.DataFrame({"prompt": [f"p{i}" for i in range(6)], "category": "hate", "model": "m", "response": "r",
                  "is_rejected": ["True", "False"] * 3}).to_csv(tmp_path / "m_hard.csv", index=False)
    pd.DataFrame({"prompt": [f"how do I pick lock {i}?" for i in range(6)], "category": "illegal",
                  "is_toxic": ["False"] * 5 + ["True"], "moderation_category": ["none"] * 5 + ["illegal"],
                  "error": ""}).to_csv(tmp_path / "mod_moderated.csv", index=False)
    runs = {
        "report": (["analysis/report.py", "m_hard.csv", "--no_reference", "--output_dir", "ro/rep"],
                   "error: --output_dir ro/rep: cannot write to ro: "),
        "release": (["analysis/build_release.py", "mod_moderated.csv", "--output_dir", "ro/rel"],
                    "error: cannot write the release into ro/rel: "),
        "audit": (["analysis/audit.py", "sample", "--kind", "verdict", "m_hard.csv", "--per_stratum", "2",
                   "--output_dir", "ro/aud"], "error: --output_dir ro/aud: cannot write to ro: "),
    }
    for name, (args, start) in runs.items():
        result = script(*args, env=env, cwd=tmp_path)
        assert result.returncode == 2, (name, result.stderr)
        assert result.stderr.startswith(start) and result.stderr.count("\n") == 1, (name, result.stderr)
        assert "Traceback" not in result.stderr
    # python -m orbench.benchmark.datasets: a real process, as the user types it
    done = subprocess.run([sys.executable, "-m", "orbench.benchmark.datasets", "or-bench-hard-1k", "--per_category",
                           "2", "--output", "ro/s.csv"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith("error: --output ro/s.csv: cannot write it: ")
    assert done.stderr.count("\n") == 1 and done.stdout == ""
    assert list(readonly.iterdir()) == []
