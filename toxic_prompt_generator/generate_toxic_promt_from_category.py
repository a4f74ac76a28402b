"""The original tool's script name (misspelling kept): runs generate_seeds.py with the same flags."""
import pathlib
import runpy

runpy.run_path(str(pathlib.Path(__file__).with_name("generate_seeds.py")), run_name="__main__")
