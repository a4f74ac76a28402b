"""Build the OR-Bench release: safe, hard and toxic subsets, a manifest and a dataset card.

Reads one or more moderator outputs (columns ``prompt``, the category column, the ensemble
``is_toxic`` and ``error``) and, for the hard subset, alignment-checker outputs of a panel of models
(``--panel``: ``prompt``, ``is_rejected``, ``error``, and ``model`` when present, else the model
the file's stage-4 meta file names, else the file name). Every input may be a path, a glob or a URL pandas reads (``hf://``, ``file://``).

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
inputs give byte-identical files) and ``README.md``, a dataset card with hub front matter
(``analysis/release/card.py``): a content warning, who made each stage (the models as resolved,
from the stages' meta files ``<output>.meta.json``), stage 3's moderator card (``--moderator_card``)
or "moderator not calibrated", the share of each subset's prompts humans call safe with its
interval (``--audit``) or "not audited", licence, attribution and citation. Each subset with rows
is declared as a config that ``datasets.load_dataset(DIR, "orbench-safe")`` reads; an empty subset
is neither written nor declared. A panel model named by two panel files stops the build (exit 2):
its rejections would count twice towards ``--min_rejections``.

With ``--push_to_hub REPO`` the folder is then uploaded as a Hugging Face dataset repo
(``analysis/release/hub.py``); the token (``HF_TOKEN``, else the saved login) is checked with the
Hub before anything is built or sent.

Example::

    python analysis/build_release.py moderated/*_moderated.csv \\
        --panel 'panel/*_checked.csv' --min_rejections 3 --hard_size 1000 --seed 0 --output_dir release \\
        --moderator_card moderator_card.json --audit audit_prompts --push_to_hub my-org/or-bench-regen

Exit status: 0 built (and pushed); 1 built, but the upload failed (rerun to push); 2 bad input or
configuration, one line naming the file or flag: nothing built or uploaded (when the Hub refuses
the checked token for REPO itself, e.g. another's namespace, the release is built, nothing committed).
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
from orbench.analysis.release import evidence, hub, makers
from orbench.analysis.release.card import dataset_card
from orbench.analysis.release.near_dup import near_duplicates
from orbench.analysis.report.inputs import expand
from orbench.analysis.report.lineage import source_sets
from orbench.llm.errors import UsageError
from orbench.run import existing_output
from orbench.run.cli import ArgumentParser, entry_point, positive_int
from orbench.run.tables import file_name, input_stem, parse_bool, read_table, write_csv_atomic, write_text_atomic
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
    """normalised prompt -> models that rejected it; per-model stats; input records.

    A row's model is its ``model`` column, else the model the file's stage-4 meta file names, else
    the file's name. ``UsageError`` when two files name one model (or one file is given twice):
    its rejections would count twice towards ``--min_rejections``."""
    rejecters: dict[str, set[str]] = defaultdict(set)
    stats: dict[str, Counter] = defaultdict(Counter)
    inputs, first_file, seen = [], {}, {}
    for path in paths:
        key = path if "://" in path else str(Path(path).resolve())
        if key in seen:
            raise UsageError(f"panel file {path} is given twice (also as {seen[key]}): its model would count twice "
                             f"towards --min_rejections")
        seen[key] = path
        frame = read_table(path, needs=("prompt", "is_rejected"), what="panel file")
        inputs.append({"name": file_name(path), "rows": len(frame), **sha256_of(path, frame)})
        models = frame["model"].str.strip() if "model" in frame.columns else pd.Series("", index=frame.index)
        models = models.where(models != "", makers.panel_model(path) or input_stem(path))
        for model in dict.fromkeys(models):
            if model in first_file:
                raise UsageError(f"panel files {first_file[model]} and {path} both name model {model}: its rejections "
                                 f"would count twice towards --min_rejections; give each panel model once")
            first_file[model] = path
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


def attribution(paths: Sequence[str], moderator_card: dict | None) -> list[str]:
    """The bundled sets a release used: ``or-bench`` when an input's meta chain reads one of
    OR-Bench's published sets, ``xstest`` when one reads XSTest's or the moderator card was
    measured on XSTest's labels."""
    used = set()
    for path in paths:
        for name in source_sets(path):
            used.add("xstest" if name.startswith("xstest") else "or-bench")
    labels = (moderator_card or {}).get("labels") or {}
    if "xstest" in str(labels.get("name", "")).lower():
        used.add("xstest")
    return sorted(used)


