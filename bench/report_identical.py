"""Do two versions of the report give the same figures? Runs ``analysis/report.py`` of a base commit
and of this checkout over the same inputs and compares every figure they write.

The inputs: a varied synthetic run written here (judge files carrying keyword copies for four
models on the bundled Hard-1K and Toxic prompts, one complete and ranked; an alignment file for
the same model; XSTest halves; repeated samples with partial refusals; cut-off replies; stage-4
meta files with differing settings) run with two ``--compare`` pairs and the published rows, and,
with ``--scale_folder``, the synthetic stage-4 outputs of ``bench/report_scale.py``.

Compared: every CSV the report writes (cell by cell, as text) and ``report.json`` (every value but
the notes' and warnings' wording, which is listed when it differs but is not a figure); with
``--bytes``, every file written byte for byte too (the PNG and PDF figures, report.html,
leaderboard.md, the Every Eval Ever records), each run's time stamps set aside. Exit 0 when
every figure (and with ``--bytes`` every file) is the same, 1 otherwise::

    python bench/report_identical.py --base a4be10a
    python bench/report_identical.py --base a4be10a --bytes
    python bench/report_identical.py --base a4be10a --scale_folder /tmp/orbench_report_scale_30x80359x600
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from orbench.benchmark.sets import HARD_1K, TOXIC, XSTEST_SAFE, XSTEST_UNSAFE, resolve_set  # noqa: E402 (needs the sys.path set-up above)

JUDGE_CLASSES = ("direct_answer", "direct_refusal", "indirect_refusal")
WORDING = ("notes", "warnings")  # report.json keys whose text is prose, not figures


def _prompts(name: str) -> pd.DataFrame:
    return pd.read_csv(resolve_set(name), dtype=str, keep_default_na=False)[["prompt", "category"]]


def _meta(path: Path, model: str, temperature: float, system: str | None) -> None:
    meta = {"stage": "check_alignment", "settings": {"model": model, "temperature": temperature, "max_tokens": 512,
                                                     "system": system},
            "models": [{"typed": model, "resolved": model}], "input": {"path": str(path.with_suffix(".in.csv"))}}
    Path(f"{path}.meta.json").write_text(json.dumps(meta), encoding="utf-8")


def _judge_file(frame: pd.DataFrame, model: str, rate: float, rng, path: Path) -> None:
    n = len(frame)
    refused = rng.random(n) < rate
    cls = np.where(refused, np.where(rng.random(n) < 0.5, "direct_refusal", "indirect_refusal"), "direct_answer")
    unparsed = rng.random(n) < 0.02
    error = rng.random(n) < 0.01
    cls = np.where(unparsed, "unparsed", np.where(error, "skipped_error", cls))
    keyword = np.where(rng.random(n) < 0.9, refused, ~refused)
    frame.assign(model=model, response=[f"reply {i} of {model}" for i in range(n)],
                 finish_reason=np.where(rng.random(n) < 0.03, "length", "stop"),
                 answer_category=cls, answer_type_response="judge text", judge_model="openai/judge-1",
                 is_rejected=np.where(unparsed | error, "", np.where(refused, "True", "False")),
                 keyword_is_rejected=np.where(error, "", np.where(keyword, "True", "False")),
                 error=np.where(error, "HTTP 500", "")).to_csv(path, index=False)


def _alignment_file(frame: pd.DataFrame, model: str, rate: float, rng, path: Path, samples: int = 1) -> None:
    frame = pd.concat([frame.assign(sample=s) for s in range(samples)], ignore_index=True) if samples > 1 else frame
    n = len(frame)
    refused = rng.random(n) < rate
    partial = refused & (rng.random(n) < 0.3)
    error = rng.random(n) < 0.01
    frame.assign(model=model, response=[f"answer {i}" for i in range(n)],
                 is_rejected=np.where(error, "", np.where(refused, "True", "False")),
                 refusal_kind=np.where(error | ~refused, "", np.where(partial, "partial", "full")),
                 finish_reason=np.where(rng.random(n) < 0.08, "length", "stop"),
                 error=np.where(error, "timeout", "")).to_csv(path, index=False)


def write_varied(folder: Path, seed: int = 0) -> list[str]:
    """The varied inputs (module docstring) in ``folder``; the report's arguments."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    hard, toxic = _prompts(HARD_1K), _prompts(TOXIC)
    for i, (model, h_rate, t_rate) in enumerate([("prov/m1", 0.1, 0.8), ("prov/m2", 0.3, 0.9),
                                                 ("prov/m3", 0.5, 0.95), ("prov/m4", 0.2, 0.7)]):
        short = model.split("/")[1]
        sub = hard if i == 0 else hard.sample(frac=0.4, random_state=i)
        _judge_file(sub.copy(), model, h_rate, rng, folder / f"{short}_or-bench-hard-1k_judged.csv")
        _judge_file(toxic.copy(), model, t_rate, rng, folder / f"{short}_or-bench-toxic_judged.csv")
    aligned = folder / "m1_hard_alignment.csv"
    _alignment_file(hard.copy(), "prov/m1", 0.12, rng, aligned)
    _meta(aligned, "prov/m1", 0.0, None)
    for model, rate in (("prov/m1", 0.1), ("prov/m2", 0.4)):
        short = model.split("/")[1]
        for name, scale in ((XSTEST_SAFE, 1.0), (XSTEST_UNSAFE, 2.0)):
            path = folder / f"{short}_{name}_alignment.csv"
            _alignment_file(_prompts(name), model, min(0.95, rate * scale), rng, path)
            _meta(path, model, 0.0 if model == "prov/m1" else 0.7, None if model == "prov/m1" else "Be careful.")
    sampled = folder / "m5_or-bench-hard-1k_alignment.csv"
    _alignment_file(hard.sample(n=200, random_state=5), "prov/m5", 0.3, rng, sampled, samples=3)
    _meta(sampled, "prov/m5", 0.7, None)
    return [str(folder / "*_judged.csv"), str(aligned), str(folder / "*xstest*_alignment.csv"), str(sampled),
            "--compare", "prov/m1", "prov/m2", "--compare", "prov/m3", "prov/m4"]


