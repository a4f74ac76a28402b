"""Properties of the leaderboard's analysis over generated inputs (Hypothesis): ranks and adjacent tests,
names, and the set a record's result names.

A few examples each by default (conftest's profile); ``--hypothesis-profile=slow`` runs many more.
"""

from __future__ import annotations

import math
from unittest.mock import patch

import numpy as np
import pandas as pd
from hypothesis import given
from hypothesis import strategies as st
from statsmodels.stats.multitest import multipletests

from orbench.analysis.eee.read import set_of
from orbench.analysis.leaderboard import entries as ent

PROMPTS = [f"p{i}" for i in range(12)]


@st.composite
def ranked_set(draw):
    """2 to 6 entries on one set: per prompt (some missing) refusals k of n samples (1 to 3)."""
    label = draw(st.sampled_from(["hard", "toxic"]))
    out, tables = [], {}
    for i in range(draw(st.integers(2, 6))):
        keep = draw(st.lists(st.sampled_from(PROMPTS), min_size=1, max_size=12, unique=True))
        n = np.array([draw(st.integers(1, 3)) for _ in keep])
        k = np.array([draw(st.integers(0, int(m))) for m in n])
        table = pd.DataFrame({"k": k, "n": n}, index=keep)
        ident = f"e{i + 1}"
        out.append({"id": ident, "name": f"model {draw(st.integers(0, 3))} {ident}",
                    "cells": {label: {"rate": float(k.sum() / n.sum()), "judge": "keyword"}}})
        tables[ident] = {label: table}
    if draw(st.booleans()):  # an entry whose per-prompt verdicts cannot be used
        tables[out[-1]["id"]] = {label: "no per-sample file beside the record"}
    return label, out, tables


@given(ranked_set())
def test_ranks_follow_the_rates_and_the_adjacent_tests_are_holm_adjusted(case):
    label, entries, tables = case
    ent.adjacent(entries, label, tables)
    cells = sorted((e["cells"][label] | {"name": e["name"]} for e in entries), key=lambda c: c["rank"])
    assert [c["rank"] for c in cells] == list(range(1, len(entries) + 1))
    rates = [c["rate"] for c in cells]
    assert rates == (sorted(rates, reverse=True) if label == "toxic" else sorted(rates))
    tests = [c["next"] for c in cells[:-1]]
    assert "next" not in cells[-1]
    done = [t for t in tests if "p" in t]
    for t in done:
        assert 0 <= t["p"] <= t["p_holm"] <= 1 and t["differs"] == (t["p_holm"] < ent.ALPHA)
        if math.isnan(t["low"]):  # no refusal could fall on either side: nothing to compare, no interval
            assert t["p"] == 1.0 and t["a_only"] == t["b_only"] == 0
        else:
            assert t["n"] >= 1 and -1 <= t["low"] <= t["diff"] <= t["high"] <= 1
    if done:
        with patch("gc.collect"):  # statsmodels collects garbage on every call: a tenth of a second in this process
            expected = multipletests([t["p"] for t in done], method="holm")[1]
        assert all(math.isclose(t["p_holm"], x, rel_tol=1e-12) for t, x in zip(done, expected))
    for t in tests:
        if "p" not in t:
            assert t["note"].startswith("not tested: ")


@given(st.integers(1, 12), st.integers(0, 3))
def test_two_entries_with_the_same_verdicts_do_not_differ(prompts, samples):
    table = pd.DataFrame({"k": [i % (samples + 1) for i in range(prompts)], "n": [samples or 1] * prompts},
                         index=PROMPTS[:prompts])
    table["k"] = np.minimum(table["k"], table["n"])
    got = ent.pair_test(table, table.copy())
    assert got["p"] == 1.0 and got["diff"] == 0.0 and got["a_only"] == got["b_only"] == 0


@given(st.sampled_from(["or-bench-hard-1k", "or-bench-toxic", "or-bench-80k", "xstest-safe", "xstest-unsafe"]),
       st.sampled_from(["{}", "{} for scorer x", "inspect_evals/{}", "rejection_rate on {}", "{}_v2 x"]),
       st.booleans(), st.booleans())
def test_the_set_a_result_names_is_read_in_any_spelling(name, pattern, underscores, upper):
    text = pattern.format(name.replace("-", "_") if underscores else name)
    text = text.upper() if upper else text
    label = {"or-bench-hard-1k": "hard", "or-bench-toxic": "toxic", "or-bench-80k": "80k"}.get(name, name)
    # a whole set name, whatever its case and separators; a longer name (a "_v2") is another data set
    assert set_of(text) == (None if pattern == "{}_v2 x" else label)
    other = "or-bench-toxic" if label != "toxic" else "xstest-safe"
    if pattern != "{}_v2 x":
        assert set_of(text, other) is None  # two sets named: none chosen


@given(st.lists(st.sampled_from(["Be brief.", None, "You are careful."]), min_size=1, max_size=4),
       st.lists(st.sampled_from([0.0, 0.7]), min_size=1, max_size=4))
def test_entries_of_one_model_are_named_by_what_differs_and_every_name_is_unique(prompts, temperatures):
    group = []
    for system, temp in zip(prompts, temperatures):
        group.append({"model": "m", "source": "orbench", "date": "2026-01-01T00:00:00+00:00",
                      "cells": {"hard": {"judge": "keyword", "settings": {"system_prompt": system, "temperature": temp}}}})
    ent.name(group)
    names = [e["name"] for e in group]
    assert len(set(names)) == len(names)
    if len(group) == 1:
        assert names == ["m"]
    else:
        differ = [label for key, label in (("system_prompt", "system prompt"), ("temperature", "temperature"))
                  if len({str(e["cells"]["hard"]["settings"][key]) for e in group}) > 1]
        for e in group:
            assert e["name"].startswith("m (")
            assert all(f"{label}: " in e["name"] for label in differ)
