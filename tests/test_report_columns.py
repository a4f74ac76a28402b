"""The report at columnar speed (issue 29, item 6): replies are read as bytes and only the few shown
are decoded; multi-line replies stay on the columnar path; pandas' parser gives the same report;
the helpers behind the speed (the examples' selection, the groups' folding) against plain ones."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from orbench.analysis.report import build as report
from orbench.analysis.report import columns
from orbench.analysis.report.inputs import first_per_cell, group_ids

pa = pytest.importorskip("pyarrow")

REPLY = "I'm sorry, but I can't help with that.\n\nHere is why, over two paragraphs:\n\"quoted\", and é ü 漢字."


def _inputs(tmp_path):
    """A judge file (with keyword copies) and an alignment file, replies over several lines."""
    n = 40
    judged = pd.DataFrame({"prompt": [f"p{i}, with a comma" for i in range(n)], "category": ["hate", "privacy"] * (n // 2),
                           "model": "prov/m", "response": [REPLY if i % 3 == 0 else f"Sure ({i}).\nStep 1." for i in range(n)],
                           "answer_category": ["direct_refusal" if i % 3 == 0 else "direct_answer" for i in range(n)],
                           "judge_model": "openai/j", "is_rejected": [str(i % 3 == 0) for i in range(n)],
                           "keyword_is_rejected": [str(i % 4 == 0) for i in range(n)], "finish_reason": "stop",
                           "error": ""})
    judged.to_csv(tmp_path / "m_hard_judged.csv", index=False)
    aligned = judged.drop(columns=["answer_category", "judge_model", "keyword_is_rejected"]).assign(
        model="prov/k", finish_reason=["length" if i < 5 else "stop" for i in range(n)])
    aligned.to_csv(tmp_path / "k_toxic_alignment.csv", index=False)
    return [str(tmp_path / "m_hard_judged.csv"), str(tmp_path / "k_toxic_alignment.csv")]


def test_replies_are_read_as_bytes_and_only_the_shown_ones_decoded(tmp_path):
    specs = _inputs(tmp_path)
    table = columns.read_results(specs[0])
    assert isinstance(table, pa.Table)  # line breaks inside quoted replies stay on the columnar path
    assert table.schema.field("response").type == pa.binary() and table.schema.field("prompt").type == pa.string()
    assert table.num_rows == 40 and table["response"][0].as_py() == REPLY.encode("utf-8")
    assert columns.texts(table["response"], [0, 1]) == [REPLY, "Sure (1).\nStep 1."]
    # a prompt hashes alike as text or bytes, from Arrow or pandas
    frame = pd.read_csv(specs[0], dtype=str, keep_default_na=False)
    assert np.array_equal(columns.prompt_hash(table["prompt"]), columns.prompt_hash(frame["prompt"]))
    rep = report.build_report(specs, tmp_path / "out", reference=False, examples=2, figures=False)
    shown = rep.examples[rep.examples["response"] == REPLY]
    assert len(shown) >= 2 and set(shown["rejected"]) == {True}
    assert "here is why, over two paragraphs:\n&quot;quoted&quot;, and é ü 漢字." in \
        rep.outputs["html"].read_text().lower()


def test_pandas_parser_gives_the_same_report(tmp_path, monkeypatch):
    specs = _inputs(tmp_path)
    fast = report.build_report(specs, tmp_path / "fast", reference=False, examples=2, figures=False)
    # as without pyarrow, or for a file it refuses: pandas' parser reads every file (a DataFrame of text)
    monkeypatch.setattr(columns, "read_csv_arrow", lambda *args, **kwargs: None)
    assert isinstance(columns.read_results(specs[0]), pd.DataFrame)
    plain = report.build_report(specs, tmp_path / "plain", reference=False, examples=2, figures=False)
    for name in ("summary.csv", "categories.csv", "leaderboard.csv"):
        assert (tmp_path / "fast" / name).read_text() == (tmp_path / "plain" / name).read_text()
    pd.testing.assert_frame_equal(fast.examples.reset_index(drop=True), plain.examples.reset_index(drop=True))
    figures = [{k: v for k, v in json.loads((tmp_path / d / "report.json").read_text()).items() if k != "inputs"}
               for d in ("fast", "plain")]
    assert figures[0] == figures[1]
    assert fast.summary.set_index("model").loc["prov/k", "keyword_truncated"] == 5


def test_first_per_cell_is_a_sort_by_cell_then_key():
    rng = np.random.default_rng(7)
    for trial in range(100):
        m = int(rng.integers(0, 120))
        key = rng.integers(0, 6 if trial % 2 else 2**63, m, dtype=np.uint64)  # repeated keys half the time
        cell = rng.integers(0, 5, m).astype(np.int64) * 1_000_003
        n = int(rng.integers(1, 4))
        ranked = sorted(range(m), key=lambda i: (cell[i], key[i], i))  # written out: cell, key, position
        taken, expected = {}, []
        for i in ranked:
            if taken.get(cell[i], 0) < n:
                taken[cell[i]] = taken.get(cell[i], 0) + 1
                expected.append(i)
        assert first_per_cell(cell, key, n).tolist() == expected


def test_group_ids_decode_codes_that_do_not_start_at_zero():
    data = pd.DataFrame({"a": np.array([3, 3, 4, 5, 3], dtype=np.int16), "b": np.array([2, 2, 2, 7, 9], dtype=np.int8)})
    gid, groups = group_ids(data, ["a", "b"])
    assert gid.tolist() == [0, 0, 1, 2, 3]
    assert groups.to_dict("list") == {"a": [3, 4, 5, 3], "b": [2, 2, 7, 9]}
    assert groups.dtypes.tolist() == [np.int16, np.int8]
