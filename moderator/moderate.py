"""Stage 3: moderate prompts or responses with an LLM ensemble. Run as ``python moderator/moderate.py``
(or from inside ``moderator/``); see ``--help``.

A thin entry point: the stage itself is ``orbench.stages.moderate``.
"""
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the project importable without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orbench.stages.moderate import main  # noqa: E402 (needs the sys.path set-up above)

if __name__ == "__main__":
    sys.exit(main())
