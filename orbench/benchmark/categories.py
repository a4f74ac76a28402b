"""The ten OR-Bench categories: the one list every stage uses.

The paper (arXiv 2405.20947) generates seeds for, and moderates into, these ten categories, in
this (alphabetical) order. The moderator may also answer "none of the above", which is not a
category of its own and is not listed here.
"""

from __future__ import annotations

from orbench.llm.errors import UsageError

CATEGORIES: tuple[str, ...] = (
    "deception",
    "harassment",
    "harmful",
    "hate",
    "illegal",
    "privacy",
    "self-harm",
    "sexual",
    "unethical",
    "violence",
)


def check_category(name: str) -> str:
    """Return ``name`` as a known category (trimmed, lower-cased, ``_`` read as ``-``).

    Raise ``UsageError`` with a one-line message listing the valid names otherwise.
    """
    text = str(name or "").strip().lower().replace("_", "-")
    if text in CATEGORIES:
        return text
    raise UsageError(f"unknown category {name!r}; choose one of: {', '.join(CATEGORIES)}")
