"""Who made a release: the models of each stage, read from the meta files the stages wrote.

Every stage writes ``<output>.meta.json`` beside its output (``orbench.run.provenance``), naming
its models (as typed, as resolved, the model id the provider reported back) and its input. From
each moderated file the chain of those files is followed back (``orbench.analysis.report.lineage``:
moderate -> rewrite -> generate, as far as each meta file is found); each panel file's own meta
file names the model that answered (stage 4, check alignment).

For each stage the release records every distinct set of models with the files it made, and the
files for which the stage is not recorded, with why: no meta file, or a file that changed after
its child was made from it (its meta file then describes another run, so nothing is taken from
it). Nothing is guessed from column values or file names.
"""

from __future__ import annotations

from collections.abc import Sequence

from orbench.analysis.report.lineage import read_chain, read_meta
from orbench.run.tables import file_name

#: The stages a release is made by, in order: stage id (as the runner writes it) -> what it did.
STAGES = {"generate": "stage 1: generated the toxic seeds",
          "rewrite": "stage 2: rewrote each seed into seemingly toxic prompts",
          "moderate": "stage 3: moderated the prompts (safe or toxic)",
          "check_alignment": "stage 4: the panel models answered the safe prompts (hard subset)"}


def models_of(meta: dict) -> list[dict]:
    """The models a meta record names: ``{"resolved", "typed", "reported"}`` each, in its order."""
    out = []
    for m in meta.get("models") or []:
        if not isinstance(m, dict) or not (m.get("resolved") or m.get("typed")):
            continue
        reported = m.get("reported_model") or []
        reported = [reported] if isinstance(reported, str) else [str(r) for r in reported]
        out.append({"resolved": str(m.get("resolved") or m.get("typed")), "typed": str(m.get("typed") or ""),
                    "reported": sorted(set(reported))})
    return out


def _add(found: dict, stage: str, models: list[dict], made: str) -> None:
    """Record that ``models`` made file ``made`` in ``stage`` (one entry per distinct model list)."""
    entries = found.setdefault(stage, {"runs": [], "unrecorded": []})["runs"]
    for entry in entries:
        if entry["models"] == models:
            if made not in entry["files"]:
                entry["files"].append(made)
            return
    entries.append({"models": models, "files": [made]})


def _unrecorded(found: dict, stage: str, made: str, why: str) -> None:
    found.setdefault(stage, {"runs": [], "unrecorded": []})["unrecorded"].append({"file": made, "why": why})


def moderated_chain(path: str, found: dict) -> None:
    """Add what the meta chain behind one moderated file says about stages 1-3 to ``found``."""
    name = file_name(path)
    chain = read_chain(path)
    seen: dict[str, str] = {}
    broke = None
    for i, link in enumerate(chain):
        stage = str(link["meta"].get("stage") or "")
        if link["changed"]:
            broke = (f"{file_name(link['file'])} has changed since {file_name(chain[i - 1]['file'])} was made from "
                     f"it; its meta file describes another run")
            break
        if stage in STAGES and stage != "check_alignment" and stage not in seen:
            seen[stage] = link["file"]
            _add(found, stage, models_of(link["meta"]), name)
    for stage in ("generate", "rewrite", "moderate"):
        if stage in seen:
            continue
        if broke:
            why = broke
        elif not chain:
            why = "no meta file beside the moderated file"
        else:
            last = chain[-1]
            recorded = (last["meta"].get("input") or {}).get("path") if isinstance(last["meta"].get("input"), dict) \
                else None
            why = (f"the meta files end at {file_name(last['file'])}, whose input "
                   f"{file_name(recorded) if recorded else '(unrecorded)'} has no meta file")
        _unrecorded(found, stage, name, why)


def panel_model(path: str) -> str | None:
    """The model a panel file's own stage-4 meta file names (as resolved), or None."""
    meta = read_meta(path)
    if not meta or meta.get("stage") != "check_alignment":
        return None
    models = models_of(meta)
    return models[0]["resolved"] if len(models) == 1 else None


def who_made(moderated: Sequence[str], panel: Sequence[str]) -> dict:
    """``{stage: {"runs": [{"models", "files"}], "unrecorded": [{"file", "why"}]}}`` for the stages of
    :data:`STAGES` (check_alignment only with a panel)."""
    found: dict = {}
    for path in moderated:
        moderated_chain(path, found)
    for path in panel:
        name = file_name(path)
        meta = read_meta(path)
        if meta and meta.get("stage") == "check_alignment":
            _add(found, "check_alignment", models_of(meta), name)
        else:
            _unrecorded(found, "check_alignment", name, "no meta file beside the panel file" if not meta else
                        f"its meta file is of stage {meta.get('stage')!r}, not check_alignment")
    return {stage: found[stage] for stage in STAGES if stage in found}


def model_text(m: dict) -> str:
    """A model as the card shows it: resolved, then as typed and as reported where they differ."""
    extra = []
    if m["typed"] and m["typed"] != m["resolved"]:
        extra.append(f"typed `{m['typed']}`")
    reported = [r for r in m["reported"] if r and r != m["resolved"].split("/", 1)[-1] and r != m["resolved"]]
    if reported:
        extra.append("reported by the provider as " + ", ".join(f"`{r}`" for r in reported))
    return f"`{m['resolved']}`" + (f" ({'; '.join(extra)})" if extra else "")


def stage3_runs(makers: dict) -> list[dict]:
    """The recorded stage-3 runs (``{"models", "files"}``)."""
    return list(makers.get("moderate", {}).get("runs", []))
