"""CSVs are read with pyarrow when it is installed, cell for cell as pandas' own parser reads them."""

import sys

import pandas as pd
import pytest

from orbench.run.tables import read_csv_text

TRICKY = ('prompt,response, is_rejected ,error\n"a, b","multi\nline",True,\nNA,null,False,"x"\n'
          '"",  spaced ,,\nN/A,#N/A,nan,None\n"say ""hi""",é ü 漢字,True,\n')


@pytest.mark.parametrize("sep", [",", ";"])
@pytest.mark.parametrize("columns", [None, ["prompt", " is_rejected "], lambda c: c.strip() in ("error", "prompt")])
def test_pyarrow_and_pandas_read_the_same_cells(tmp_path, monkeypatch, sep, columns):
    path = tmp_path / "t.csv"
    path.write_text(TRICKY.replace(",", sep) if sep != "," else TRICKY, encoding="utf-8")
    fast = read_csv_text(path, sep=sep, columns=columns)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if not installed
    plain = read_csv_text(path, sep=sep, columns=columns)
    pd.testing.assert_frame_equal(fast, plain)
    assert all(isinstance(v, str) for v in fast.to_numpy().ravel()) and len(fast) == 5


def test_a_file_pyarrow_refuses_is_read_by_pandas(tmp_path):
    path = tmp_path / "short.csv"
    path.write_text("prompt,response\nonly one field\nx,y\n", encoding="utf-8")
    frame = read_csv_text(path)
    assert list(frame.prompt) == ["only one field", "x"] and frame.response.iloc[1] == "y"
