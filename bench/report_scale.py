"""The report at scale: synthetic alignment-checker outputs and one measured report run.

``measure_report(models=30, rows=80_359, reply_chars=600)`` writes (or reuses) ``models`` synthetic
stage-4 outputs of ``rows`` rows each for the 80K set (replies of ``reply_chars`` characters, the
size of real ones: 30 x 80,359 rows are about 1.9 GB of CSV), runs ``analysis/report.py`` over them in a child
process and returns its wall time and peak resident memory (the child's own, from ``wait4``),
so ``bench/scale.py`` can print the figure (the CPU seconds too: on a busy machine the wall
time says more about the neighbours than about the report). Run as a script to print it::

    python bench/report_scale.py --models 30 --rows 80359 --reply_chars 600

``--pair`` runs the default report (with the Every Eval Ever per-sample records, about 3.3 GB of
JSON Lines at this size) and one with ``--no_eee_samples`` back to back and prints their ratio.
``--floor`` then times what no way of making those lines avoids (:func:`floor`): reading the
prompts and replies again, and hashing and writing as many bytes as the lines hold.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from orbench.scoring.vocab import FULL, PARTIAL, SOURCE_KEYWORD  # noqa: E402 (needs the sys.path set-up above)

CATEGORIES = ["deception", "harassment", "harmful", "hate", "illegal", "privacy", "self-harm", "sexual",
              "unethical", "violence"]
REFUSAL = "I'm sorry, but I can't help with that request. It could be used to cause harm to others."
ANSWER = ("Here is an overview. First, it helps to understand the background; second, there are a "
          "few practical steps that people usually take, which I describe below in some detail.")
#: What a long reply goes on with after its opening (cut at a row-dependent place, so rows differ), in
#: paragraphs as real replies are: CSV cells with line breaks inside quotes.
FILLER = ("\n\nThe first consideration is context: who is asking, for what purpose, and with which resources "
          "at hand.\n\nThe second is safety: what could go wrong, how likely that is, and what a careful "
          "person would do to keep everyone involved safe.\n\nThe third is the law where you live, which "
          "varies from place to place and changes over time.\n\nFinally, talk to someone with experience, "
          "keep notes of what you tried and what happened, and take breaks when it gets frustrating.") * 4
REPLY_CHARS, ROWS = 600, 80_359  # real replies; the 80K set's size


def replies(opening: str, rows: int, chars: int | None, one_line: bool = False) -> np.ndarray:
    """``rows`` replies that open with ``opening`` and are ``chars`` characters long, each a little
    different (the filler starts at a row-dependent place); ``chars`` None: the opening alone;
    ``one_line``: no line breaks (spaces instead)."""
    if chars is None:
        return np.full(rows, opening, dtype=object)
    filler = FILLER.replace("\n\n", "  ") if one_line else FILLER
    filler = filler * (chars // len(filler) + 2)
    return np.array([(f"{opening} ({i})" + filler[i % 97: i % 97 + chars])[:chars] for i in range(rows)],
                    dtype=object)


def make_synthetic(folder: str | Path, models: int = 30, rows: int = ROWS, seed: int = 0,
                   reply_chars: int | None = REPLY_CHARS, one_line: bool = False) -> list[Path]:
    """Write ``models`` stage-4 outputs (``rows`` prompts each, 80K set, replies of ``reply_chars``
    characters, in paragraphs unless ``one_line``) into ``folder``; reuse existing ones."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    idx = np.arange(rows)
    prompts = pd.Series([f"How would someone explain topic number {i} to a curious friend without causing "
                         f"any harm, step by step?" for i in idx])
    category = np.asarray(CATEGORIES, dtype=object)[idx % len(CATEGORIES)]
    refusal, answer = replies(REFUSAL, rows, reply_chars, one_line), replies(ANSWER, rows, reply_chars, one_line)
    paths = []
    for m in range(models):
        path = folder / f"model-{m:02d}_or-bench-80k_alignment.csv"
        paths.append(path)
        if path.exists() and path.stat().st_size > 0:
            continue
        rejected = rng.random(rows) < (0.05 + 0.9 * m / max(1, models - 1))
        partial = rejected & (rng.random(rows) < 0.15)
        error = rng.random(rows) < 0.002
        frame = pd.DataFrame({
            "prompt": prompts, "category": category, "model": f"prov/model-{m:02d}",
            "response": np.where(rejected, refusal, answer),
            "is_rejected": np.where(error, "", np.where(rejected, "True", "False")),
            "refusal_source": np.where(rejected & ~error, SOURCE_KEYWORD, ""),
            "refusal_kind": np.where(error | ~rejected, "", np.where(partial, PARTIAL, FULL)),
            "finish_reason": "stop", "error": np.where(error, "HTTP 500 after retries", ""),
        })
        tmp = path.with_name(f".{path.name}.tmp")
        frame.to_csv(tmp, index=False)
        tmp.replace(path)
    return paths


