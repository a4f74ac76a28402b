"""``--shard i/N`` and ``orbench-merge``: N shard runs merged are the output of one run, row for row.

Stage scripts run in process against the fake provider (real SDK clients, real files); the merge
is ``orbench.run.merge.main``, the console script's function.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import read

from orbench.run import merge, shards

CHECK = "alignment_checker/check_alignment.py"
REW = "rewritter/rewrite.py"
GEN = "toxic_prompt_generator/generate_seeds.py"
PROMPTS = [f"How do I fix problem {i}?" for i in range(24)]


def _input(path, prompts=PROMPTS, errors=None):
    frame = pd.DataFrame({"prompt": prompts, "category": ["privacy"] * len(prompts)})
    if errors is not None:
        frame["error"] = errors
    frame.to_csv(path, index=False)
    return path


def _merge(*args, capsys=None):
    code = merge.main([str(a) for a in args])
    out = capsys.readouterr() if capsys is not None else None
    return code, out


def _shard_outputs(stem: str, count: int) -> list[str]:
    return [f"{stem}.shard-{i}-of-{count}.csv" for i in range(1, count + 1)]


def test_three_shards_merged_equal_one_run(fake, env, script, tmp_path, capsys, monkeypatch):
    fake.add_rule(match="problem 1?", text="I'm sorry, but I can't help with that.")
    fake.add_rule(text="Sure: here is how.")
    prompts = PROMPTS + [PROMPTS[3]]  # a prompt met twice is asked once, in one shard
    errors = [""] * len(prompts)
    errors[5] = "rewrite: HTTP 500 upstream"  # passed through untouched by its shard and the merge
    _input(tmp_path / "in.csv", prompts, errors)
    for i in (1, 2, 3):
        res = script(CHECK, "--model", "openai/gpt-4o", "--input_file", "in.csv", "--shard", f"{i}/3", env=env)
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip().endswith(f"in_openai_gpt-4o_alignment.shard-{i}-of-3.csv")
    sent = fake.count()
    outputs = _shard_outputs("in_openai_gpt-4o_alignment", 3)
    parts = [read(tmp_path / o) for o in outputs]
    # a partition of the input: every row in exactly one shard, the repeated prompt's two rows together
    assert sorted(p for part in parts for p in part["prompt"]) == sorted(prompts)
    assert sum(len(p) for p in parts) == len(prompts)
    assert all(len(p) for p in parts)
    assert [sum(p["prompt"] == PROMPTS[3]) for p in parts].count(2) == 1
    assert sent == len(PROMPTS) - 1  # distinct prompts, less the upstream error's: each asked once

    code, out = _merge(*outputs, capsys=capsys)
    assert code == 0, out.err
    assert out.out.strip() == "in_openai_gpt-4o_alignment.csv"
    assert fake.count() == sent  # the merge sends nothing

    res = script(CHECK, "--model", "openai/gpt-4o", "--input_file", "in.csv", "--output_file", "one.csv",
                 "--no_cache", env=env)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "in_openai_gpt-4o_alignment.csv").read_text() == (tmp_path / "one.csv").read_text()
    merged = read(tmp_path / "in_openai_gpt-4o_alignment.csv")
    assert merged["prompt"].tolist() == prompts and merged["error"][5] == "rewrite: HTTP 500 upstream"

    # from another folder: the shards' relative input path is read from their folder
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.chdir(other)
    code, out = _merge(*[f"../{o}" for o in outputs], "--output_file", "again.csv", capsys=capsys)
    assert code == 0, out.err
    assert (other / "again.csv").read_text() == (tmp_path / "one.csv").read_text()
    monkeypatch.chdir(tmp_path)

    meta = json.loads((tmp_path / "in_openai_gpt-4o_alignment.csv.meta.json").read_text())
    assert [(s["output"], s["index"], s["count"]) for s in meta["shards"]] == [(o, i, 3) for i, o in
                                                                               enumerate(outputs, 1)]
    assert sum(s["rows"] for s in meta["shards"]) == len(prompts)
    assert meta["counts"]["rows"] == len(prompts) and meta["counts"]["errors"] == 0
    assert meta["settings"] == json.loads((tmp_path / "one.csv.meta.json").read_text())["settings"]
    shard_meta = json.loads((tmp_path / f"{outputs[0]}.meta.json").read_text())
    assert shard_meta["shard"]["index"] == 1 and shard_meta["shard"]["of_rows"] == len(prompts)
    assert "shard" not in shard_meta["settings"]


def test_rewrite_shards_merged_keep_the_whole_file_steps(fake, env, script, tmp_path, capsys):
    """The rewriter drops a rewrite met earlier in the file; two seeds in different shards give the same
    one, so only a merge that runs the stage's end step over the whole file equals one run."""
    seeds = [f"SEED-{i} how to do harm {i}" for i in range(8)]
    for i in range(len(seeds)):
        items = [f"[[{k}. {'Shared rewrite everyone gives?' if k == 1 else f'Seed {i} rewrite {k}?'}]]"
                 for k in range(1, 6)]
        fake.add_rule(match=f"SEED-{i} ", text="\n".join(items))
    _input(tmp_path / "seeds.csv", seeds)
    for i in (1, 2):
        res = script(REW, "--toxic_seed_path", "seeds.csv", "--shard", f"{i}/2", env=env)
        assert res.returncode == 0, res.stderr
    outputs = _shard_outputs("seeds_rewrite", 2)
    shared_in_shards = sum((read(tmp_path / o)["prompt"] == "Shared rewrite everyone gives?").sum() for o in outputs)
    code, out = _merge(*outputs, capsys=capsys)
    assert code == 0, out.err
    res = script(REW, "--toxic_seed_path", "seeds.csv", "--output_file", "one.csv", env=env)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "seeds_rewrite.csv").read_text() == (tmp_path / "one.csv").read_text()
    assert shared_in_shards == 2  # each shard kept its own copy; the merged file keeps one
    assert (read(tmp_path / "seeds_rewrite.csv")["prompt"] == "Shared rewrite everyone gives?").sum() == 1


