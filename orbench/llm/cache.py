"""The response cache: identical requests are answered from SQLite instead of being paid for twice.

The key is a SHA-256 over everything that changes a model's output (provider, base URL or, for a
local model, the identity of its weights file, model,
system prompt, messages, temperature, max tokens, and the sample index for calls at temperature
above 0) and nothing that does not (timeouts, retries, concurrency). Keys and stored completions
never contain API keys.

Location: ``$ORBENCH_CACHE_DIR/cache.sqlite``, else ``$XDG_CACHE_HOME/orbench/llm/cache.sqlite``, else
``~/.cache/orbench/llm/cache.sqlite``. Several processes may share one file (WAL mode, busy timeout).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from pathlib import Path

from orbench.llm.errors import UsageError


def default_cache_path() -> Path:
    """Where the cache lives unless told otherwise."""
    root = os.environ.get("ORBENCH_CACHE_DIR")
    if root:
        return Path(root).expanduser() / "cache.sqlite"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "orbench" / "cache.sqlite"


def cache_key(fields: dict) -> str:
    """SHA-256 of the canonical JSON of ``fields`` (the request parts that change the output)."""
    blob = json.dumps(fields, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class Cache:
    """A small key -> JSON store in SQLite. Used from one event-loop thread per process."""

    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path else default_cache_path()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.exists() and not self.path.is_file():
                raise UsageError(f"the cache {self.path} is not a file; remove it or set ORBENCH_CACHE_DIR")
            self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None,
                                       check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS completions ("
                " key TEXT PRIMARY KEY, value TEXT NOT NULL,"
                " created REAL DEFAULT (julianday('now')))"
            )
            self._db.execute("SELECT key, value FROM completions LIMIT 1").fetchall()
        except (OSError, sqlite3.Error) as exc:
            raise self._unusable(exc) from None

    def _unusable(self, exc: BaseException) -> UsageError:
        why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        return UsageError(f"the response cache {self.path} cannot be used ({why}); delete it, set "
                          f"ORBENCH_CACHE_DIR to another folder, or pass --no_cache")

    def get(self, key: str) -> dict | None:
        """The stored completion fields for ``key``, or ``None``."""
        try:
            row = self._db.execute("SELECT value FROM completions WHERE key = ?", (key,)).fetchone()
        except sqlite3.Error as exc:
            raise self._unusable(exc) from None
        if not row:
            return None
        try:
            value = json.loads(row[0])
        except ValueError:
            return None  # an unreadable entry is a miss, and the next put replaces it
        return value if isinstance(value, dict) else None

    def put(self, key: str, value: dict) -> None:
        """Store ``value`` under ``key`` (last write wins)."""
        try:
            self._db.execute(
                "INSERT OR REPLACE INTO completions (key, value) VALUES (?, ?)",
                (key, json.dumps(value, ensure_ascii=False)),
            )
        except sqlite3.Error as exc:
            raise self._unusable(exc) from None

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM completions").fetchone()[0]

    def close(self) -> None:
        self._db.close()
