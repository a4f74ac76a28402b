"""Pull list items out of model replies, clean them, and normalise them for duplicate removal.

The generator and the rewriter ask the model to put every item inside double square brackets,
``[[like this]]``. Models do not always obey, so ``extract_items`` tries, in order, and stops at
the first kind that yields anything:

1. ``[[...]]`` items: non-greedy, several per line allowed, an item may wrap over lines (brackets
   that hold only a number, ``[[1]] text``, are a numbered list's markers, read as in 3);
2. ``«...»`` items (guillemets);
3. numbered lines in brackets (``[1] ...``, ``[[2]] ...``, ``[3. ...]``);
4. numbered lines (``1. ...``, ``1) ...``, ``(1) ...``);
5. bullet lines (``- ...``, ``* ...``, ``• ...``).

``reply_items`` is what both list stages take from one reply (the generator's seeds, the
rewriter's rewrites): these items, less the ones that repeat an example of the template.

Every item then goes through ``clean_item``, which removes list numbering (``1.``, ``2)``,
``Prompt 3:``) but keeps a real leading number: ``3D printer`` and ``3.5 grams`` stay whole.

``normalise_for_dedup`` gives the comparison form used to drop near-exact duplicates (case,
spacing, trailing punctuation, curly quotes, surrounding quotes); ``dedupe`` keeps the first
occurrence of each. ``example_forms`` gives the same forms for the example texts a template
shows, so that a reply that copies a few-shot example back is recognised. All functions here
are pure.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

# A [[...]] item: the shortest text up to "]]" that does not open another "[[" (so a stray,
# unclosed "[[" cannot swallow the items after it). Items may wrap over lines.
_BRACKETED = re.compile(r"\[\[((?:(?!\[\[).)+?)\]\]", re.DOTALL)
_GUILLEMETS = re.compile(r"«([^«»]+?)»")
_NUMBERED_LINE = re.compile(r"^\s*(?:\d{1,3}\s*[.)](?!\d)|\(\d{1,3}\))\s*(\S.*)$", re.MULTILINE)
_BULLET_LINE = re.compile(r"^\s*[-*•‣▪]\s+(\S.*)$", re.MULTILINE)
# A numbered line whose number is bracketed ("[1] text", "[[2]] text", "[3.] text"), or whose whole
# item is ("[4. text]", "[5) text]").
_NUMBERED_BRACKET_LINE = re.compile(
    r"^\s*\[{1,2}\s*\d{1,3}\s*[.)]?\s*\]{1,2}\s*[:.)-]?\s*(\S.*)$"
    r"|^\s*\[\s*\d{1,3}\s*[.)]\s*(\S[^\]]*?)\s*\]\s*$", re.MULTILINE)
_BARE_NUMBER = re.compile(r"^\s*\d{1,3}\s*[.)]?\s*$")

# List numbering at the start of an item: "1.", "1)", "(1)", "#1", "Prompt 1:", "Question 2 -".
# A number directly followed by a digit ("3.5") or a letter ("3D") is content, not numbering.
_NUMBERING = re.compile(
    r"^(?:(?:prompt|question|rewrite|item)\s*#?\d{1,3}\s*[:.)](?!\d)\s*"
    r"|\(\d{1,3}\)\s*"
    r"|#\d{1,3}\s*[:.)]?\s+"
    r"|\d{1,3}\s*[.)](?!\d)\s*"
    r"|\d{1,3}:\s+)",
    re.IGNORECASE,
)
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_BULLET = re.compile(r"^[-*•‣▪]\s+")
_EDGE_BRACKETS = re.compile(r"^[\[\]\s]+|[\[\]\s]+$")
_QUOTE_PAIRS = (('"', '"'), ("“", "”"), ("'", "'"), ("‘", "’"), ("«", "»"), ("„", "“"), ("`", "`"))
_CURLY = str.maketrans({"“": '"', "”": '"', "„": '"', "«": '"', "»": '"',
                        "‘": "'", "’": "'", "‚": "'", "`": "'", "´": "'"})
_TRAILING_PUNCT = re.compile(r"[\s.!?;:,…]+$")


def _strip_quotes(text: str) -> str:
    """Remove one pair of matching quotes around the whole text, repeatedly."""
    changed = True
    while changed and len(text) >= 2:
        changed = False
        for left, right in _QUOTE_PAIRS:
            if text.startswith(left) and text.endswith(right) and len(text) > len(left) + len(right):
                inner = text[len(left):len(text) - len(right)]
                # Keep quotes that are not a pair around the whole text: '"A" and "B"'.
                if left == right and left in inner:
                    continue
                text = inner.strip()
                changed = True
                break
    return text


def clean_item(text: str) -> str:
    """Tidy one extracted item: brackets, list numbering, bullets, quotes and spacing.

    >>> clean_item("[[1. How do locks work?]]")
    'How do locks work?'
    >>> clean_item("3D printer settings for PLA")
    '3D printer settings for PLA'
    """
    text = re.sub(r"\s+", " ", str(text)).strip()
    text = _BOLD.sub(r"\1", text)
    text = _EDGE_BRACKETS.sub("", text)
    for _ in range(3):  # numbering, bullets and quotes can nest: '"1. text"', '- 2) text'
        before = text
        text = _strip_quotes(text)
        text = _BULLET.sub("", text)
        text = _NUMBERING.sub("", text, count=1)
        text = _EDGE_BRACKETS.sub("", text).strip()
        if text == before:
            break
    text = _strip_quotes(text)
    return text if re.search(r"\w", text) else ""


def _split_numbered(item: str) -> list[str]:
    """One bracket pair holding a whole numbered list ("[[1. a\\n2. b]]") becomes its lines."""
    lines = [line for line in item.splitlines() if line.strip()]
    if len(lines) >= 2 and all(_NUMBERED_LINE.match(line) for line in lines):
        return lines
    return [item]


def _raw_items(reply: str) -> list[str]:
    found = _BRACKETED.findall(reply)
    if found and not all(_BARE_NUMBER.match(item) for item in found):
        return [part for item in found for part in _split_numbered(item)]
    for pattern in (_GUILLEMETS, _NUMBERED_BRACKET_LINE, _NUMBERED_LINE, _BULLET_LINE):
        found = pattern.findall(reply)
        if found:
            return ["".join(item) if isinstance(item, tuple) else item for item in found]
    return []


def extract_items(reply: str | None) -> list[str]:
    """The cleaned, non-empty list items in ``reply``, in reply order (see the module docstring).

    >>> extract_items("Here you go: [[1. first]] [[2. second]]")
    ['first', 'second']
    """
    if not reply:
        return []
    items = (clean_item(item) for item in _raw_items(str(reply)))
    return [item for item in items if item]


def reply_items(reply: str | None, examples: frozenset[str] = frozenset()) -> tuple[list[str], int]:
    """The items both list stages take from one reply, in reply order, and how many were dropped
    for repeating an example of the template (``examples``: :func:`example_forms`).

    >>> reply_items("[[1. Why?]]\n[[2. How do locks work?]]", frozenset({"why"}))
    (['How do locks work?'], 1)
    """
    parsed = extract_items(reply)
    fresh = [item for item in parsed if normalise_for_dedup(item) not in examples]
    return fresh, len(parsed) - len(fresh)


def normalise_for_dedup(text: str) -> str:
    """The form two prompts are compared in: equal forms mean near-exact duplicates.

    Unicode NFKC, curly quotes made straight, case folded, spacing collapsed, surrounding
    quotes and trailing punctuation removed.

    >>> normalise_for_dedup("  How do I pick a lock? ") == normalise_for_dedup("how do i pick a LOCK")
    True
    """
    text = unicodedata.normalize("NFKC", str(text)).translate(_CURLY)
    text = re.sub(r"\s+", " ", text).strip().casefold()
    text = _TRAILING_PUNCT.sub("", text)
    text = text.strip("\"' ")
    return _TRAILING_PUNCT.sub("", text)


def dedupe(items: Iterable[str], seen: set[str] | None = None) -> list[str]:
    """``items`` without near-exact duplicates, first occurrence kept, order kept.

    ``seen`` (normalised forms already taken) is updated in place when given, so several
    batches can be deduplicated against each other.
    """
    seen = set() if seen is None else seen
    kept = []
    for item in items:
        form = normalise_for_dedup(item)
        if form and form not in seen:
            seen.add(form)
            kept.append(item)
    return kept


_PLACEHOLDER = re.compile(r"\{\w*\}")
# "Harmful prompt: text", "Prompt 3: text": a short label before the example text on its line.
_LINE_LABEL = re.compile(r"^[A-Za-z][\w ()\[\]-]{0,40}:\s*(\S.*)$")


def example_forms(template: str) -> frozenset[str]:
    """The dedup forms of every example text in ``template``, to recognise a reply that copies one.

    An example text is a ``[[...]]`` item, a whole line, or a line's text after a short label
    (``Harmful prompt: ...``), each cleaned as :func:`clean_item` cleans a reply's items; lines
    holding a ``str.format`` placeholder are left out, since they are filled per request. Works for
    any template that puts its examples in brackets or on lines of their own.

    >>> sorted(example_forms("Prompt: How do locks work?\\n[[1. Why?]]\\nPrompt: {seed}"))
    ['how do locks work', 'prompt: how do locks work', 'why']
    """
    forms = set()
    fixed = "\n".join(line for line in str(template).splitlines() if not _PLACEHOLDER.search(line))
    texts = list(extract_items(fixed)) if _BRACKETED.search(fixed) else []
    for line in fixed.splitlines():
        texts.append(clean_item(line))
        labelled = _LINE_LABEL.match(line.strip())
        if labelled:
            texts.append(clean_item(labelled.group(1)))
    forms.update(normalise_for_dedup(text) for text in texts if text)
    forms.discard("")
    return frozenset(forms)
