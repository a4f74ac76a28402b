"""The HTML pieces every page of the analysis builds from: escaping, numbers, cells, tables, images,
an interval's flag marks and JSON safe inside a ``<script>`` element.

report.html (:mod:`orbench.analysis.report.html`, with the comparison's and the audit's sections)
and the audit's labelling page (:mod:`orbench.analysis.audit.page`) use these, so text from the
inputs is escaped one way everywhere. Cells passed to :func:`table` are HTML already: escape text
with :func:`esc` (or wrap it with :func:`cell` / :func:`num` after escaping).
"""

from __future__ import annotations

import base64
import html
import json
import math
from pathlib import Path

from orbench.analysis.stats import FLAGS

DASH = "&ndash;"  # a missing value


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def esc(value) -> str:
    """Any value as escaped HTML text; None and NaN as an en dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return DASH
    return html.escape(str(value), quote=True)


def fixed(value, digits: int = 1) -> str:
    """A number with ``digits`` decimals; missing or not finite as an en dash."""
    return DASH if _missing(value) else f"{value:.{digits}f}"


def interval(rate, low, high) -> str:
    """``rate [low, high]`` in percent from fractions; a missing rate as an en dash."""
    if _missing(rate):
        return DASH
    return f"{100 * rate:.1f} <span class=muted>[{fixed(100 * low)}, {fixed(100 * high)}]</span>"


def flag_marks(flags) -> str:
    """Marks for an interval's flags (``a;b`` or a list), each explained on hover by
    :data:`orbench.analysis.stats.FLAGS` (the ``.flag`` style); '' when there are none."""
    if flags is None or (isinstance(flags, float) and math.isnan(flags)):
        return ""
    names = [f for f in (flags.split(";") if isinstance(flags, str) else flags) if f]
    return "".join(f" <span class=flag title='{esc(FLAGS.get(f, f))}'>{esc(f.replace('_', ' '))}</span>"
                   for f in names)


def num(text: str) -> str:
    """A right-aligned numeric cell (``text`` is HTML)."""
    return f"<td class=num>{text}</td>"


def cell(text: str) -> str:
    """A cell (``text`` is HTML)."""
    return f"<td>{text}</td>"


def table(head: list[str], rows: list[list[str]], row_classes: list[str] | None = None, cls: str = "") -> str:
    """An HTML table of cells made with :func:`cell` / :func:`num` (or raw ``<td>``s); the
    head's texts are HTML too. No head row when every head text is empty."""
    out = [f"<table class='{cls}'>"]
    if any(head):
        out.append("<thead><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead>")
    out.append("<tbody>")
    for i, row in enumerate(rows):
        rc = f" class='{row_classes[i]}'" if row_classes and row_classes[i] else ""
        out.append(f"<tr{rc}>" + "".join(row) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def table_of(head: list[str], rows: list[list[str]], cls: str = "") -> str:
    """:func:`table` of rows given as cell contents (HTML), each put in a plain cell."""
    return table(head, [[cell(c) for c in row] for row in rows], cls=cls)


def image(path: Path | str | None, alt: str) -> str:
    """An ``<img>`` with the PNG inlined as a base64 data URI ('' when there is no image)."""
    if path is None or not Path(path).exists():
        return ""
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{data}">'


_JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def script_json(value) -> str:
    """``value`` as JSON safe inside a ``<script>`` element (no ``<``, ``>`` or ``&`` left, nor the
    two JavaScript line separators), so no text in it can end the element."""
    text = json.dumps(value, ensure_ascii=False)
    return "".join(_JSON_ESCAPES.get(ch, ch) for ch in text)
