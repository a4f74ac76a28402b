"""Stage 2: rewrite each toxic seed into seemingly-toxic prompts. Run as ``python
rewritter/rewrite.py`` (or from inside ``rewritter/``); see ``--help``.

A thin entry point: the stage itself is ``orbench.stages.rewrite``.
"""
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the project importable without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orbench.stages.rewrite import main  # noqa: E402 (needs the sys.path set-up above)

if __name__ == "__main__":
    sys.exit(main())
