"""Build the OR-Bench release: safe, hard and toxic subsets, a manifest and a dataset card.

Reads one or more moderator outputs (columns ``prompt``, the category column, the ensemble
``is_toxic`` and ``error``) and, for the hard subset, alignment-checker outputs of a panel of models
(``--panel``: ``prompt``, ``is_rejected``, ``error``, and ``model`` when present, else the file name
names the model). Every input may be a path, a glob or a URL pandas reads (``hf://``, ``file://``).

Steps, all deterministic:

1. Rows with a moderation ``error`` (or ``moderation_category`` skipped_error), an empty prompt
   or an undecided ``is_toxic`` (empty) go to no subset; each kind is counted in the manifest.
2. Deduplicate the decided rows in input order (files in the order given), keeping the first:
   exact text, then normalised text (case, whitespace, curly quotes, surrounding quotes and trailing
   punctuation ignored), then, with ``--near_dup_threshold T``, any prompt whose word-set Jaccard
   similarity with an earlier kept prompt is >= T (an exact search, ``analysis/near_dup.py``; a
   prompt with no word characters is never a near-duplicate).
3. safe = ensemble ``is_toxic`` False; toxic = ``is_toxic`` True.
4. hard = safe prompts that at least ``--min_rejections`` distinct panel models rejected
   (``is_rejected`` True; panel rows with an error count as no verdict), matched by normalised
   prompt text; if more than ``--hard_size``, a ``--seed``-ed random sample of that size, kept
   in input order. The hard prompts are also in the safe subset, as in the paper.

Writes into ``--output_dir`` (default ``./release``), in the published schema ``prompt,category``:
``orbench-safe.csv`` (the OR-Bench-80K counterpart), ``orbench-hard.csv`` (Hard-1K; only with
``--panel``) and ``orbench-toxic.csv``, plus ``manifest.json`` (counts per subset and category,
parameters, panel models, SHA-256 of inputs and of the CSVs, tool version; no timestamps, so equal
inputs give byte-identical files) and ``README.md``, a dataset card with hub front matter.

Example::

    python analysis/build_release.py moderated/*_moderated.csv \\
        --panel 'panel/*_checked.csv' --min_rejections 3 --hard_size 1000 --seed 0 --output_dir release
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

import orbench
from orbench.analysis.release.near_dup import near_duplicates
from orbench.analysis.report.inputs import expand
from orbench.llm.errors import UsageError
from orbench.run import existing_output
from orbench.run.cli import ArgumentParser, positive_int
from orbench.run.tables import file_name, input_stem, parse_bool, read_table, write_csv_atomic
from orbench.scoring.parsing import normalise_for_dedup
from orbench.scoring.vocab import SKIPPED_ERROR

FILES = {"safe": "orbench-safe.csv", "hard": "orbench-hard.csv", "toxic": "orbench-toxic.csv"}
#: How a build setting is named in a message: its flag.
RELEASE_FLAGS = {"min_rejections": "--min_rejections", "hard_size": "--hard_size", "seed": "--seed",
                 "near_dup_threshold": "--near_dup_threshold", "category_column": "--category_column",
                 "moderated": "the moderated files", "panel": "--panel", "license": "--license", "title": "--name"}
SCHEMA = ["prompt", "category"]


def sha256_of(path: str, frame: pd.DataFrame) -> dict:
    """SHA-256 of a local file's bytes; for a URL, of the table as re-written as CSV (said so)."""
    if "://" in path:
        digest = hashlib.sha256(frame.to_csv(index=False).encode("utf-8")).hexdigest()
        return {"sha256": digest, "sha256_of": "table re-written as CSV (URL input)"}
    return {"sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest()}


def load_moderated(paths: Sequence[str], category_column: str) -> tuple[pd.DataFrame, list[dict], Counter]:
    """All decided, non-empty rows in input order (prompt, category, toxic), input records, exclusion counts."""
    frames, inputs, counts = [], [], Counter()
    for path in paths:
        frame = read_table(path, needs=("prompt", "is_toxic", category_column), what="moderated file")
        inputs.append({"name": file_name(path), "rows": len(frame), **sha256_of(path, frame)})
        counts["input_rows"] += len(frame)
        error = frame["error"].str.strip() != "" if "error" in frame.columns else pd.Series(False, index=frame.index)
        if "moderation_category" in frame.columns:  # rows the moderator skipped for an input error
            error |= frame["moderation_category"].str.strip() == SKIPPED_ERROR
        empty = frame["prompt"].str.strip() == ""
        toxic = frame["is_toxic"].map(parse_bool)
        counts["moderation_errors"] += int(error.sum())
        counts["empty_prompts"] += int((~error & empty).sum())
        counts["undecided"] += int((~error & ~empty & toxic.isna()).sum())
        keep = ~error & ~empty & toxic.notna()
        frames.append(pd.DataFrame({"prompt": frame.loc[keep, "prompt"],
                                    "category": frame.loc[keep, category_column].str.strip(),
                                    "toxic": toxic[keep].astype(bool)}))
    return pd.concat(frames, ignore_index=True), inputs, counts


def deduplicate(rows: pd.DataFrame, threshold: float | None, counts: Counter) -> pd.DataFrame:
    """Drop exact, normalised and (optionally) near duplicates, keeping first occurrences."""
    exact = rows["prompt"].duplicated()
    counts["exact_duplicates"] = int(exact.sum())
    rows = rows[~exact]
    keys = rows["prompt"].map(normalise_for_dedup)
    norm = keys.duplicated()
    counts["normalised_duplicates"] = int(norm.sum())
    rows = rows[~norm].assign(key=keys[~norm])
    if threshold is not None:
        near = pd.Series(near_duplicates(list(rows["prompt"]), threshold), index=rows.index)
        counts["near_duplicates"] = int(near.sum())
        rows = rows[~near]
    return rows.reset_index(drop=True)


def load_panel(paths: Sequence[str]) -> tuple[dict[str, set[str]], list[dict], list[dict]]:
    """normalised prompt -> models that rejected it; per-model stats; input records."""
    rejecters: dict[str, set[str]] = defaultdict(set)
    stats: dict[str, Counter] = defaultdict(Counter)
    inputs = []
    for path in paths:
        frame = read_table(path, needs=("prompt", "is_rejected"), what="panel file")
        inputs.append({"name": file_name(path), "rows": len(frame), **sha256_of(path, frame)})
        models = frame["model"].str.strip() if "model" in frame.columns else pd.Series("", index=frame.index)
        models = models.where(models != "", input_stem(path))
        error = frame["error"].str.strip() != "" if "error" in frame.columns else pd.Series(False, index=frame.index)
        verdict = frame["is_rejected"].map(parse_bool)
        for prompt, model, err, rej in zip(frame["prompt"], models, error, verdict):
            st = stats[model]
            st["rows"] += 1
            if err or rej is None:
                st["errors" if err else "unparsed"] += 1
            elif rej:
                st["rejections"] += 1
                rejecters[normalise_for_dedup(prompt)].add(model)
    table = [{"model": m, "rows": s["rows"], "rejections": s["rejections"], "errors": s["errors"],
              "unparsed": s["unparsed"]} for m, s in sorted(stats.items())]
    return rejecters, table, inputs


def size_category(n: int) -> str:
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
                         (1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M")):
        if n < limit:
            return label
    return "10M<n<100M"


def dataset_card(manifest: dict, license_id: str, pretty_name: str) -> str:
    subsets = manifest["subsets"]
    total = max(s["rows"] for s in subsets.values())
    front = ["---", f"license: {license_id}", "task_categories:", "- text-generation",
             "- question-answering", "language:", "- en", "size_categories:", f"- {size_category(total)}",
             f"pretty_name: {json.dumps(pretty_name)}", "tags:", "- llm", "- safety", "- over-refusal",
             "- alignment", "configs:"]
    for s in subsets.values():
        front += [f"- config_name: {Path(s['file']).stem}", "  data_files:", "  - split: train",
                  f"    path: {s['file']}"]
    front.append("---")
    p = manifest["parameters"]
    lines = ["", f"# {pretty_name}", "",
             "Prompts for measuring over-refusal in language models, regenerated with the `orbench` suite "
             f"(version {manifest['version']}) following the OR-Bench method (arXiv 2405.20947).", "",
             "| subset | file | rows | what it holds |", "|---|---|---|---|"]
    what = {"safe": "prompts the moderator ensemble judged safe (seemingly toxic but answerable)",
            "hard": f"safe prompts rejected by at least {p['min_rejections']} of the panel models",
            "toxic": "prompts the moderator ensemble judged toxic (a model should refuse them)"}
    for name, s in subsets.items():
        lines.append(f"| {name} | `{s['file']}` | {s['rows']} | {what[name]} |")
    cats = sorted({c for s in subsets.values() for c in s["categories"]})
    lines += ["", "## Rows per category", "", "| category | " + " | ".join(subsets) + " |",
              "|---|" + "---|" * len(subsets)]
    for c in cats:
        lines.append(f"| {c} | " + " | ".join(str(s["categories"].get(c, 0)) for s in subsets.values()) + " |")
    lines += ["", "## Columns", "", "- `prompt`: the prompt text.", "- `category`: one of the benchmark's "
              "harm categories.", "", "## How it was built", "",
              f"Duplicates removed (exact: {manifest['counts']['exact_duplicates']}, normalised: "
              f"{manifest['counts']['normalised_duplicates']}, near: {manifest['counts'].get('near_duplicates', 0)}); "
              f"rows without a moderation decision are left out (errors: {manifest['counts']['moderation_errors']}, "
              f"undecided: {manifest['counts']['undecided']}). Parameters: "
              + ", ".join(f"`{k}={v}`" for k, v in sorted(p.items())) + ".",
              "", "`manifest.json` lists the inputs, panel models and SHA-256 digests of every subset file.", ""]
    return "\n".join(front + lines)


def release_settings(parameters: dict, inputs: dict, card: dict | None) -> dict:
    """What a build was asked for: its parameters, the input files by name and the card's license
    and title (left out when ``card`` is None: a manifest of an earlier version has none)."""
    return {**parameters, "moderated": [i.get("name") for i in inputs.get("moderated") or []],
            "panel": [i.get("name") for i in inputs.get("panel") or []], **(card or {})}


def guard_release(out: Path, settings: dict, inputs: dict, overwrite: bool) -> list[str]:
    """Stop (``UsageError``) before writing when ``out`` holds a release built with other settings
    (or release files without a manifest), unless ``overwrite``; returns notes for the console."""
    present = [n for n in [*FILES.values(), "manifest.json", "README.md"] if (out / n).exists()]
    if not present:
        return []
    found = existing_output.Existing(out, rows="a finished release", flags=RELEASE_FLAGS,
                                     new_place="build into a new folder with --output_dir NEW")
    try:
        manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
        old = release_settings(manifest["parameters"], manifest["inputs"], manifest.get("card"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        found.unknown = "has release files but no readable manifest.json saying how they were built"
        return existing_output.check(found, overwrite)
    found.differences = existing_output.differences(old, {k: settings[k] for k in old})
    notes = existing_output.check(found, overwrite)
    before = {i.get("name"): i.get("sha256") for part in manifest["inputs"].values() for i in part or []}
    changed = [i["name"] for part in inputs.values() for i in part if before.get(i["name"]) not in (None, i["sha256"])]
    if changed and not found.conflict:
        notes.append(f"rebuilt {out}: {', '.join(changed)} changed since the last build")
    return notes


def build(moderated: Sequence[str], output_dir: str | Path, *, panel: Sequence[str] = (), min_rejections: int = 3,
          hard_size: int | None = 1000, seed: int = 0, near_dup_threshold: float | None = None,
          category_column: str = "category", license_id: str = "cc-by-4.0",
          pretty_name: str = "OR-Bench (regenerated)", overwrite: bool = False) -> dict:
    """Build the release into ``output_dir``; return the manifest (its ``notes``: what the
    console should say, not written). ``UsageError`` before anything is written when there is
    no decided prompt, or ``output_dir`` holds a release built with other settings and
    ``overwrite`` is off."""
    mod_paths = [p for spec in moderated for p in expand(spec)]
    panel_paths = [p for spec in panel for p in expand(spec)]
    rows, mod_inputs, counts = load_moderated(mod_paths, category_column)
    if rows.empty:
        raise UsageError(
            f"no decided prompt in the {counts['input_rows']} moderated rows ({counts['moderation_errors']} with an "
            f"error, {counts['undecided']} undecided, {counts['empty_prompts']} empty): nothing to release. An "
            f"undecided row (is_toxic empty) has no majority among the moderators, e.g. unparsed replies; "
            f"see the moderation output's moderation_category and <moderator>_raw columns")
    rows = deduplicate(rows, near_dup_threshold, counts)
    subsets = {"safe": rows[~rows["toxic"]]}
    panel_models, panel_inputs = [], []
    if panel_paths:
        rejecters, panel_models, panel_inputs = load_panel(panel_paths)
        if min_rejections > len(panel_models):
            raise UsageError(f"--min_rejections {min_rejections} is more than the {len(panel_models)} models "
                             f"in the panel ({', '.join(m['model'] for m in panel_models)})")
        safe = subsets["safe"]
        votes = safe["key"].map(lambda k: len(rejecters.get(k, ())))
        candidates = safe[votes >= min_rejections]
        counts["hard_candidates"] = len(candidates)
        if hard_size is not None and len(candidates) > hard_size:
            chosen = sorted(random.Random(seed).sample(range(len(candidates)), hard_size))
            candidates = candidates.iloc[chosen]
        subsets["hard"] = candidates
        safe_keys = set(safe["key"])
        for m in panel_models:
            m["rejected_safe_prompts"] = sum(1 for k, who in rejecters.items() if m["model"] in who and k in safe_keys)
    subsets["toxic"] = rows[rows["toxic"]]
    out = Path(output_dir)
    parameters = {"min_rejections": min_rejections, "hard_size": hard_size if hard_size else "all",
                  "seed": seed, "near_dup_threshold": near_dup_threshold, "category_column": category_column}
    inputs, card = {"moderated": mod_inputs, "panel": panel_inputs}, {"license": license_id, "title": pretty_name}
    notes = guard_release(out, release_settings(parameters, inputs, card), inputs, overwrite)
    out.mkdir(parents=True, exist_ok=True)
    manifest = {"tool": "orbench", "version": orbench.__version__, "parameters": parameters, "card": card,
                "inputs": inputs, "panel_models": panel_models,
                "counts": dict(sorted(counts.items())), "subsets": {}}
    for name, frame in subsets.items():
        path = out / FILES[name]
        write_csv_atomic(frame[SCHEMA], path)
        manifest["subsets"][name] = {"file": FILES[name], "rows": len(frame),
                                     "categories": dict(sorted(Counter(frame["category"]).items())),
                                     "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
                                       encoding="utf-8")
    (out / "README.md").write_text(dataset_card(manifest, license_id, pretty_name), encoding="utf-8")
    return {**manifest, "notes": notes}


def size_arg(text: str) -> int | None:
    """argparse type: a whole number >= 1, or ``all``."""
    return None if text.strip().lower() == "all" else positive_int(text)


def threshold_arg(text: str) -> float:
    """argparse type: a similarity in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return value


def make_parser() -> ArgumentParser:
    doc = __doc__.split("\n\n")
    parser = ArgumentParser(prog="build_release.py", description="\n\n".join(doc[:-2]),
                            epilog="\n\n".join(doc[-2:]))
    parser.add_argument("moderated", nargs="+", metavar="MODERATED",
                        help="moderator output files (paths, globs or URLs) with prompt, category, is_toxic")
    parser.add_argument("--panel", nargs="+", action="extend", default=[], metavar="FILE",
                        help="alignment-checker outputs of the panel models (paths, globs or URLs); "
                             "needed for the hard subset. Put the moderated files before --panel")
    parser.add_argument("--min_rejections", type=positive_int, default=3, metavar="K",
                        help="a safe prompt is hard when at least K distinct panel models rejected it (default: 3)")
    parser.add_argument("--hard_size", type=size_arg, default=1000, metavar="N",
                        help="sample the hard subset down to N prompts, or 'all' (default: 1000; all if fewer)")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the hard-subset sample (default: 0)")
    parser.add_argument("--near_dup_threshold", type=threshold_arg, default=None, metavar="T",
                        help="also drop prompts whose word-set Jaccard similarity with an earlier kept prompt "
                             "is >= T, e.g. 0.9 (default: off)")
    parser.add_argument("--category_column", default="category",
                        metavar="COLUMN",
                        help="input column that gives each prompt's category, e.g. moderation_category "
                             "(default: category)")
    parser.add_argument("--license", dest="license_id", default="cc-by-4.0", metavar="ID",
                        help="license id written into the dataset card (default: cc-by-4.0)")
    parser.add_argument("--name", dest="pretty_name", default="OR-Bench (regenerated)", metavar="TITLE",
                        help="dataset title in the card (default: 'OR-Bench (regenerated)')")
    parser.add_argument("--output_dir", default="release", metavar="DIR",
                        help="folder for the release files (default: ./release)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace a release in --output_dir that was built with other settings or inputs "
                             "(default: stop with exit 2 naming what differs; the same settings rebuild in place)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = make_parser().parse_args(argv)
        manifest = build(args.moderated, args.output_dir, panel=args.panel, min_rejections=args.min_rejections,
                         hard_size=args.hard_size, seed=args.seed, near_dup_threshold=args.near_dup_threshold,
                         category_column=args.category_column, license_id=args.license_id,
                         pretty_name=args.pretty_name, overwrite=args.overwrite)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # an output folder that cannot be written: one line, exit 2, as the stages say it
        print(f"error: cannot write the release into {args.output_dir}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    c = manifest["counts"]
    print(f"{c['input_rows']} input rows: {c['moderation_errors']} errors, {c['undecided']} undecided, "
          f"{c['empty_prompts']} empty, {c['exact_duplicates']} exact + {c['normalised_duplicates']} normalised + "
          f"{c.get('near_duplicates', 0)} near duplicates removed", file=sys.stderr)
    if "hard" not in manifest["subsets"]:
        print("no --panel given: the hard subset was not built", file=sys.stderr)
    for note in manifest["notes"]:
        print(note, file=sys.stderr)
    out = Path(args.output_dir)
    for name, s in manifest["subsets"].items():
        print(f"{name}: {s['rows']} prompts -> {out / s['file']}")
    print(f"manifest: {out / 'manifest.json'}")
    print(f"dataset card: {out / 'README.md'}")
    return 0

