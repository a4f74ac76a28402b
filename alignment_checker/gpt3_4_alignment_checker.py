"""The original tool's script name for stage 4: check_alignment.py, sending a model name with no known
provider to openai."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: the project importable

from orbench.stages.check_alignment import main  # noqa: E402 (needs the path set just above)

if __name__ == "__main__":
    raise SystemExit(main(default_provider="openai"))
