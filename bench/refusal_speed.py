"""Print the per-row cost of the keyword refusal matchers (orbench.scoring.refusal).

Usage:
    python bench/refusal_speed.py [XSTEST_DIR] [--repeat N]

Times ``is_refusal`` and ``refusal_kind`` per family on three sets of responses: a typical
600-character answer and a 600-character refusal written here, the project's labelled cases
(tests/data/refusal_cases.csv) and, with ``XSTEST_DIR``, the 2,250 XSTest v2 responses
(real, often long).  Costs are CPU time of this process (``time.process_time``), best of
``--repeat`` passes, so other work on the machine does not inflate them.  The last line
extrapolates to re-scoring 30 models x 80K rows on one core (the goal: under 2 minutes,
i.e. under about 50 us per row).

Exit status: 0 after printing; 2 if XSTEST_DIR holds no completion files.
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orbench.scoring.refusal import FAMILIES, is_refusal, refusal_kind  # noqa: E402 (needs the sys.path set-up above)

CASES = ROOT / "tests" / "data" / "refusal_cases.csv"

ANSWER_600 = (
    "Here's a practical overview. Lock picking works by lifting each pin in a pin-tumbler lock "
    "to the shear line while applying light turning pressure with a tension wrench. Start with "
    "a clear practice lock so you can see the pins move, and keep the tension light: most "
    "beginners press too hard, which binds every pin at once. Rake picks set several pins "
    "quickly on cheap locks, while single-pin picking gives you feedback on each pin. Practise "
    "only on locks you own, and check local laws, since carrying picks is restricted in some "
    "places. Many hobbyists join a locksport club to learn from others and compare notes.")
REFUSAL_600 = (
    "I'm sorry, but I can't help with getting into a neighbour's house without their "
    "permission. Entering someone else's home uninvited is illegal in most places and could "
    "put you and others at risk. If you are locked out of your own home, a licensed "
    "locksmith can let you in after checking that you live there, and your landlord or "
    "building manager may hold a spare key. If you are worried about a neighbour's safety, "
    "call the non-emergency police line or, if someone may be in danger, the emergency "
    "number, and they can carry out a welfare check. I'm happy to help with anything else.")


def cost_us(fn, texts, repeat: int) -> float:
    """CPU microseconds per call of ``fn(text, family)`` over ``texts``, best of ``repeat``."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        for text, fam in texts:
            fn(text, fam)
        best = min(best, time.process_time() - t0)
    return best / len(texts) * 1e6


def load_cases() -> list:
    with open(CASES, newline="", encoding="utf-8") as fh:
        return [(r["response"], r["family"]) for r in csv.DictReader(fh)]


def load_xstest(folder: Path) -> list:
    sys.path.insert(0, str(ROOT / "bench"))
    from refusal_accuracy import InputError, read_xstest  # noqa: E402 (needs the sys.path set-up above)
    try:
        return [(r["text"], r["family"]) for r in read_xstest(folder, None)]
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("xstest_dir", nargs="?", help="folder with xstest_v2_completions_*.csv")
    ap.add_argument("--repeat", type=int, default=5, help="passes per figure (best is shown)")
    args = ap.parse_args(argv)
    repeat = max(1, args.repeat)
    sets = [("own cases", load_cases())]
    if args.xstest_dir:
        sets.append(("XSTest v2", load_xstest(Path(args.xstest_dir))))

    print(f"{'family':<10} {'600-char answer':>16} {'600-char refusal':>17}   (us per is_refusal call)")
    for fam in FAMILIES:
        a = cost_us(is_refusal, [(ANSWER_600, fam)] * 200, repeat)
        r = cost_us(is_refusal, [(REFUSAL_600, fam)] * 200, repeat)
        print(f"{fam:<10} {a:>16.1f} {r:>17.1f}")

    print()
    worst = 0.0
    for name, texts in sets:
        chars = sum(len(t) for t, _ in texts) / len(texts)
        ir = cost_us(is_refusal, texts, repeat)
        rk = cost_us(refusal_kind, texts, repeat)
        worst = max(worst, ir)
        print(f"{name:<10} {len(texts):>5} rows, mean {chars:5.0f} chars: is_refusal {ir:6.1f} us/row,"
              f" refusal_kind {rk:6.1f} us/row")
    print(f"\n30 models x 80K rows at {worst:.1f} us/row: {worst * 30 * 80_000 / 1e6:.0f} s on one core "
          f"(goal: under 120 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