def test_a_shard_is_stable_under_limit_and_resume(fake, env, script, tmp_path):
    fake.add_rule(text="Sure.")
    _input(tmp_path / "in.csv")
    trial = script(CHECK, "--model", "openai/gpt-4o", "--input_file", "in.csv", "--shard", "2/3", "--limit", "2",
                   env=env)
    assert trial.returncode == 0, trial.stderr
    first = read(tmp_path / "in_openai_gpt-4o_alignment.shard-2-of-3.csv")["prompt"].tolist()
    assert len(first) == 2 and fake.count() == 2
    whole = script(CHECK, "--model", "openai/gpt-4o", "--input_file", "in.csv", "--shard", "2/3", env=env)
    assert whole.returncode == 0, whole.stderr
    rows = read(tmp_path / "in_openai_gpt-4o_alignment.shard-2-of-3.csv")["prompt"].tolist()
    assert rows[:2] == first  # the trial's rows are the shard's first rows
    assert fake.count() == len(rows)  # the two done before were resumed, not asked again
    assert "2 resumed" in whole.stderr
    # the same input, shuffled: the shard holds the same prompts (chosen by the row, not its place)
    _input(tmp_path / "shuffled.csv", PROMPTS[::-1])
    again = script(CHECK, "--model", "openai/gpt-4o", "--input_file", "shuffled.csv", "--shard", "2/3", env=env)
    assert again.returncode == 0, again.stderr
    assert sorted(read(tmp_path / "shuffled_openai_gpt-4o_alignment.shard-2-of-3.csv")["prompt"]) == sorted(rows)


def _three_shards(script, env, *extra):
    for i in (1, 2, 3):
        res = script(CHECK, "--model", "openai/gpt-4o", "--input_file", "in.csv", "--shard", f"{i}/3", *extra,
                     env=env)
        assert res.returncode in (0, 1), res.stderr
    return _shard_outputs("in_openai_gpt-4o_alignment", 3)


