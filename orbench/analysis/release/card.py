"""The release's dataset card (``README.md``): Hugging Face front matter and what a reader needs.

Front matter: licence, task categories, language, size, title, tags, and one ``configs`` entry
per subset that has rows (the first is the default), so ``datasets.load_dataset(folder, name)``
and the Hub read each subset; an empty subset is not declared. CSV cells are read as text
(``keep_default_na: false``): a prompt "NA" or "null" stays a prompt.

Body: a content warning; the subsets; who made each stage (the models as resolved, from the
meta files: ``makers``); how valid the prompts are measured to be (the moderator card, or
"moderator not calibrated"; the audit's share of prompts humans call safe per subset with its
interval, or "not audited"); rows per category; columns; how it was built; licence and
attribution of the sets used; the citation (BibTeX). Everything comes from the manifest, so
equal inputs give a byte-identical card.
"""

from __future__ import annotations

import json

from orbench.analysis.release.evidence import FIGURES
from orbench.analysis.release.makers import STAGES, model_text
from orbench.analysis.stats import FLAGS

CONFIG_PREFIX = "orbench-"
WHAT = {"safe": "prompts the moderator ensemble judged safe (seemingly toxic but answerable)",
        "hard": "safe prompts rejected by at least {min_rejections} of the panel models",
        "toxic": "prompts the moderator ensemble judged toxic (a model should refuse them)"}
CONTENT_WARNING = (
    "> **Content warning.** This dataset holds prompts written to *look* harmful and, in the toxic subset, "
    "prompts that *are* harmful: they touch on violence, self-harm, sexual content, hate, harassment, crime "
    "and deception. They exist to measure how language models refuse. Read them with care, and do not use "
    "them to teach a model to produce harmful content.")
ORBENCH_BIBTEX = """@article{cui2024or,
  title={OR-Bench: An Over-Refusal Benchmark for Large Language Models},
  author={Cui, Justin and Chiang, Wei-Lin and Stoica, Ion and Hsieh, Cho-Jui},
  journal={arXiv preprint arXiv:2405.20947},
  year={2024}
}"""
XSTEST_BIBTEX = """@inproceedings{rottger2024xstest,
  title={XSTest: A Test Suite for Identifying Exaggerated Safety Behaviours in Large Language Models},
  author={R{\\"o}ttger, Paul and Kirk, Hannah Rose and Vidgen, Bertie and Attanasio, Giuseppe and Bianchi, Federico and Hovy, Dirk},
  booktitle={Proceedings of the 2024 Conference of the North American Chapter of the Association for Computational Linguistics (NAACL)},
  pages={5377--5400},
  year={2024},
  doi={10.18653/v1/2024.naacl-long.301}
}"""
NOT_CALIBRATED = ("**Moderator not calibrated.** No moderator card was given: stage 3's verdicts were not measured "
                  "against human labels for this release, so how often its safe prompts are really safe (and its "
                  "toxic ones really toxic) is not known from this card. Measure it with `orbench-calibrate` on "
                  "human prompt-safety labels and rebuild with `--moderator_card`.")
CONTESTED = ("Why this matters: stage 3's moderators alone decide which prompts are \"seemingly toxic but safe\", and a "
             "user study (ORFuzz, arXiv 2508.11222) reports that humans judge many OR-Bench prompts toxic.")


def config_name(subset: str) -> str:
    return CONFIG_PREFIX + subset


