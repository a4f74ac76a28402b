"""``row_dicts``: the report's fast ``DataFrame.to_dict("records")``, the same values and types as pandas'."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from orbench.run.tables import row_dicts


def same(a, b) -> bool:
    return type(a) is type(b) and (a is b or a == b or (a != a and b != b))


@pytest.mark.parametrize("rows", [3, 0])
def test_row_dicts_equal_pandas_to_dict_records_in_value_and_type(rows):
    frame = pd.DataFrame({
        "int": [1, 2, 3], "float": [1.5, np.nan, 2.0], "bool": [True, False, True], "str": ["a", None, "c"],
        "Int64": pd.array([1, None, 3], dtype="Int64"), "boolean": pd.array([True, None, False], dtype="boolean"),
        "Float64": pd.array([1.5, None, 2.0], dtype="Float64"),
        "string[python]": pd.array(["x", None, "z"], dtype="string[python]"),
        "string[pyarrow]": pd.array(["x", None, "z"], dtype="string[pyarrow]"),
        "datetime": pd.to_datetime(["2024-01-01", None, "2024-01-03"]), "category": pd.Categorical(["u", "v", None]),
        "object": [np.int64(3), "x", None], "containers": [[1], {"a": 1}, (2,)],
    }).iloc[:rows]
    expected, got = frame.to_dict("records"), row_dicts(frame)
    assert len(got) == len(expected) == rows
    for want, row in zip(expected, got):
        assert list(row) == list(want)
        assert all(same(want[k], row[k]) for k in want), {k: (want[k], row[k]) for k in want if not same(want[k], row[k])}
