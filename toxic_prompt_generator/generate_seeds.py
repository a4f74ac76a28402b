"""Stage 1: generate toxic seed prompts for a category. Run as ``python
toxic_prompt_generator/generate_seeds.py`` (or from inside ``toxic_prompt_generator/``); see
``--help``.

A thin entry point: the stage itself is ``orbench.stages.generate_seeds``.
"""
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the project importable without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orbench.stages.generate_seeds import main  # noqa: E402 (needs the sys.path set-up above)

if __name__ == "__main__":
    sys.exit(main())
