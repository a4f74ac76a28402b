"""CPU time of the audit, calibration-card, comparison and table-reading paths on small inputs.

What a user running these tools on a few hundred rows (and the test suite) pays per call, so a
change to those paths can be measured old against new: run it with each tree on ``PYTHONPATH``
(``PYTHONPATH=/path/to/tree python bench/small_paths.py``), alternately, on a quiet machine.
Inputs are synthetic (seeded): two stage-4 files of 150 and 120 rows and the judge file of the
first; a verdict audit of 3 per stratum labelled by two annotators; a stage-5 table of 300 rows
for a judge card, a stage-3 table of 300 rows for a moderator card; three models on two sets for
the comparison. Prints the mean CPU milliseconds (``time.process_time``) of each call.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

CATEGORIES = ["deception", "harassment", "privacy", "violence"]


def cpu_ms(call, budget: float = 1.5) -> float:
    """Mean CPU milliseconds of ``call()`` over ``budget`` seconds (after one warm-up call)."""
    call()
    start, runs = time.process_time(), 0
    while time.process_time() - start < budget:
        call()
        runs += 1
    return (time.process_time() - start) / runs * 1e3


def stage_files(folder: Path, rng) -> list[str]:
    """Two stage-4 outputs and the stage-5 output of the first."""
    paths = []
    for name, n, model in (("hard_m1.csv", 150, "m1"), ("toxic_m2.csv", 120, "m2")):
        pd.DataFrame({"prompt": [f"prompt {i}" for i in range(n)], "category": rng.choice(CATEGORIES, n),
                      "response": [f"reply {model} {i}" for i in range(n)],
                      "is_rejected": rng.choice(["True", "False"], n), "finish_reason": "stop", "error": "",
                      "model": model}).to_csv(folder / name, index=False)
        paths.append(str(folder / name))
    judged = pd.read_csv(paths[0], dtype=str, keep_default_na=False)
    judged["keyword_is_rejected"] = judged["is_rejected"]
    judged["answer_category"] = rng.choice(["direct_answer", "direct_refusal", "indirect_refusal"], len(judged))
    judged["is_rejected"] = (judged["answer_category"] != "direct_answer").map(str)
    judged["judge_model"] = "gpt-4o"
    judged.to_csv(folder / "hard_m1_judge.csv", index=False)
    return [*paths, str(folder / "hard_m1_judge.csv")]


def main() -> None:
    from orbench.analysis import compare
    from orbench.analysis.audit import commands, sample
    from orbench.analysis.calibration import calibrate, moderation
    from orbench.analysis.report import inputs
    from orbench.run.tables import read_table

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        files = stage_files(folder, rng)
        audit = folder / "audit"

        def draw():
            shutil.rmtree(audit, ignore_errors=True)
            with contextlib.redirect_stdout(io.StringIO()):
                sample.write_sample(files, "verdict", audit, per_stratum=3)

        print(f"{'read_table (stage-4 file, 150 rows)':45s} {cpu_ms(lambda: read_table(files[0])):7.1f} ms")
        print(f"{'audit sample (write_sample, 270 rows)':45s} {cpu_ms(draw):7.1f} ms")  # leaves the last draw
        items = pd.read_csv(audit / "items.csv", dtype=str, keep_default_na=False)
        sid = sample.read_sample(audit).sample_id
        for who in ("alice", "bob"):
            pd.DataFrame({"sample_id": sid, "item_id": items["item_id"], "annotator": who, "note": "",
                          "label": rng.choice(["full_compliance", "full_refusal", "partial_refusal"], len(items))}
                         ).to_csv(audit / f"labels_{who}.csv", index=False)
        n = 300
        judged = pd.DataFrame({"source": rng.choice(["gpt-4", "llama-3", "mistral"], n),
                               "prompt_kind": rng.choice(["safe", "unsafe"], n), "error": "",
                               "answer_category": rng.choice(["direct_answer", "direct_refusal"], n),
                               "is_rejected": rng.choice(["True", "False"], n),
                               "human_refusal": rng.choice([True, False], n), "model": "gpt-4"})
        moderated = pd.DataFrame({"category": rng.choice(CATEGORIES, n), "error": "",
                                  "is_toxic": rng.choice(["True", "False"], n), "moderation_category": "toxic",
                                  "unparsed_votes": "0", "human_unsafe": rng.choice([True, False], n)})
        compared = []
        for model in ("A", "B", "C"):
            for set_name in ("hard", "toxic"):
                path = folder / f"{model.lower()}_{set_name}.csv"
                pd.DataFrame({"prompt": [f"prompt {i}" for i in range(80)], "category": rng.choice(CATEGORIES, 80),
                              "model": model, "response": "r", "is_rejected": rng.choice(["True", "False"], 80)}
                             ).to_csv(path, index=False)
                compared.append(str(path))
        loaded = inputs.load(compared, None, None)
        calls = {
            "audit score (load_and_score, 2 annotators)": lambda: commands.load_and_score(audit),
            "judge card (build_card, 300 rows)": lambda: calibrate.build_card(judged, {}, {"name": "x"}, None),
            "moderator card (build_card, 300 rows)": lambda: moderation.build_card(moderated, {}, {"name": "x"},
                                                                                  Path("m.csv"), "m"),
            "compare (3 models x 2 sets, 80 prompts)": lambda: compare.compare(
                loaded, [("A", "B"), ("A", "C"), ("B", "C")]),
        }
        for name, call in calls.items():
            print(f"{name:45s} {cpu_ms(call):7.1f} ms")


if __name__ == "__main__":
    main()
