"""CSVs larger than SMALL_CSV are read with pyarrow when it is installed, cell for cell as pandas'
own parser reads them; smaller ones with pandas' parser."""

import sys

import pandas as pd
import pytest

from orbench.run.tables import SMALL_CSV, read_csv_text

TRICKY = ('prompt,response, is_rejected ,error\n"a, b","multi\nline",True,\nNA,null,False,"x"\n'
          '"",  spaced ,,\nN/A,#N/A,nan,None\n"say ""hi""",é ü 漢字,True,\n')
HEADER, BODY = TRICKY.split("\n", 1)
# a large file repeats the body until it is more than SMALL_CSV: pyarrow reads it
REPEATS = {"small": 1, "large": SMALL_CSV // len(BODY.encode()) + 1}


@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("sep", [",", ";"])
@pytest.mark.parametrize("columns", [None, ["prompt", " is_rejected "], lambda c: c.strip() in ("error", "prompt")])
def test_pyarrow_and_pandas_read_the_same_cells(tmp_path, monkeypatch, sep, columns, size):
    path = tmp_path / "t.csv"
    text = HEADER + "\n" + BODY * REPEATS[size]
    path.write_text(text.replace(",", sep) if sep != "," else text, encoding="utf-8")
    assert (path.stat().st_size > SMALL_CSV) == (size == "large")
    fast = read_csv_text(path, sep=sep, columns=columns)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if not installed
    plain = read_csv_text(path, sep=sep, columns=columns)
    monkeypatch.undo()  # pandas compares pyarrow-backed strings with pyarrow
    pd.testing.assert_frame_equal(fast, plain)
    assert all(isinstance(v, str) for v in fast.to_numpy().ravel()) and len(fast) == 5 * REPEATS[size]


@pytest.mark.parametrize("size", ["small", "large"])
def test_a_file_pyarrow_refuses_is_read_by_pandas(tmp_path, size):
    path = tmp_path / "short.csv"
    repeats = 1 if size == "small" else SMALL_CSV // len("x,y\n") + 1
    path.write_text("prompt,response\nonly one field\n" + "x,y\n" * repeats, encoding="utf-8")
    assert (path.stat().st_size > SMALL_CSV) == (size == "large")
    frame = read_csv_text(path)
    assert list(frame.prompt[:2]) == ["only one field", "x"] and frame.response.iloc[1] == "y"
    assert len(frame) == 1 + repeats
