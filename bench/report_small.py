"""The report over small inputs, as the tests and a notebook user build it: CPU seconds per build.

Two inputs: those of ``tests/test_report.py``'s fixture, written here (judge files, with the
keyword verdict beside the judge's, for 4 models x Hard-1K and Toxic, 200 rows each in 2
categories, an alignment file for one model and a keyword-only file for a fifth), and one model's
two judge files of 10 rows (what most tests build: the report's fixed costs). Three builds are
timed in this process (``time.process_time``, so a busy machine inflates them less than wall time),
each the median of ``--repeat`` runs after one untimed warm-up (imports, matplotlib's font cache):

- ``compute``: :func:`orbench.analysis.report.build.compute` only (what ``orbench.report()`` does);
- ``no figures``: compute and write every table, report.json, report.html and the Every Eval Ever
  records (``--no_figures``);
- ``figures``: the default build, figures drawn.

``--profile NAME`` prints cProfile's 30 largest cumulative entries of one build of that kind. The
code timed is the ``orbench`` Python finds first (PYTHONPATH's, else this checkout's), so two trees
are compared by running it with each in turn::

    PYTHONPATH=. python bench/report_small.py --repeat 7
    PYTHONPATH=../main python bench/report_small.py --repeat 7
    python bench/report_small.py --profile figures
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

# This checkout last, so PYTHONPATH can name another tree to time (PYTHONPATH=../main for the base).
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

from orbench.analysis.report import build  # noqa: E402 (needs the sys.path set-up above)

# per set and model, per category: (judge rejections, answers, error rows, unparsed rows), as the tests'
SPEC = {
    "or-bench-hard-1k": {"prov/m1": {"hate": (20, 80, 1, 1), "privacy": (0, 100, 0, 0)},
                         "prov/m2": {"hate": (40, 60, 0, 2), "privacy": (40, 60, 2, 0)},
                         "prov/m3": {"hate": (70, 30, 0, 0), "privacy": (70, 30, 1, 0)},
                         "prov/m4": {"hate": (20, 80, 0, 0), "privacy": (20, 80, 0, 3)}},
    "or-bench-toxic": {"prov/m1": {"hate": (60, 40, 1, 0), "privacy": (60, 40, 0, 0)},
                       "prov/m2": {"hate": (80, 20, 0, 0), "privacy": (80, 20, 0, 0)},
                       "prov/m3": {"hate": (90, 10, 0, 2), "privacy": (90, 10, 0, 0)},
                       "prov/m4": {"hate": (100, 0, 0, 0), "privacy": (90, 10, 0, 0)}},
}
CLASS = {"rej": "direct_refusal", "ans": "direct_answer", "err": "skipped_error", "unp": "unparsed"}


def _judge_rows(set_name: str, model: str, cats: dict) -> list[dict]:
    rows = []
    for cat, (rej, ans, err, unp) in cats.items():
        for i, kind in enumerate(["rej"] * rej + ["ans"] * ans + ["err"] * err + ["unp"] * unp):
            rows.append({"prompt": f"{set_name} {cat} prompt {i}", "category": cat, "model": model,
                         "response": "text", "refusal_source": "", "finish_reason": "stop",
                         "answer_category": CLASS[kind], "answer_type_response": "judge says",
                         "is_rejected": {"rej": "True", "ans": "False"}.get(kind, ""),
                         "keyword_is_rejected": {"rej": "True", "ans": "False", "unp": "False"}.get(kind, ""),
                         "error": ""})
    return rows


def write_inputs(folder: Path) -> list[str]:
    """The small inputs (module docstring) in ``folder``; the report's file arguments."""
    for set_name, models in SPEC.items():
        for model, cats in models.items():
            pd.DataFrame(_judge_rows(set_name, model, cats)).to_csv(
                folder / f"{model.split('/')[1]}_{set_name}_judged.csv", index=False)
    align = pd.DataFrame(_judge_rows("or-bench-hard-1k", "prov/m1", SPEC["or-bench-hard-1k"]["prov/m1"]))
    align = align.drop(columns=["answer_category", "answer_type_response", "is_rejected"])
    align.rename(columns={"keyword_is_rejected": "is_rejected"}).to_csv(folder / "m1_hard_checked.csv", index=False)
    pd.DataFrame({"prompt": [f"p{i}" for i in range(82)], "category": ["hate"] * 82, "response": ["x"] * 82,
                  "is_rejected": ["True"] * 30 + ["False"] * 50 + ["", ""], "finish_reason": ["stop"] * 82,
                  "error": [""] * 80 + ["HTTP 500", ""]}).to_csv(folder / "m5_results.csv", index=False)
    return [str(folder / "*_judged.csv"), str(folder / "m1_hard_checked.csv"), f"hard:m5={folder / 'm5_results.csv'}"]


def write_tiny(folder: Path) -> list[str]:
    """The smallest useful report: one model's judge files on Hard-1K and Toxic, 10 rows each."""
    for set_name, cats in (("or-bench-hard-1k", {"hate": (5, 5, 0, 0)}), ("or-bench-toxic", {"hate": (8, 2, 0, 0)})):
        pd.DataFrame(_judge_rows(set_name, "prov/m1", cats)).to_csv(folder / f"m1_{set_name}_judged.csv", index=False)
    return [str(folder / "*_judged.csv")]


def one_build(kind: str, specs: list[str], out: Path) -> float:
    """CPU seconds of one build of ``kind`` (module docstring) into ``out``."""
    start = time.process_time()
    if kind == "compute":
        build.compute(specs)
    else:
        build.build_report(specs, out, figures=kind == "figures")
    return time.process_time() - start


def main(argv=None) -> int:
    """Print the median CPU seconds per build of each kind (or one build's profile)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="timed builds per kind (default: 5)")
    parser.add_argument("--profile", choices=("compute", "no figures", "figures"), default=None)
    args = parser.parse_args(argv)
    print(f"timing {Path(build.__file__).parents[3]}")
    with tempfile.TemporaryDirectory(prefix="orbench_report_small_") as tmp:
        tmp = Path(tmp)
        (tmp / "small").mkdir()
        (tmp / "tiny").mkdir()
        inputs = {"tests' fixture: 5 models, 1,682 rows": write_inputs(tmp / "small"),
                  "one model, 20 rows": write_tiny(tmp / "tiny")}
        one_build("figures", inputs["one model, 20 rows"], tmp / "warm")
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            one_build(args.profile, next(iter(inputs.values())), tmp / "out")
            prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(30)
            return 0
        print("| inputs | build | CPU s (median) | min | max |\n|---|---|---:|---:|---:|")
        for name, specs in inputs.items():
            for kind in ("compute", "no figures", "figures"):
                # a new folder each build, as the tests' (removing an earlier build's records is not measured)
                times = [one_build(kind, specs, tmp / f"{kind} {i}") for i in range(args.repeat)]
                print(f"| {name} | {kind} | {statistics.median(times):.3f} | {min(times):.3f} | {max(times):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
