"""One HTML toolkit for the analysis pages, and each rule written once in the analysis package."""

from __future__ import annotations

import math
import re
from pathlib import Path

from orbench.analysis import html_kit

ANALYSIS = Path(html_kit.__file__).parent


def test_text_is_escaped_and_missing_values_are_dashes():
    assert html_kit.esc("<b a='1'>&") == "&lt;b a=&#x27;1&#x27;&gt;&amp;"
    assert html_kit.esc(None) == html_kit.esc(math.nan) == "&ndash;"
    assert html_kit.fixed(12.345) == "12.3" and html_kit.fixed(0.12345, 3) == "0.123"
    assert html_kit.fixed(math.inf) == html_kit.fixed(None) == "&ndash;"
    assert html_kit.interval(0.25, 0.1, 0.5) == "25.0 <span class=muted>[10.0, 50.0]</span>"
    assert html_kit.interval(math.nan, 0, 1) == "&ndash;"


def test_flag_marks_explain_each_flag_on_hover():
    marks = html_kit.flag_marks("none_seen;clamped")
    assert marks == (" <span class=flag title='none seen (0 of n or n of n): the interval is the bound that count "
                     "allows'>none seen</span> <span class=flag title='the estimate fell outside [0, 1] and was "
                     "clamped'>clamped</span>")
    assert html_kit.flag_marks(["<x>"]) == " <span class=flag title='&lt;x&gt;'>&lt;x&gt;</span>"
    assert html_kit.flag_marks("") == html_kit.flag_marks(None) == html_kit.flag_marks(math.nan) == ""


def test_tables_and_script_json():
    t = html_kit.table(["a", "<i>b</i>"], [[html_kit.cell("x"), html_kit.num("1")]], row_classes=["yours"], cls="ex")
    assert t == ("<table class='ex'><thead><tr><th>a</th><th><i>b</i></th></tr></thead><tbody>"
                 "<tr class='yours'><td>x</td><td class=num>1</td></tr></tbody></table>")
    assert html_kit.table(["", ""], []) == "<table class=''><tbody></tbody></table>"
    assert html_kit.script_json({"t": "</script><b>&\u2028"}) == '{"t": "\\u003c/script\\u003e\\u003cb\\u003e\\u0026\\u2028"}'


def test_each_rule_is_written_once_in_the_analysis_package():
    """Wilson's interval only in stats.py; HTML escaping and table building only in html_kit.py."""
    wilson = re.compile(r"def \w*wilson\w*\(|z \* z|z \*\* 2|\(1 - p\)")
    escaping = re.compile(r"html\.escape|^import html$|def (_?esc|_e|_table|table|cell|num)\(|<table class=", re.M)
    for path in sorted(ANALYSIS.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        if path.name != "stats.py":
            assert not wilson.search(text), f"{path.name} has a Wilson interval of its own"
        if path.name != "html_kit.py":
            assert not escaping.search(text), f"{path.name} has HTML helpers of its own: {escaping.search(text)}"
