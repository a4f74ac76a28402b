"""Stage 4: ask a model every prompt and flag refusals by keyword. Run as ``python
alignment_checker/check_alignment.py`` (or from inside ``alignment_checker/``); see ``--help``.

A thin entry point: the stage itself is ``orbench.stages.check_alignment``.
"""
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the project importable without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orbench.stages.check_alignment import main  # noqa: E402 (needs the sys.path set-up above)

if __name__ == "__main__":
    sys.exit(main())