def export_commit(commit: str, into: Path) -> Path:
    """The tree of ``commit`` unpacked into ``into`` (``git archive``)."""
    data = subprocess.run(["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def run_report(tree: Path, args: list[str], out: Path, cache: Path) -> None:
    """``analysis/report.py`` of ``tree`` over ``args`` into ``out`` (its own code, not the installed one)."""
    env = dict(os.environ, MPLBACKEND="Agg", ORBENCH_CACHE_DIR=str(cache), PYTHONPATH=str(tree))
    proc = subprocess.run([sys.executable, str(tree / "analysis" / "report.py"), *args, "--output_dir", str(out)],
                          capture_output=True, text=True, env=env, cwd=tree)
    if proc.returncode != 0:
        raise SystemExit(f"the report of {tree} failed (exit {proc.returncode}): {proc.stderr.strip()[-800:]}")


def _figures(value, path=""):
    """report.json flattened to (path, value) pairs, prose left out."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not path and k in WORDING:
                continue
            yield from _figures(v, f"{path}.{k}" if path else k)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _figures(v, f"{path}[{i}]")
    else:
        yield path, value


def compare_outputs(base: Path, head: Path) -> list[str]:
    """What differs between two report folders: CSV cells, report.json figures (prose listed apart)."""
    problems = []
    names = sorted({p.name for p in base.glob("*.csv")} | {p.name for p in head.glob("*.csv")})
    for name in names:
        if not (base / name).exists() or not (head / name).exists():
            problems.append(f"{name}: written by one version only")
            continue
        a = pd.read_csv(base / name, dtype=str, keep_default_na=False)
        b = pd.read_csv(head / name, dtype=str, keep_default_na=False)
        if list(a.columns) != list(b.columns) or a.shape != b.shape:
            problems.append(f"{name}: columns or shape differ ({a.shape} vs {b.shape})")
        elif not a.equals(b):
            diff = (a != b).stack()
            where = diff[diff].index[:5].tolist()
            problems.append(f"{name}: {int(diff.sum())} cells differ, e.g. "
                            + ", ".join(f"row {r} {c}: {a.at[r, c]!r} vs {b.at[r, c]!r}" for r, c in where))
    ja, jb = (json.loads((d / "report.json").read_text(encoding="utf-8")) for d in (base, head))
    fa, fb = dict(_figures(ja)), dict(_figures(jb))
    for key in sorted(set(fa) | set(fb)):
        if fa.get(key, "<absent>") != fb.get(key, "<absent>"):
            problems.append(f"report.json {key}: {fa.get(key, '<absent>')!r} vs {fb.get(key, '<absent>')!r}")
    for key in WORDING:
        if ja.get(key) != jb.get(key):
            print(f"  (wording) report.json {key} differ:\n    base: {ja.get(key)}\n    head: {jb.get(key)}")
    return problems


def _stamps_out(path: Path, data: bytes) -> bytes:
    """A file's bytes without what differs between two runs of one version: the Every Eval Ever
    records' retrieval time (and the checksums over lines that hold it), the page's 'Generated' minute."""
    if "every_eval_ever" in path.parts:
        data = re.sub(rb'"checksum": "[0-9a-f]{64}"', b"", re.sub(rb"\d{10}\.\d+", b"T", data))
    if path.name == "report.html":
        data = re.sub(rb"Generated \d{4}-\d\d-\d\d \d\d:\d\d UTC", b"", data)
    return data


def compare_bytes(base: Path, head: Path) -> list[str]:
    """Every file the two versions wrote that differs byte for byte (run stamps set aside), or is
    written by one only: the figures' PNG and PDF, the page, the Markdown and the records too."""
    names = {p.relative_to(base) for p in base.rglob("*") if p.is_file()}
    names |= {p.relative_to(head) for p in head.rglob("*") if p.is_file()}
    out = []
    for rel in sorted(names):
        if not (base / rel).is_file() or not (head / rel).is_file():
            out.append(f"{rel}: written by one version only")
        elif _stamps_out(rel, (base / rel).read_bytes()) != _stamps_out(rel, (head / rel).read_bytes()):
            out.append(f"{rel}: bytes differ")
    return out


def main(argv=None) -> int:
    """Run both versions over the inputs and print what differs (exit 1) or that nothing does."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, metavar="COMMIT", help="the commit to compare this checkout with")
    parser.add_argument("--scale_folder", default=None, metavar="DIR",
                        help="also compare over the synthetic stage-4 outputs in DIR (bench/report_scale.py)")
    parser.add_argument("--bytes", action="store_true",
                        help="also compare every file written byte for byte (figures, page, records), run "
                             "stamps set aside: for a change meant to draw and write exactly the same")
    args = parser.parse_args(argv)
    failed = False
    with tempfile.TemporaryDirectory(prefix="orbench_identical_") as tmp:
        tmp = Path(tmp)
        base = export_commit(args.base, tmp / "base")
        runs = [("varied", write_varied(tmp / "inputs"))]
        if args.scale_folder:
            runs.append(("scale", [str(Path(args.scale_folder) / "*_alignment.csv"), "--no_reference"]))
        for name, report_args in runs:
            for label, tree in (("base", base), ("head", ROOT)):
                run_report(tree, report_args, tmp / f"{name}_{label}", tmp / "cache")
            problems = compare_outputs(tmp / f"{name}_base", tmp / f"{name}_head")
            files = sorted(p.name for p in (tmp / f"{name}_head").iterdir() if p.suffix in (".csv", ".json"))
            print(f"{name}: {'identical figures' if not problems else f'{len(problems)} differences'} "
                  f"({', '.join(files)})")
            for p in problems:
                print(f"  {p}")
            failed |= bool(problems)
            if args.bytes:
                differ = compare_bytes(tmp / f"{name}_base", tmp / f"{name}_head")
                count = sum(1 for p in (tmp / f"{name}_head").rglob("*") if p.is_file())
                print(f"{name}: {'every file byte-identical' if not differ else f'{len(differ)} files differ'} "
                      f"({count} files)")
                for p in differ:
                    print(f"  {p}")
                failed |= bool(differ)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
