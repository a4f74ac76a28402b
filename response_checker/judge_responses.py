"""Stage 5: classify responses with an LLM judge or re-score by keyword. Run as ``python
response_checker/judge_responses.py`` (or from inside ``response_checker/``); see ``--help``.

A thin entry point: the stage itself is ``orbench.stages.check_response``.
"""
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the project importable without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orbench.stages.check_response import main  # noqa: E402 (needs the sys.path set-up above)

if __name__ == "__main__":
    sys.exit(main())
