"""Every file the project rewrites is replaced whole or not at all: a write that fails midway
leaves the original exactly as it was and no temporary file behind.

The fault is real data, not a mock: a lone surrogate (``\\ud800``) far into the text cannot be
encoded as UTF-8, so the write raises after the first buffers reached the disk. A writer that
rewrote the file in place would have truncated it by then.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from orbench.llm.batch import BatchState
from orbench.run.stage import ProgressLog
from orbench.run.tables import write_csv_atomic, write_text_atomic
from orbench.scoring import judge_cards

ORIGINAL = "the original, finished file\n" * 50
POISON = "\ud800"
LONG = "x" * 200_000  # several write buffers before the fault


def original(path):
    path.write_text(ORIGINAL, encoding="utf-8")
    return path.read_bytes()


def left_alone(path, before: bytes) -> None:
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temporary file left


def test_csv_output_fails_midway_original_intact(tmp_path):
    path = tmp_path / "out.csv"
    before = original(path)
    frame = pd.DataFrame({"prompt": pd.Series([LONG] * 5 + [f"bad {POISON}"], dtype=object)})
    with pytest.raises(UnicodeEncodeError):
        write_csv_atomic(frame, path)
    left_alone(path, before)
    write_csv_atomic(frame.head(2), path)  # a write that succeeds replaces it whole
    assert pd.read_csv(path).prompt.tolist() == [LONG, LONG]


def test_meta_and_text_files_fail_midway_original_intact(tmp_path):
    path = tmp_path / "out.csv.meta.json"
    before = original(path)
    with pytest.raises(UnicodeEncodeError):
        write_text_atomic(json.dumps({"notes": LONG}, ensure_ascii=False)[:-1] + POISON + "}", path)
    left_alone(path, before)


def test_progress_file_rewrite_fails_midway_original_intact(tmp_path):
    path = tmp_path / "out.csv.progress.jsonl"
    before = original(path)
    log = ProgressLog(path)
    entries = [{"key": f"k{i}", "row": {"response": LONG}} for i in range(5)]
    entries.append({"key": "bad", "row": {"response": POISON}})
    with pytest.raises(UnicodeEncodeError):
        log.rewrite(entries, header={"settings": {"model": "mock/m"}})
    left_alone(path, before)


def test_judge_card_fails_midway_original_intact(tmp_path):
    path = tmp_path / "cards" / "judge.json"
    path.parent.mkdir()
    before = original(path)
    with pytest.raises(UnicodeEncodeError):
        judge_cards._write(path, LONG + POISON)
    assert path.read_bytes() == before


def test_batch_state_append_fails_midway_earlier_records_intact(tmp_path):
    path = tmp_path / "out.csv.batch.jsonl"
    state = BatchState(path)
    state.write({"ref": "a", "status": "submitted"})
    before = path.read_bytes()
    with pytest.raises(UnicodeEncodeError):
        state.write({"ref": "b", "note": LONG + POISON})
    assert path.read_bytes().startswith(before)
    assert BatchState(path).records["a"] == {"ref": "a", "status": "submitted"}