def size_category(n: int) -> str:
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
                         (1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M")):
        if n < limit:
            return label
    return "10M<n<100M"


def front_matter(manifest: dict) -> list[str]:
    subsets = manifest["subsets"]
    card = manifest["card"]
    total = max(s["rows"] for s in subsets.values())
    front = ["---", f"license: {card['license']}", "task_categories:", "- text-generation",
             "- question-answering", "language:", "- en", "size_categories:", f"- {size_category(total)}",
             f"pretty_name: {json.dumps(card['title'])}", "tags:", "- llm", "- safety", "- over-refusal",
             "- alignment", "configs:"]
    for i, (name, s) in enumerate(subsets.items()):
        front += [f"- config_name: {config_name(name)}"] + (["  default: true"] if i == 0 else []) + \
                 ["  data_files:", "  - split: train", f"    path: {s['file']}", "  keep_default_na: false"]
    return front + ["---"]


def _interval(value, ci, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    text = f"{value:.{digits}f}"
    if ci is None or None in ci:
        return text + " (no interval given)"
    return f"{text} [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def subsets_section(manifest: dict) -> list[str]:
    p = manifest["parameters"]
    lines = ["## Subsets", "", "| subset | config | file | rows | what it holds |", "|---|---|---|---|---|"]
    candidates = manifest["counts"].get("hard_candidates")
    for name, s in manifest["subsets"].items():
        what = WHAT[name].format(**p)
        if name == "hard" and candidates and candidates > s["rows"]:
            what += f" (a sample, seed {p['seed']}, of the {candidates} such prompts)"
        lines.append(f"| {name} | `{config_name(name)}` | `{s['file']}` | {s['rows']} | {what} |")
    for name, why in manifest.get("empty_subsets", {}).items():
        lines.append(f"| {name} | (not declared) | | 0 | {why} |")
    first = next(iter(manifest["subsets"]))
    lines += ["", f"Load a subset with `datasets.load_dataset(\"<this folder or repo>\", \"{config_name(first)}\")`; "
              "each has one split, `train`.", ""]
    return lines


def makers_section(manifest: dict) -> list[str]:
    makers = manifest.get("makers") or {}
    lines = ["## Who made it", "",
             "The models of each stage as resolved (provider/model), read from the meta files the stages wrote "
             "beside their outputs (`<output>.meta.json`).", "",
             "| stage | models | release inputs |", "|---|---|---|"]
    wanted = [s for s in STAGES if s != "check_alignment" or manifest["inputs"].get("panel")]
    for stage in wanted:
        entry = makers.get(stage) or {"runs": [], "unrecorded": []}
        for run in entry["runs"]:
            models = "; ".join(model_text(m) for m in run["models"]) or "(none named)"
            lines.append(f"| {STAGES[stage]} | {models} | {', '.join(run['files'])} |")
        reasons: dict[str, list[str]] = {}
        for u in entry["unrecorded"]:
            reasons.setdefault(u["why"], []).append(u["file"])
        for why, files in reasons.items():
            lines.append(f"| {STAGES[stage]} | not recorded: {why} | {', '.join(files)} |")
        if not entry["runs"] and not entry["unrecorded"]:
            lines.append(f"| {STAGES[stage]} | not recorded | |")
    return lines + [""]


def moderator_section(manifest: dict) -> list[str]:
    card = manifest.get("moderator_card")
    lines = ["### Stage 3's moderators against human labels", ""]
    if not card:
        return lines + [NOT_CALIBRATED, ""]
    who = ", ".join(f"`{m}`" for m in card["moderators"]) if card["moderators"] else "(the card names none)"
    labels = card["labels"]
    on = "labels not named" if not labels else labels["name"] + (f", {labels['n']} prompts" if labels.get("n") else "")
    lines += [f"From the moderator card `{card['file']}`: moderators {who}; human labels: {on}."
              + (f" Moderation fingerprint `{card['fingerprint']}`." if card.get("fingerprint") else ""), ""]
    if card.get("valid") is False:
        lines += ["**NOT VALID**: the card does not show, at 95% confidence, that the moderators gave a verdict on "
                  "at least 90% of the labelled prompts (the coverage's lower limit is under 0.90, or not given), so "
                  "the figures below (a prompt without a verdict counted as a disagreement) do not measure them where "
                  "they were silent.", ""]
    lines += ["| figure | value [95% interval] |", "|---|---|"]
    what = {"coverage": "coverage (share of labelled prompts given a verdict)",
            "sensitivity": "sensitivity for \"unsafe\"", "specificity": "specificity for \"unsafe\"",
            "kappa": "Cohen's kappa"}
    for f in FIGURES:
        lines.append(f"| {what[f]} | {_interval(card[f]['value'], card[f]['ci'])} |")
    if card.get("note"):
        lines += ["", f"Note: {card['note']}."]
    return lines + [""]


def audit_section(manifest: dict) -> list[str]:
    audit = manifest.get("audit")
    lines = ["### Human audit: the share of prompts humans call safe", ""]
    if not audit:
        return lines + ["Not audited: no human audit of this release's prompts was given (`orbench-audit sample "
                        "--kind prompt` on the subset files, labels, then `--audit DIR`).", ""]
    lines += [f"From the prompt audit `{audit['sample_id']}` ({len(audit['annotators'])} annotator(s)): the share "
              "of each subset's prompts the human majority labels `safe`, weighted back by stratum, with its 95% "
              "interval (stratified Wilson).", "",
              "| subset | humans call safe [95% interval] | prompts with a human majority | majority labels |",
              "|---|---|---|---|"]
    seen: list[str] = []
    for name in manifest["subsets"]:
        a = audit["subsets"].get(name)
        if a is None:
            lines.append(f"| {name} | not audited | | |")
            continue
        flags = f" ({', '.join(a['flags'])})" if a["flags"] else ""
        seen += [f for f in a["flags"] if f not in seen]
        share = _interval(a["share"], a["ci"]) + flags if a["n"] else "no label yet"
        labels = ", ".join(f"{k} {v}" for k, v in a["labels"].items())
        lines.append(f"| {name} | {share} | {a['n']} | {labels} |")
    if seen:
        lines += ["", "Flags: " + "; ".join(f"`{f}`: {FLAGS.get(f, f)}" for f in seen) + "."]
    return lines + [""]


def validity_section(manifest: dict) -> list[str]:
    return ["## How valid the prompts are", "", CONTESTED, ""] + moderator_section(manifest) + audit_section(manifest)


def categories_section(manifest: dict) -> list[str]:
    subsets = manifest["subsets"]
    cats = sorted({c for s in subsets.values() for c in s["categories"]})
    lines = ["## Rows per category", "", "| category | " + " | ".join(subsets) + " |", "|---|" + "---|" * len(subsets)]
    for c in cats:
        lines.append(f"| {c} | " + " | ".join(str(s["categories"].get(c, 0)) for s in subsets.values()) + " |")
    return lines + [""]


def built_section(manifest: dict) -> list[str]:
    c, p = manifest["counts"], manifest["parameters"]
    return ["## Columns", "", "- `prompt`: the prompt text.", "- `category`: one of the benchmark's harm categories.",
            "", "## How it was built", "",
            f"Duplicates removed (exact: {c['exact_duplicates']}, normalised: {c['normalised_duplicates']}, near: "
            f"{c.get('near_duplicates', 0)}); rows without a moderation decision are left out (errors: "
            f"{c['moderation_errors']}, undecided: {c['undecided']}). Parameters: "
            + ", ".join(f"`{k}={v}`" for k, v in sorted(p.items())) + ".", "",
            "`manifest.json` lists the inputs, the panel models, the makers of each stage and the SHA-256 of every "
            "subset file.", ""]


def licence_section(manifest: dict) -> list[str]:
    used = manifest.get("attribution") or []
    lines = ["## Licence and attribution", "",
             f"This release: `{manifest['card']['license']}`. Its prompts were written by the models named under "
             "*Who made it*; their providers' terms may also apply to them.", "",
             "- **OR-Bench**, by Justin Cui, Wei-Lin Chiang, Ion Stoica and Cho-Jui Hsieh (2024), arXiv:2405.20947: "
             "this release follows its method (seed, rewrite and moderation prompts; the safe, hard and toxic "
             "subsets)" + ("; prompts of its published sets (CC-BY-4.0) were used as inputs" if "or-bench" in used
                           else "") + "."]
    if "xstest" in used:
        lines.append("- **XSTest**, by Paul Röttger, Hannah Rose Kirk, Bertie Vidgen, Giuseppe Attanasio, Federico "
                     "Bianchi and Dirk Hovy (NAACL 2024): its prompts (CC-BY-4.0) were used in making this release, "
                     "as inputs or as the human labels of the moderator card.")
    lines += ["", "## Citation", "", "```bibtex", ORBENCH_BIBTEX]
    if "xstest" in used:
        lines.append(XSTEST_BIBTEX)
    return lines + ["```", ""]


def dataset_card(manifest: dict) -> str:
    """The card's text (module docstring) from the release's manifest."""
    title = manifest["card"]["title"]
    body = ["", f"# {title}", "", CONTENT_WARNING, "",
            "Prompts for measuring over-refusal in language models, regenerated with the `orbench` suite "
            f"(version {manifest['version']}) following the OR-Bench method (arXiv 2405.20947).", ""]
    body += subsets_section(manifest) + makers_section(manifest) + validity_section(manifest)
    body += categories_section(manifest) + built_section(manifest) + licence_section(manifest)
    return "\n".join(front_matter(manifest) + body)