def build(moderated: Sequence[str], output_dir: str | Path, *, panel: Sequence[str] = (), min_rejections: int = 3,
          hard_size: int | None = 1000, seed: int = 0, near_dup_threshold: float | None = None,
          category_column: str = "category", license_id: str = "cc-by-4.0",
          pretty_name: str = "OR-Bench (regenerated)", overwrite: bool = False,
          moderator_card: str | None = None, audit: str | None = None) -> dict:
    """Build the release into ``output_dir``; return the manifest (its ``notes``: what the
    console should say, not written). ``UsageError`` before anything is written when there is
    no decided prompt, a panel model is named twice, the moderator card or the audit cannot be
    read (or the card measured other moderators), or ``output_dir`` holds a release built with
    other settings and ``overwrite`` is off."""
    card_figures = evidence.read_moderator_card(moderator_card) if moderator_card else None
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
    empty = {name: "no prompt: the moderators judged none toxic" if name == "toxic" else
             f"no safe prompt was rejected by {min_rejections} panel models" if name == "hard" else
             "no prompt: the moderators judged none safe" for name, frame in subsets.items() if frame.empty}
    if not panel_paths:
        empty["hard"] = "not built: no --panel (the panel's verdicts decide it)"
    empty = {name: empty[name] for name in FILES if name in empty}
    subsets = {name: frame for name, frame in subsets.items() if not frame.empty}
    who = makers.who_made(mod_paths, panel_paths)
    moderations = evidence.moderation_fingerprints(mod_paths)
    if card_figures:
        note = evidence.check_card_matches(card_figures, makers.stage3_runs(who), moderator_card, moderations)
        if note:
            card_figures["note"] = note
    else:  # the card orbench-calibrate stored for this very moderation, if any
        card_figures = evidence.stored_moderator_card(mod_paths)
    audited = evidence.audit_estimates(audit, {n: list(f["prompt"]) for n, f in subsets.items()}) if audit else None
    out = Path(output_dir)
    parameters = {"min_rejections": min_rejections, "hard_size": hard_size if hard_size else "all",
                  "seed": seed, "near_dup_threshold": near_dup_threshold, "category_column": category_column}
    inputs, card = {"moderated": mod_inputs, "panel": panel_inputs}, {"license": license_id, "title": pretty_name}
    notes = guard_release(out, release_settings(parameters, inputs, card), inputs, overwrite)
    notes += audited["notes"] if audited else []
    if card_figures and card_figures.get("note"):
        notes.append(f"--moderator_card: {card_figures['note']}")
    out.mkdir(parents=True, exist_ok=True)
    manifest = {"tool": "orbench", "version": orbench.__version__, "parameters": parameters, "card": card,
                "inputs": inputs, "panel_models": panel_models, "counts": dict(sorted(counts.items())),
                "subsets": {}, "empty_subsets": empty, "makers": who, "moderator_card": card_figures,
                # the moderations that decided the subsets (orbench-report finds their cards by these)
                "moderator_fingerprints": sorted(fp for fp in moderations if fp),
                "audit": None if audited is None else {k: v for k, v in audited.items() if k != "notes"},
                "attribution": attribution(mod_paths + panel_paths, card_figures)}
    for name in set(FILES) - set(subsets):  # a subset of an earlier build that is empty now
        (out / FILES[name]).unlink(missing_ok=True)
    for name, frame in subsets.items():
        path = out / FILES[name]
        write_csv_atomic(frame[SCHEMA], path)
        manifest["subsets"][name] = {"file": FILES[name], "rows": len(frame),
                                     "categories": dict(sorted(Counter(frame["category"]).items())),
                                     "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    write_text_atomic(json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n", out / "manifest.json")
    write_text_atomic(dataset_card(manifest), out / "README.md")
    return {**manifest, "notes": notes}