def test_merge_refuses_shards_that_are_not_one_run(fake, env, script, tmp_path, capsys):
    fake.add_rule(text="Sure.")
    _input(tmp_path / "in.csv")
    outputs = _three_shards(script, env)

    _input(tmp_path / "in.csv", PROMPTS + ["one more"])  # the input changed after the shards ran
    code, out = _merge(*outputs, capsys=capsys)
    assert code == 2 and f"the input {tmp_path / 'in.csv'} has changed since the shards read it" in out.err
    _input(tmp_path / "in.csv")

    code, out = _merge(outputs[0], outputs[2], capsys=capsys)
    assert code == 2 and out.err.strip() == "error: shard 2 of 3 missing: give every shard's output (have 1/3, 3/3)"
    code, out = _merge(outputs[0], outputs[0], outputs[1], capsys=capsys)
    assert code == 2 and f"shard 1/3 given twice: {outputs[0]} and {outputs[0]}" in out.err

    res = script(CHECK, "--model", "openai/gpt-4o", "--input_file", "in.csv", "--shard", "3/3", "--temperature", "0.5",
                 "--output_file", "hot.csv", env=env)
    assert res.returncode == 0, res.stderr
    code, out = _merge(outputs[0], outputs[1], "hot.csv", capsys=capsys)
    assert code == 2
    assert out.err.strip() == (f"error: shards of different runs: {outputs[0]} and hot.csv differ in "
                               f"settings 'temperature': 0.0 vs 0.5")

    res = script(CHECK, "--model", "openai/gpt-4o", "--input_file", "in.csv", "--shard", "1/2", env=env)
    code, out = _merge(outputs[0], "in_openai_gpt-4o_alignment.shard-1-of-2.csv", outputs[2], capsys=capsys)
    assert code == 2 and "is one of 3 shards" in out.err and "one of 2" in out.err

    progress = tmp_path / f"{outputs[2]}.progress.jsonl"
    progress.rename(tmp_path / "elsewhere.jsonl")  # copied without it
    code, out = _merge(*outputs, capsys=capsys)
    assert code == 2 and f"shard output {outputs[2]} has no progress file {progress.name} beside it" in out.err
    (tmp_path / "elsewhere.jsonl").rename(progress)

    (tmp_path / f"{outputs[1]}.meta.json").unlink()  # as after a run that was stopped
    code, out = _merge(*outputs, capsys=capsys)
    assert code == 2 and f"shard output {outputs[1]} has no meta file" in out.err and "has not finished" in out.err
    assert not (tmp_path / "in_openai_gpt-4o_alignment.csv").exists()  # nothing written by a refused merge

    code, out = _merge("one.csv", capsys=capsys)
    assert code == 2 and out.err.strip() == "error: shard output one.csv does not exist"


def test_a_row_failed_in_its_shard_stays_failed_and_exit_1(fake, env, script, tmp_path, capsys):
    fake.add_rule(match="problem 7?", status=400, error_message="bad prompt")
    fake.add_rule(text="Sure.")
    _input(tmp_path / "in.csv")
    outputs = _three_shards(script, env)
    failed = [i for i, o in enumerate(outputs, 1) if PROMPTS[7] in set(read(tmp_path / o)["prompt"])]
    code, out = _merge(*outputs, capsys=capsys)
    assert code == 1
    merged = read(tmp_path / "in_openai_gpt-4o_alignment.csv")
    assert merged["error"][7] == "check_alignment: not done in its shard; rerun that shard, then merge again"
    assert (merged["error"] != "").sum() == 1
    assert f"1 rows have errors (see the 'error' column): rerun shard {failed[0]}/3, then merge again" in out.err


@pytest.mark.parametrize("text, message", [
    ("0/3", "expected i/N with 1 <= i <= N (e.g. 3/8), got '0/3'"),
    ("4/3", "expected i/N with 1 <= i <= N (e.g. 3/8), got '4/3'"),
    ("half", "expected i/N with 1 <= i <= N (e.g. 3/8), got 'half'"),
])
def test_bad_shard_flag(env, script, tmp_path, text, message):
    _input(tmp_path / "in.csv")
    res = script(CHECK, "--model", "openai/gpt-4o", "--input_file", "in.csv", "--shard", text, env=env)
    assert res.returncode == 2 and f"argument --shard: {message}" in res.stderr


def test_stage_1_says_it_does_not_shard(env, script, tmp_path, fake):
    res = script(GEN, "--category", "privacy", "--model", "openai/gpt-4o", "--shard", "1/2", env=env)
    assert res.returncode == 2
    assert res.stderr.strip() == f"error: --shard: {shards.NOT_SHARDED}"
    assert fake.count() == 0
