"""Turn an inspect_ai log of an orbench/ task into the stage-4/5 CSV: ``python analysis/inspect_to_csv.py --help``.

A thin entry point: the code is ``orbench.integrations.inspect_log``.
"""
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the project importable without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orbench.integrations.inspect_log import main  # noqa: E402 (needs the sys.path set-up above)

if __name__ == "__main__":
    sys.exit(main())
