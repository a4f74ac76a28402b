"""Hand-made mutants of the core logic, each run against the tests named for it: are they caught?

Each mutant is one textual change to one module (a rule removed, a method swapped, an operator
flipped, a write made in place). The script applies them one at a time to the working tree, runs
``pytest -x -q`` on the mutant's tests, restores the file, and prints a table: the mutant, the
tests, caught or SURVIVED (and the first failing test). Not run by pytest; takes a few minutes.

    python bench/mutants.py               # every mutant
    python bench/mutants.py holm decline  # only those whose name contains a word given
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (name, file, old text, new text, tests)
MUTANTS = [
    ("holm -> hochberg (step-down made step-up)", "orbench/analysis/compare.py",
     "np.minimum(1.0, np.maximum.accumulate(p[order] * steps))",
     "np.minimum(1.0, np.minimum.accumulate((p[order] * steps)[::-1])[::-1])", ["tests/test_compare.py"]),
    ("refusal rule 'I must decline' removed", "orbench/scoring/refusal.py",
     '    r"\\bi (?:must|have to|need to|\'ll have to|will have to) (?:respectfully |politely )?decline",\n', "",
     ["tests/test_refusal_rules.py", "tests/test_refusal.py"]),
    ("refusal rule 'I'd rather not' removed", "orbench/scoring/refusal.py", 'r"\\bi(?:\'d| would) rather not\\b", ', "",
     ["tests/test_refusal_rules.py"]),
    ("early cue 'crisis line' removed", "orbench/scoring/refusal.py", 'r"\\bcrisis (?:hot)?line\\b", ', "",
     ["tests/test_refusal_rules.py"]),
    ("lecture redirect 'instead, ' removed", "orbench/scoring/refusal.py", '    r"\\binstead, ",\n', "",
     ["tests/test_refusal_rules.py"]),
    ("gemma extra rule removed", "orbench/scoring/refusal.py", 'r"\\bi do not have the ability\\b",\n', "",
     ["tests/test_refusal_rules.py"]),
    ("opening window 400 -> 4000", "orbench/scoring/refusal.py", "OPENING_CHARS = 400", "OPENING_CHARS = 4000",
     ["tests/test_refusal.py", "tests/test_cascade.py"]),
    ("early sentences 2 -> 3", "orbench/scoring/refusal.py", "EARLY_SENTENCES = 2", "EARLY_SENTENCES = 3",
     ["tests/test_refusal.py", "tests/test_refusal_rules.py"]),
    ("cascade strong cue 'unethical' removed", "orbench/scoring/cascade.py", 'r"\\bunethical\\b", ', "",
     ["tests/test_cascade_cues.py", "tests/test_cascade.py"]),
    ("cascade hedge 'dangerous' removed", "orbench/scoring/cascade.py", 'r"\\bdangerous\\b", ', "",
     ["tests/test_cascade_cues.py", "tests/test_cascade.py"]),
    ("cascade premise denial 'fictional' removed", "orbench/scoring/cascade.py", 'r"\\bfictional\\b", ', "",
     ["tests/test_cascade_cues.py", "tests/test_cascade.py"]),
    ("cascade turn 'however' removed", "orbench/scoring/cascade.py", 'TURNS = r"^(?:however|but|', 'TURNS = r"^(?:but|',
     ["tests/test_cascade.py", "tests/test_cascade_cues.py"]),
    ("progress file rewritten in place", "orbench/run/stage.py",
     '            with os.fdopen(fd, "w", encoding="utf-8") as handle:',
     '            with open(self.path, "w", encoding="utf-8") as handle:',
     ["tests/test_atomic_writes.py", "tests/test_stage.py"]),
    ("CSV output written in place", "orbench/run/tables.py",
     '        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:\n            frame.to_csv',
     '        with open(target, "w", encoding="utf-8", newline="") as handle:\n            frame.to_csv',
     ["tests/test_atomic_writes.py"]),
    ("wilson centre without the z^2/2n", "orbench/analysis/stats.py",
     "centre = (p + z * z / (2 * n)) / denom", "centre = p / denom", ["tests/test_stats.py"]),
    ("newcombe sides swapped", "orbench/analysis/stats.py",
     "low = d - math.sqrt(max(0.0, (pb - lb) ** 2", "low = d - math.sqrt(max(0.0, (ub - pb) ** 2",
     ["tests/test_stats.py", "tests/test_compare.py"]),
    ("judge numbers off by one", "orbench/scoring/labels.py", "_JUDGE_NUMBERS = {i + 1: c", "_JUDGE_NUMBERS = {i: c",
     ["tests/test_labels.py"]),
    ("a provider block is not a toxic vote", "orbench/scoring/labels.py",
     "if label == PROVIDER_BLOCK or label in CATEGORIES:", "if label in CATEGORIES:",
     ["tests/test_labels.py", "tests/test_moderate.py"]),
    ("moderation ensemble: a tie counts as safe", "orbench/stages/moderate.py", "if safe * 2 > total:",
     "if safe * 2 >= total:", ["tests/test_moderate.py"]),
    ("judge ensemble: half the votes is a majority", "orbench/scoring/verdicts.py",
     "if 2 * top_n > n and judge_is_rejected(top)", "if 2 * top_n >= n and judge_is_rejected(top)",
     ["tests/test_judge.py", "tests/test_judge_outcomes.py"]),
    ("stage 5 keyword verdict on an empty response is 'answer'", "orbench/scoring/verdicts.py",
     "return is_refusal(row.response, row.family) if row.response.strip() else None",
     "return is_refusal(row.response, row.family) if row.response.strip() else False",
     ["tests/test_judge.py", "tests/test_judge_outcomes.py", "tests/test_outcomes.py"]),
    ("row key ignores the settings", "orbench/run/stage.py", "blob = json.dumps([config, list(values)]",
     "blob = json.dumps([{}, list(values)]", ["tests/test_stage.py", "tests/test_settings_guard.py"]),
    ("settings guard sees no difference", "orbench/run/existing_output.py",
     "if old.get(k) != new.get(k)]", "if old.get(k) != new.get(k) and False]", ["tests/test_settings_guard.py"]),
    ("cache key ignores the temperature", "orbench/llm/clients.py", '"temperature": request.temperature,\n', "",
     ["tests/test_clients.py", "tests/test_samples.py"]),
    ("no retry of a reply with no answer", "orbench/llm/clients.py", "attempts = self.max_retries + 1",
     "attempts = 1", ["tests/test_trust.py", "tests/test_provider_contract.py"]),
    ("stage 4: an empty reply is an answer", "orbench/scoring/refusal.py",
     '        return {"is_rejected": None, "refusal_source": EMPTY_RESPONSE, "refusal_kind": None}',
     '        return {"is_rejected": False, "refusal_source": EMPTY_RESPONSE, "refusal_kind": None}',
     ["tests/test_check_alignment.py", "tests/test_provider_contract.py"]),
    ("a settings field marked as a rule is left out of the key", "orbench/run/settings.py",
     "if how.get(\"unkeyed\") or", "if how.get(\"unkeyed\") or how.get(\"rule\") or",
     ["tests/test_keys.py", "tests/test_settings_guard.py"]),
    ("--estimate counts the requests the cache answers", "orbench/llm/clients.py",
     "if key not in found and (self.cache is None or self.cache.get(key) is None):", "if key not in found:",
     ["tests/test_estimate.py"]),
    ("after a batch, a request it did not answer is sent", "orbench/llm/batch.py",
     "        if request.model.provider.name not in self.providers:\n",
     "        if True:\n", ["tests/test_batch.py"]),
    ("the cascade asks the judge about the rows it is sure of", "orbench/scoring/verdicts.py",
     "    if plan.cascade and confidence(row.response, row.family, row.kind)[1] is not None:\n        return None\n",
     "", ["tests/test_cascade.py"]),
    ("stage 1: one stale call fewer stops it", "orbench/stages/generate_seeds.py",
     "state.stale_streak >= self.stale_limit:\n            return 0",
     "state.stale_streak >= self.stale_limit - 1:\n            return 0", ["tests/test_generate.py"]),
]


def run(mutant) -> tuple[bool, str, float]:
    name, path, old, new, tests = mutant
    file = ROOT / path
    original = file.read_text(encoding="utf-8")
    if original.count(old) != 1:
        raise SystemExit(f"mutant {name!r}: the text to change is not in {path} exactly once")
    file.write_text(original.replace(old, new), encoding="utf-8")
    started = time.monotonic()
    try:
        result = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                                cwd=ROOT, capture_output=True, text=True, timeout=600)
    finally:
        file.write_text(original, encoding="utf-8")
    failed = next((line.split()[1] for line in result.stdout.splitlines() if line.startswith("FAILED")), "")
    return result.returncode != 0, failed, time.monotonic() - started


def main(argv: list[str]) -> int:
    chosen = [m for m in MUTANTS if not argv or any(w in m[0] for w in argv)]
    survived = 0
    for mutant in chosen:
        caught, failed, seconds = run(mutant)
        survived += not caught
        print(f"{'caught  ' if caught else 'SURVIVED'} {mutant[0]:<58} {seconds:5.1f}s  {failed}", flush=True)
    print(f"{len(chosen) - survived} of {len(chosen)} mutants caught")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