def release_files(manifest: dict) -> list[str]:
    """The files a build wrote (what ``--push_to_hub`` uploads)."""
    return ["README.md", "manifest.json", *(s["file"] for s in manifest["subsets"].values())]


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
    parser = ArgumentParser(prog="build_release.py", description="\n\n".join(doc[:-3]),
                            epilog="\n\n".join(doc[-3:]))
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
    parser.add_argument("--moderator_card", default=None, metavar="FILE",
                        help="stage 3's agreement with human labels, shown in the card: the moderator_card_*.json "
                             "orbench-calibrate --moderator_model writes, or any JSON object with "
                             "coverage, sensitivity, specificity and kappa, each {\"value\": v, \"ci\": [low, high]} "
                             "(top level or under \"pooled\"), optional \"moderators\" (must name the moderators the "
                             "meta files record) and \"labels\" (docs/release.md). Default: the card orbench-calibrate "
                             "stored for the moderation the stage-3 meta files record, else the card says "
                             "'moderator not calibrated'")
    parser.add_argument("--audit", default=None, metavar="DIR",
                        help="an orbench-audit prompt audit of this release's subset files, with its labels: the card "
                             "gives each audited subset's share of prompts humans call safe with its 95%% interval "
                             "(default: 'not audited')")
    parser.add_argument("--output_dir", default="release", metavar="DIR",
                        help="folder for the release files (default: ./release)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace a release in --output_dir that was built with other settings or inputs "
                             "(default: stop with exit 2 naming what differs; the same settings rebuild in place)")
    parser.add_argument("--push_to_hub", default=None, metavar="REPO",
                        help="after building, upload the release files to the Hugging Face dataset repo REPO "
                             "(owner/name, or name in your own namespace), creating it if needed. The token "
                             "(HF_TOKEN, else 'hf auth login') is checked with the Hub before anything is built; "
                             "HF_ENDPOINT sets another Hub address")
    parser.add_argument("--private", action="store_true",
                        help="with --push_to_hub: create the repo as private (a repo that exists keeps its visibility)")
    return parser


@entry_point
def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = make_parser().parse_args(argv)
        if args.private and not args.push_to_hub:
            raise UsageError("--private applies to --push_to_hub REPO; give the repo to push to")
        token = None
        if args.push_to_hub:
            hub.check_repo_id(args.push_to_hub)
            token, user = hub.check_token()
            print(f"Hub token of {user or 'an unnamed account'} checked", file=sys.stderr)
        manifest = build(args.moderated, args.output_dir, panel=args.panel, min_rejections=args.min_rejections,
                         hard_size=args.hard_size, seed=args.seed, near_dup_threshold=args.near_dup_threshold,
                         category_column=args.category_column, license_id=args.license_id,
                         pretty_name=args.pretty_name, overwrite=args.overwrite,
                         moderator_card=args.moderator_card, audit=args.audit)
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
    for note in manifest["notes"]:
        print(note, file=sys.stderr)
    out = Path(args.output_dir)
    for name, s in manifest["subsets"].items():
        print(f"{name}: {s['rows']} prompts -> {out / s['file']}")
    for name, why in manifest["empty_subsets"].items():
        print(f"{name}: {why}; not written, not declared in the card")
    print(f"manifest: {out / 'manifest.json'}")
    print(f"dataset card: {out / 'README.md'}")
    if not args.push_to_hub:
        return 0
    sizes = ", ".join(f"{n} {s['rows']}" for n, s in manifest["subsets"].items())
    try:
        url, commit = hub.push(out, args.push_to_hub, release_files(manifest), token=token, private=args.private,
                               message=f"orbench {manifest['version']} release: {sizes}")
    except UsageError as exc:
        print(f"error: {exc}; the release is built in {out}, nothing was committed", file=sys.stderr)
        return 2
    except hub.PushError as exc:
        print(f"error: {exc}; the release is built in {out}: rerun the same command to push it", file=sys.stderr)
        return 1
    print(f"pushed to {url}" + (f" ({commit})" if commit else ""))
    return 0
