"""What an existing output was made with, and whether a rerun may write over it.

A stage declares two kinds of setting, both in every row's key (``orbench.run.stage.Stage``):

- **settings**: what the user asked for (model, system prompt, temperature, max tokens, samples,
  judge, moderators, ...). A rerun that asks for something else must not replace an output that
  is finished or partly done: it stops before any request, naming the output, each setting that
  differs (old and new value) and the ways on (``--output_file``, ``--overwrite``).
- **rules**: fingerprints of the project's own rules (keyword rules, templates, cascade classes).
  When they change, the rows are re-scored in place and the run's summary says so.

Where the settings are read from, first found first:

1. the progress file's first line, ``{"orbench_progress": 2, "stage", "settings", "rules"}``,
   written before a run's first request (so a crashed run is covered);
2. the meta file of a finished output (``settings`` and, since this format, ``rules``; an older
   meta file mixes the rules into ``settings``, and the stage's declared rule names sort them);
3. for a progress file of an earlier version with no meta file, the row keys: rows whose key is
   this run's key were made with these settings and rules.

An output with none of these (made by hand, or by another tool) counts as made with unknown
settings and is not replaced without ``--overwrite``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from orbench.llm.errors import UsageError

HEADER_KEY = "orbench_progress"
HEADER_FORMAT = 2
#: How a setting is named in a message: the flag that sets it, where there is one.
FLAGS = {"model": "--model", "system": "--system_prompt", "temperature": "--temperature",
         "max_tokens": "--max_tokens", "samples": "--samples", "matcher": "--matcher",
         "judge": "--check_model", "moderators": "--moderator_model", "column": "--column",
         "columns": "moderator columns", "stage": "stage",
         "engine": "the local model's engine"}
#: How a rule is named in the summary of a re-score.
RULE_NAMES = {"rules": "keyword rules", "template": "template", "cascade": "cascade classes",
              "per_seed": "rewrites per seed"}


def _plain(value):
    """``value`` as JSON gives it back (so 0.7 from a file equals 0.7 from a flag, tuples are lists)."""
    return json.loads(json.dumps(value, sort_keys=True, ensure_ascii=False, default=str))


def header_for(stage_id: str, settings: dict, rules: dict) -> dict:
    """The progress file's first line for a run with these settings and rules."""
    return {HEADER_KEY: HEADER_FORMAT, "stage": stage_id, "settings": _plain(settings), "rules": _plain(rules)}


def is_header(entry: object) -> bool:
    """True for a progress line that records settings rather than a row."""
    return isinstance(entry, dict) and HEADER_KEY in entry and "key" not in entry


@dataclass
class Recorded:
    """The settings and rules an existing output was made with, and where that was read."""

    stage: str | None
    settings: dict
    rules: dict
    source: str


def from_header(header: dict | None) -> Recorded | None:
    if not header:
        return None
    settings = header.get("settings") if isinstance(header.get("settings"), dict) else {}
    rules = header.get("rules") if isinstance(header.get("rules"), dict) else {}
    return Recorded(header.get("stage"), settings, rules, "progress file")