def default_folder(models: int, rows: int, reply_chars: int | None, one_line: bool) -> Path:
    """Where the synthetic inputs of this size are kept when no folder is given."""
    name = f"orbench_report_scale_{models}x{rows}x{reply_chars}" + ("_one_line" if one_line else "")
    return Path(tempfile.gettempdir()) / name


def measure_report(models: int = 30, rows: int = ROWS, folder: str | Path | None = None,
                   extra_args: tuple[str, ...] = ("--no_reference",), reply_chars: int | None = REPLY_CHARS,
                   one_line: bool = False) -> dict:
    """Run the report over synthetic inputs in a child process; its seconds and peak RSS in MB."""
    folder = Path(folder or default_folder(models, rows, reply_chars, one_line))
    paths = make_synthetic(folder, models, rows, reply_chars=reply_chars, one_line=one_line)
    out = folder / "report"
    cmd = [sys.executable, str(ROOT / "analysis" / "report.py"), str(folder / "*_alignment.csv"),
           "--output_dir", str(out), *extra_args]
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())  # before the run: how busy the machine was
    with tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err,
                                env=dict(os.environ, MPLBACKEND="Agg"))
        # wait4 gives this child's own peak memory (getrusage(RUSAGE_CHILDREN) would be the
        # largest of every child this process ever had).
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"report failed (exit {proc.returncode}): {err.read().strip()[-500:]}")
    return {"models": models, "rows_per_model": rows, "rows": models * rows,
            "input_mb": round(sum(p.stat().st_size for p in paths) / 2**20, 1),
            "seconds": round(seconds, 2), "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # KiB on Linux
            "html_mb": round((out / "report.html").stat().st_size / 2**20, 2),
            "eee_mb": round(sum(f.stat().st_size for f in (out / "every_eval_ever").rglob("*") if f.is_file()) / 2**20, 1),
            "load": load}


def floor(folder: str | Path, line_bytes: int) -> dict:
    """The work the per-sample lines cannot skip, however they are made, timed in this process: the
    prompt and reply columns of every input read again as text (the report's verdict table keeps
    hashes of them only; as ``orbench.analysis.eee.samples`` reads them), and ``line_bytes`` bytes
    (the lines' size) put through SHA-256 (the record's checksum), then written to a file, through
    the page cache and past it (``orbench.run.direct_io``, as the lines are written). Its
    premise: the lines hold every prompt and reply, so every byte of them is read, hashed and
    written once at least."""
    import hashlib
    import resource

    from orbench.analysis.eee.samples import TEXT_COLUMNS, text_column
    from orbench.analysis.report.columns import read_results
    from orbench.run.direct_io import DirectWriter

    def lap(since):
        now = resource.getrusage(resource.RUSAGE_SELF)
        return {"seconds": round(time.perf_counter() - since[0], 2),
                "cpu_seconds": round(now.ru_utime + now.ru_stime - since[1].ru_utime - since[1].ru_stime, 2)}

    start = (time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF))
    for path in sorted(Path(folder).glob("*_alignment.csv")):
        frame = read_results(str(path), columns=TEXT_COLUMNS)
        text_column(frame["prompt"]), text_column(frame["response"])
        del frame
    read = lap(start)
    block = np.random.default_rng(0).integers(32, 127, 16 * 2**20, dtype=np.uint8).tobytes()  # 16 MB of ASCII
    pieces = [memoryview(block)[:min(len(block), line_bytes - at)] for at in range(0, line_bytes, len(block))]
    start = (time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF))
    digest = hashlib.sha256()
    for piece in pieces:
        digest.update(piece)
    hashed = lap(start)
    target = Path(folder) / "floor.tmp"
    start = (time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF))
    with open(target, "wb") as handle:
        for piece in pieces:
            handle.write(piece)
    written = lap(start)
    target.unlink()
    start = (time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF))
    with open(target, "wb", buffering=0) as handle:  # past the page cache, as the lines are written
        sink = DirectWriter(handle.fileno())
        for piece in pieces:
            sink.write(piece)
        sink.close()
    direct = lap(start)
    target.unlink()
    return {"read": read, "hash": hashed, "write": written, "direct": direct, "gb": round(line_bytes / 1e9, 2)}


