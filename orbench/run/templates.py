"""User-supplied prompt templates (``--template FILE``) checked before any request.

A template file holds the whole prompt with named placeholders in braces, for example
``{prompt}`` and ``{response}`` for the judge. Literal braces are written doubled (``{{`` and
``}}``), as in Python's ``str.format``. A template that lacks a placeholder the stage fills, or
names one it does not know, stops the run at start (exit 2) with one line naming the file.
The template's SHA-256 is part of every row's key and of the meta file, so changing the text
redoes the rows it affects.
"""

from __future__ import annotations

import string
from pathlib import Path

from orbench.llm.errors import UsageError


def placeholders(text: str) -> set[str]:
    """The named fields of a ``str.format`` template; ``ValueError`` for unbalanced braces."""
    names = set()
    for _, field, _, _ in string.Formatter().parse(text):
        if field is not None:
            names.add(field)
    return names


def check_template(text: str, required: set[str], where: str, optional: set[str] = frozenset()) -> str:
    """``text`` if its placeholders are exactly ``required`` (plus any of ``optional``), else
    ``UsageError`` naming ``where``."""
    try:
        found = placeholders(text)
    except ValueError as exc:
        raise UsageError(f"{where}: {exc} (write a literal brace as {{{{ or }}}})") from None
    if "" in found or any(not name.isidentifier() for name in found):
        raise UsageError(f"{where}: placeholders must be names such as {{prompt}}; found "
                         f"{sorted(repr('{' + n + '}') for n in found)}")
    missing = sorted(required - found)
    unknown = sorted(found - required - set(optional))
    if missing:
        raise UsageError(f"{where} has no placeholder {', '.join('{' + m + '}' for m in missing)} "
                         f"(this stage fills: {', '.join('{' + n + '}' for n in sorted(required | set(optional)))})")
    if unknown:
        raise UsageError(f"{where} has unknown placeholder {', '.join('{' + u + '}' for u in unknown)} "
                         f"(this stage fills: {', '.join('{' + n + '}' for n in sorted(required | set(optional)))}; "
                         f"write a literal brace as {{{{ or }}}})")
    return text


def load_template(path: str | None, default: str, required: set[str],
                  optional: set[str] = frozenset()) -> tuple[str, str]:
    """The template to use and where it came from: ``path``'s text (checked) or ``default``."""
    if not path:
        return default, "built-in"
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"--template file not found: {path}")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"--template file {path} is not UTF-8 text") from None
    except OSError as exc:
        raise UsageError(f"cannot read --template file {path}: {exc.strerror or exc}") from None
    if not text.strip():
        raise UsageError(f"--template file {path} is empty")
    return check_template(text, required, f"--template file {path}", optional), str(file)


def add_template_flag(parser, fills: str) -> None:
    """The ``--template FILE`` flag, with help naming the placeholders the stage fills."""
    parser.add_argument("--template", default=None, metavar="FILE",
                        help=f"use the prompt in FILE instead of the built-in template; it must contain "
                             f"{fills} and no other placeholder (write literal braces doubled: {{{{ }}}}); "
                             f"its SHA-256 goes into the row keys and the .meta.json")
