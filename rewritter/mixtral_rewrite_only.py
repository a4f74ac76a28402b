"""The original tool's script name: runs rewrite.py with the same flags (--toxic_seed_path=...)."""
import pathlib
import runpy

runpy.run_path(str(pathlib.Path(__file__).with_name("rewrite.py")), run_name="__main__")
