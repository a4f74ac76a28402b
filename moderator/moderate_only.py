"""The original tool's script name for stage 3: runs moderate.py with the same flags (see its --help)."""
import pathlib
import runpy

runpy.run_path(str(pathlib.Path(__file__).with_name("moderate.py")), run_name="__main__")
