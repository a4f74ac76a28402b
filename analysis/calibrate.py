"""Measure a judge against human labels and keep its judge card: ``python analysis/calibrate.py --help``.

A thin entry point: the code is ``orbench.analysis.calibration.calibrate`` (installed as ``orbench-calibrate``).
"""
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the project importable without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orbench.analysis.calibration.calibrate import main  # noqa: E402 (needs the sys.path set-up above)

if __name__ == "__main__":
    sys.exit(main())