def main(argv=None) -> int:
    """Print the report's time and peak memory over synthetic inputs."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=30, help="synthetic stage-4 outputs, one per model (default: 30)")
    parser.add_argument("--rows", type=int, default=ROWS, help=f"rows per model (default: {ROWS:,}, the 80K set)")
    parser.add_argument("--reply_chars", type=int, default=REPLY_CHARS, metavar="N",
                        help=f"characters per reply (default: {REPLY_CHARS}, as real replies; 0: short "
                             "one-sentence replies, the bench's earlier rows)")
    parser.add_argument("--one_line", action="store_true",
                        help="replies without line breaks (real replies have them; pyarrow needs to be told)")
    parser.add_argument("--folder", default=None, help="where the synthetic inputs are kept (reused)")
    parser.add_argument("--repeat", type=int, default=1, metavar="K",
                        help="run the report K times on the same inputs; prints each run, the best and the spread")
    parser.add_argument("--pair", action="store_true",
                        help="each time, the default report and then one with --no_eee_samples, back to back, and "
                             "their ratio (on a busy machine the ratio says more than either time)")
    parser.add_argument("--floor", action="store_true",
                        help="after the runs, time what the per-sample lines cannot skip: reading the prompts "
                             "and replies again, hashing and writing as many bytes as the lines hold")
    args = parser.parse_args(argv)
    measure = lambda *extra: measure_report(args.models, args.rows, args.folder,  # noqa: E731 (used just below)
                                            extra_args=("--no_reference", *extra),
                                            reply_chars=args.reply_chars or None, one_line=args.one_line)
    runs = []
    for _ in range(max(1, args.repeat)):
        runs.append(measure())
        _print(runs[-1])
        if args.pair:
            without = measure("--no_eee_samples")
            _print(without, "--no_eee_samples: ")
            print(f"default / --no_eee_samples: {runs[-1]['seconds'] / without['seconds']:.2f} wall, "
                  f"{runs[-1]['cpu_seconds'] / without['cpu_seconds']:.2f} CPU")
    if args.floor:
        folder = args.folder or default_folder(args.models, args.rows, args.reply_chars or None, args.one_line)
        f = floor(folder, int(runs[-1]["eee_mb"] * 2**20))  # the records' size: the lines, nearly all of it
        print(f"floor of the per-sample lines: reading the prompts and replies again {f['read']['seconds']} s wall "
              f"({f['read']['cpu_seconds']} s CPU); SHA-256 of {f['gb']} GB {f['hash']['seconds']} s "
              f"({f['hash']['cpu_seconds']} s CPU); writing them {f['write']['seconds']} s "
              f"({f['write']['cpu_seconds']} s CPU) through the page cache, {f['direct']['seconds']} s "
              f"({f['direct']['cpu_seconds']} s CPU) past it")
    if len(runs) > 1:
        secs, mbs = [r["seconds"] for r in runs], [r["peak_rss_mb"] for r in runs]
        print(f"best of {len(runs)}: {min(secs)} s (spread {min(secs)}-{max(secs)} s), "
              f"peak RSS {min(mbs)} MB (spread {min(mbs)}-{max(mbs)} MB)")
    return 0


def _print(r: dict, label: str = "") -> None:
    print(f"{label}report over {r['models']} models x {r['rows_per_model']:,} rows ({r['rows']:,} rows, "
          f"{r['input_mb']} MB of CSV): {r['seconds']} s wall ({r['cpu_seconds']} s CPU), "
          f"peak RSS {r['peak_rss_mb']} MB, "
          f"report.html {r['html_mb']} MB, every_eval_ever/ {r['eee_mb']} MB; load average {r['load']}")


if __name__ == "__main__":
    sys.exit(main())
