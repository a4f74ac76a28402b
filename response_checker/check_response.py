"""The original tool's script name for stage 5: runs judge_responses.py with the same flags (see its --help)."""
import pathlib
import runpy

runpy.run_path(str(pathlib.Path(__file__).with_name("judge_responses.py")), run_name="__main__")
