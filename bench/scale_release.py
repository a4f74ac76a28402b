"""Scale of the release builder with near-duplicate removal, on generated template-like prompts.

Writes N generated moderated rows (prompt, category, is_toxic, error) to a temporary CSV, runs
``orbench.analysis.release.build.build`` on it with ``--near_dup_threshold`` in a fresh child process and
prints the wall time of the build, the time of the near-duplicate step alone, and the child's peak
resident memory (``resource.getrusage``; with ``--trace`` also the peak traced by ``tracemalloc``
in a second build). Then it measures the recall and precision of the fast near-duplicate search
against the all-pairs reference on a few thousand prompts of each kind below and on the bundled
published prompts with edited copies. Figures, not pass/fail.

The ``mixed`` prompts imitate rewriter output at scale: sentence templates with slots filled from
word lists (many templates with few slots, a few long ones, a few whose words are all common),
fixed sentences that differ only by a number, plus edited copies of earlier rows (one word
swapped, dropped, added or moved), exact and case/punctuation copies, and free sentences. The
``numbered`` prompts are five fixed sentences with a number each: the worst case of prefix
filtering alone. Deterministic per seed.

    python bench/scale_release.py                       # 2K, 16K and 80K rows, threshold 0.9
    python bench/scale_release.py --rows 2000 16000 --threshold 0.8 --kind numbered --recall_rows 0

``bench_release(n_rows)`` returns the figures of one size as a dict (for a combined bench).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SYLLABLES = ["ka", "lo", "mi", "ren", "tas", "vo", "ur", "den", "sil", "pra", "nu", "qe", "bor", "fi",
             "gal", "hex", "zu", "tri", "mon", "el"]
FUNCTION_WORDS = ["how", "can", "i", "the", "a", "to", "of", "in", "for", "my", "without", "someone", "what",
                  "are", "some", "ways", "do", "you", "is", "it", "about", "with", "on", "that", "could",
                  "would", "explain", "describe", "steps", "best", "an", "their", "when", "why", "should"]
CATEGORIES = ["deception", "harassment", "harmful", "hate", "illegal", "privacy", "self-harm", "sexual",
              "unethical", "violence"]


def pseudo_word(k: int) -> str:
    """A pronounceable made-up word, distinct for each k < 20**3."""
    a, b, c = k % 20, (k // 20) % 20, (k // 400) % 20
    return SYLLABLES[c] + SYLLABLES[b] + SYLLABLES[a]


def edited(text: str, rng: random.Random, words: list[str]) -> str:
    """``text`` with one word replaced, dropped, added (from ``words``) or moved."""
    tokens = text.split() or [rng.choice(words)]
    op, k = rng.randrange(4), rng.randrange(len(tokens))
    if op == 0:
        tokens[k] = rng.choice(words)
    elif op == 1 and len(tokens) > 1:
        del tokens[k]
    elif op == 2:
        tokens.insert(k, rng.choice(words))
    else:
        tokens.insert(rng.randrange(len(tokens)), tokens.pop(k))
    return " ".join(tokens)


def published_prompts(seed: int = 0) -> list[str]:
    """The bundled OR-Bench-Hard-1K and Toxic prompts, each followed later by an edited copy (real text)."""
    import pandas as pd

    rng = random.Random(seed)
    data = ROOT / "orbench" / "data"
    originals = [p for name in ("or-bench-hard-1k.csv", "or-bench-toxic.csv")
                 for p in pd.read_csv(data / name, keep_default_na=False)["prompt"]]
    vocabulary = sorted({w for p in originals for w in p.split()})
    rows = list(originals)
    for p in originals:
        rows.insert(rng.randrange(rows.index(p) + 1, len(rows) + 1), edited(p, rng, vocabulary))
    return rows


def template_prompts(n_rows: int, seed: int = 0, kind: str = "mixed") -> list[str]:
    """``n_rows`` template-like prompts with known kinds of near and exact duplicates (deterministic).

    ``kind="numbered"``: only five fixed sentences, each row ending in its own number, so every
    prompt shares all but one word with a fifth of the others and none is a near-duplicate at 0.9:
    the input on which prefix filtering alone compares every pair.
    """
    if kind == "numbered":
        rng = random.Random(seed)
        sentences = [" ".join(rng.choice(FUNCTION_WORDS + [pseudo_word(k) for k in range(400)])
                              for _ in range(rng.randint(10, 14))) for _ in range(5)]
        return [f"{rng.choice(sentences).capitalize()} case {number}?" for number in range(n_rows)]
    rng = random.Random(seed)
    template_words = [pseudo_word(k) for k in range(400)]
    fillers = [pseudo_word(k) for k in range(400, 4400)]

    def template(length: tuple[int, int], slots: tuple[int, int], choices: tuple[int, int]) -> tuple:
        words = [rng.choice(FUNCTION_WORDS) if rng.random() < 0.5 else rng.choice(template_words)
                 for _ in range(rng.randint(*length))]
        positions = rng.sample(range(len(words)), rng.randint(*slots))
        return words, {pos: rng.sample(fillers, rng.randint(*choices)) for pos in positions}

    # many templates with few slots; a few long ones whose prompts share most words; a few whose
    # slots draw on short word lists, so that every word of their prompts is a common one; fixed
    # sentences that differ only by a number at the end (below the threshold from each other)
    families = [[template((8, 24), (2, 4), (8, 150)) for _ in range(300)],
                [template((16, 28), (4, 6), (20, 60)) for _ in range(6)],
                [template((10, 16), (3, 5), (10, 30)) for _ in range(5)],
                [template((10, 20), (0, 0), (0, 0)) for _ in range(20)]]
    rows: list[str] = []
    for number in range(n_rows):
        r = rng.random()
        if r < 0.70 or not rows:
            family = rng.choices(range(4), weights=(0.3, 0.2, 0.25, 0.25))[0]
            words, slots = rng.choice(families[family])
            text = " ".join(rng.choice(slots[p]) if p in slots else w for p, w in enumerate(words))
            if family == 3:
                text += f" case {number}"
        elif r < 0.85:  # an edit of an earlier row: most stay near-duplicates, some fall below
            text = edited(rng.choice(rows).rstrip("?").lower(), rng, fillers)
        elif r < 0.90:
            rows.append(rng.choice(rows))
            continue
        elif r < 0.95:
            rows.append(rng.choice(rows).upper().rstrip("?") + "!")
            continue
        else:
            text = " ".join(rng.choice(FUNCTION_WORDS + fillers) for _ in range(rng.randint(5, 25)))
        rows.append(text[:1].upper() + text[1:] + "?")
    return rows


def write_moderated(prompts: list[str], path: Path, seed: int = 0) -> None:
    """A moderated-file stand-in: every row decided, a fifth of them toxic."""
    import pandas as pd

    rng = random.Random(seed + 1)
    pd.DataFrame({"prompt": prompts, "category": [rng.choice(CATEGORIES) for _ in prompts],
                  "is_toxic": ["True" if rng.random() < 0.2 else "False" for _ in prompts],
                  "error": ""}).to_csv(path, index=False)


def _child(n_rows: int, threshold: float, seed: int, trace: bool, kind: str) -> dict:
    """Runs inside the fresh child process: build once (timed), optionally once more under tracemalloc."""
    import tracemalloc

    from orbench.analysis.release import build as build_release
    from orbench.analysis.release.near_dup import near_duplicates
    from orbench.scoring.parsing import normalise_for_dedup

    prompts = template_prompts(n_rows, seed, kind)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "bench_moderated.csv"
        write_moderated(prompts, source, seed)
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.perf_counter()
        manifest = build_release.build([str(source)], Path(tmp) / "release", near_dup_threshold=threshold)
        seconds = time.perf_counter() - started
        rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        traced = None
        if trace:
            tracemalloc.start()
            build_release.build([str(source)], Path(tmp) / "release2", near_dup_threshold=threshold)
            traced = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
    # the near-duplicate step alone, on the prompts left after exact and normalised dedup
    seen, unique = set(), []
    for p in prompts:
        key = normalise_for_dedup(p)
        if key not in seen:
            seen.add(key)
            unique.append(p)
    started = time.perf_counter()
    near_duplicates(unique, threshold)
    near_seconds = time.perf_counter() - started
    counts = manifest["counts"]
    return {"rows": n_rows, "kind": kind, "threshold": threshold, "seconds": round(seconds, 2),
            "near_dup_seconds": round(near_seconds, 2), "near_dup_input": len(unique),
            "peak_rss_mb": round(rss_peak / 1024, 1), "rss_before_build_mb": round(rss_before / 1024, 1),
            "tracemalloc_peak_mb": None if traced is None else round(traced, 1),
            "exact_duplicates": counts["exact_duplicates"], "normalised_duplicates": counts["normalised_duplicates"],
            "near_duplicates": counts["near_duplicates"],
            "kept": sum(s["rows"] for s in manifest["subsets"].values())}


def bench_release(n_rows: int, threshold: float = 0.9, seed: int = 0, trace: bool = False,
                  kind: str = "mixed") -> dict:
    """Build a release of ``n_rows`` generated prompts with near-dup removal in a fresh process; its figures.

    ``kind`` is ``template_prompts``'s. Keys: rows, kind, threshold, seconds (the whole build),
    near_dup_seconds (the near-duplicate step alone), near_dup_input, peak_rss_mb (the child's
    peak resident memory), rss_before_build_mb, tracemalloc_peak_mb (None unless ``trace``),
    exact/normalised/near duplicate counts, kept rows.
    """
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from bench.scale_release import _child; "
            "print(json.dumps(_child(int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == '1', "
            "sys.argv[6])))")
    proc = subprocess.run([sys.executable, "-c", code, str(ROOT), str(n_rows), str(threshold), str(seed),
                           "1" if trace else "0", kind], capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"bench child failed: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure_recall(n_rows: int = 3000, thresholds: tuple[float, ...] = (0.5, 0.7, 0.8, 0.9, 1.0),
                   seed: int = 1) -> list[dict]:
    """Fast near-duplicate search against the all-pairs reference, on three test sets.

    The sets: ``n_rows`` mixed and ``n_rows`` numbered generated prompts, and the bundled published
    prompts with edited copies. A pair is (dropped prompt, the earliest kept prompt it duplicates).
    Recall = reference pairs the fast path found / reference pairs; precision = its pairs the
    reference has / its pairs.
    """
    from orbench.analysis.release.near_dup import near_duplicate_of, near_duplicate_of_reference

    sets = {"mixed": template_prompts(n_rows, seed), "numbered": template_prompts(n_rows, seed, "numbered"),
            "published": published_prompts(seed)}
    results = []
    for name, prompts in sets.items():
        for t in thresholds:
            started = time.perf_counter()
            fast = near_duplicate_of(prompts, t)
            fast_s = time.perf_counter() - started
            started = time.perf_counter()
            ref = near_duplicate_of_reference(prompts, t)
            ref_s = time.perf_counter() - started
            fast_pairs = {(i, j) for i, j in enumerate(fast) if j is not None}
            ref_pairs = {(i, j) for i, j in enumerate(ref) if j is not None}
            both = len(fast_pairs & ref_pairs)
            results.append({"set": name, "rows": len(prompts), "threshold": t, "reference_pairs": len(ref_pairs),
                            "fast_pairs": len(fast_pairs),
                            "recall": both / len(ref_pairs) if ref_pairs else 1.0,
                            "precision": both / len(fast_pairs) if fast_pairs else 1.0,
                            "fast_seconds": round(fast_s, 3), "reference_seconds": round(ref_s, 2)})
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[2000, 16000, 80000])
    parser.add_argument("--threshold", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kind", choices=("mixed", "numbered"), default="mixed",
                        help="generated prompts: mixed templates (default) or numbered copies of five sentences")
    parser.add_argument("--trace", action="store_true", help="also build once under tracemalloc (slower)")
    parser.add_argument("--recall_rows", type=int, default=3000, help="0 skips the recall check")
    args = parser.parse_args(argv)
    print(f"release builder, near_dup_threshold {args.threshold}, template-like prompts ({args.kind})")
    print(f"{'rows':>7} {'build s':>8} {'near-dup s':>10} {'peak RSS MB':>11} {'traced MB':>9} "
          f"{'exact':>6} {'norm':>6} {'near':>6} {'kept':>7}")
    for n in args.rows:
        r = bench_release(n, args.threshold, args.seed, args.trace, args.kind)
        traced = "-" if r["tracemalloc_peak_mb"] is None else f"{r['tracemalloc_peak_mb']:.1f}"
        print(f"{r['rows']:>7} {r['seconds']:>8.2f} {r['near_dup_seconds']:>10.2f} {r['peak_rss_mb']:>11.1f} "
              f"{traced:>9} {r['exact_duplicates']:>6} {r['normalised_duplicates']:>6} {r['near_duplicates']:>6} "
              f"{r['kept']:>7}", flush=True)
    if args.recall_rows:
        print("\nfast near-duplicate search vs the all-pairs reference (pair = dropped prompt, earliest kept match)")
        print(f"{'set':>9} {'rows':>5} {'threshold':>9} {'ref pairs':>9} {'fast pairs':>10} {'recall':>7} "
              f"{'precision':>9} {'fast s':>7} {'ref s':>7}")
        for r in measure_recall(args.recall_rows):
            print(f"{r['set']:>9} {r['rows']:>5} {r['threshold']:>9.3g} {r['reference_pairs']:>9} "
                  f"{r['fast_pairs']:>10} {r['recall']:>7.4f} {r['precision']:>9.4f} {r['fast_seconds']:>7.3f} "
                  f"{r['reference_seconds']:>7.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
