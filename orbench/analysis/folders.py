"""Output folders of the analysis commands (report, audit): checked before any work, so a folder
that cannot be written is one line and exit 2, as the stages do, not a traceback at the end."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from orbench.llm.errors import UsageError


def check_writable(folder: str | os.PathLike, what: str = "--output_dir") -> None:
    """``UsageError`` naming ``folder`` when files cannot be written into it (or into the folder it
    would be created in): a read-only file system, no permission, a file where a folder should be.
    Nothing is created: a temporary file is written and removed in the nearest existing folder."""
    path = Path(folder)
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{what} {folder}: {existing} is a file, not a folder")
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".orbench-write-check-"):
            pass
    except OSError as exc:
        raise UsageError(f"{what} {folder}: cannot write to {existing}: {exc.strerror or exc}") from None


def write_error(exc: OSError, folder: str | os.PathLike) -> str:
    """The one line for a write that failed all the same (the folder changed while the command ran)."""
    where = exc.filename or folder
    return f"error: cannot write {where}: {exc.strerror or exc}"