def from_meta(meta_path: Path, rule_names: Iterable[str]) -> Recorded | None:
    """The settings a meta file records; in an earlier format the rules are sorted out by name."""
    try:
        meta = json.loads(Path(meta_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or not isinstance(meta.get("settings"), dict):
        return None
    names = set(meta["rules"]) if isinstance(meta.get("rules"), dict) else set(rule_names)
    settings = {k: v for k, v in meta["settings"].items() if k not in names}
    rules = {k: v for k, v in meta["settings"].items() if k in names}
    return Recorded(meta.get("stage"), settings, rules, "meta file")


def show(value) -> str:
    """A setting's value in a one-line message: none, a short quoted text, or JSON."""
    if value is None:
        return "none"
    if isinstance(value, str):
        return repr(value if len(value) <= 60 else value[:57] + "...")
    return json.dumps(value, ensure_ascii=False)


def _short(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    if text is None or len(str(text)) <= 16:
        return str(text)
    return hashlib.sha256(str(text).encode("utf-8")).hexdigest()[:12]


def differences(old: dict, new: dict) -> list[tuple[str, object, object]]:
    old, new = _plain(old), _plain(new)
    return [(k, old.get(k), new.get(k)) for k in dict.fromkeys([*new, *old]) if old.get(k) != new.get(k)]


@dataclass
class Existing:
    """What a run found at its output: settings that differ, rules that changed, or no record."""

    output: Path
    differences: list[tuple[str, object, object]] = field(default_factory=list)
    rules_changed: list[tuple[str, object, object]] = field(default_factory=list)
    unknown: str | None = None  # why the settings cannot be read
    rows: str = "a finished output"
    new_place: str = "write this run to a new file with --output_file NEW.csv"
    flags: dict = field(default_factory=lambda: FLAGS)

    @property
    def conflict(self) -> bool:
        return bool(self.differences or self.unknown)

    def message(self) -> str:
        """The one line of a run that stops: the output, what differs, the ways on."""
        if self.unknown:
            what = f"{self.output} ({self.rows}) {self.unknown}"
        else:
            diffs = "; ".join(f"{self.flags.get(k, k)} was {show(a)}, now {show(b)}" for k, a, b in self.differences)
            what = f"{self.output} ({self.rows}) was made with other settings: {diffs}"
        return f"{what}. To keep it, {self.new_place}; to replace it, add --overwrite"

    def notes(self, overwrite: bool) -> list[str]:
        """The summary's notes: a replaced output, re-scored rows."""
        out = []
        if self.conflict and overwrite:
            made = ", ".join(f"{self.flags.get(k, k)} {show(a)}" for k, a, _ in self.differences)
            out.append(f"--overwrite: replaced {self.output.name}" + (f" (made with {made})" if made else ""))
        elif self.rules_changed:
            changed = ", ".join(f"{RULE_NAMES.get(k, k)} {_short(a)} -> {_short(b)}" for k, a, b in self.rules_changed)
            out.append(f"re-scored in place: the project's rules changed since this output was made ({changed})")
        return out


def inspect(stage_id: str, settings: dict, rules: dict, output: Path, *, header: dict | None,
            entries: dict, keys: Iterable[str], meta_path: Path, exists: bool | None = None,
            unrecorded_ok: bool = False) -> Existing | None:
    """Compare this run's settings and rules with those ``output`` was made with.

    ``header`` and ``entries`` are what the progress file holds, ``keys`` this run's row keys,
    ``exists`` whether there is an output to protect (default: the file exists or the progress
    file has rows). None when there is nothing to protect; ``unrecorded_ok`` lets an output with
    no record at all be continued (stage 1 continues the original tool's files).
    """
    output = Path(output)
    if exists is None:
        exists = output.exists() or bool(entries)
    if not exists:
        return None
    done = sum(1 for e in entries.values() if not e.get("error"))
    rows = (f"{done} finished rows in its progress file" if not output.exists()
            else "a finished output" if not entries else f"a finished output, {done} rows in its progress file")
    recorded = from_header(header) or from_meta(meta_path, rules)
    if recorded is None:
        keys = set(keys)
        if unrecorded_ok or (entries and any(k in keys for k in entries)):
            return None  # an earlier version's progress whose rows are this run's
        return Existing(output, rows=rows, unknown=f"has no record of the settings it was made with (no "
                                                   f"{Path(meta_path).name}, no settings in its progress file)")
    found = Existing(output, rows=rows)
    if recorded.stage and recorded.stage != stage_id:
        found.differences.append(("stage", recorded.stage, stage_id))
    found.differences += differences(recorded.settings, settings)
    found.rules_changed = differences(recorded.rules, rules)
    return found


def check(found: Existing | None, overwrite: bool) -> list[str]:
    """``UsageError`` when ``found`` conflicts and ``overwrite`` is off; else the summary's notes."""
    if found is None:
        return []
    if found.conflict and not overwrite:
        raise UsageError(found.message())
    return found.notes(overwrite)
