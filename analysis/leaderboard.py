"""Build the leaderboard site from report folders and Every Eval Ever records: ``python analysis/leaderboard.py --help``.

A thin entry point: the code is ``orbench.analysis.leaderboard.build``.
"""
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the project importable without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orbench.analysis.leaderboard.build import main  # noqa: E402 (needs the sys.path set-up above)

if __name__ == "__main__":
    sys.exit(main())
