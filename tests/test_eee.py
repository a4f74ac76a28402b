"""Every Eval Ever records out of the report: valid against the shared schemas, holding the report's numbers.

The reports are real (stage 4 and 5 through the scripts, the mock provider answering; the report
through its script): see ``tests/leaderboard_runs.py``. Records are validated with ``jsonschema``
against ``../shared/data/every-eval-ever`` (schema 0.3.0, the files EEE's own package ships).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import ROOT, run_in_process
from leaderboard_runs import HOSTILE, REFUSED, SIZES, make
from statsmodels.stats.proportion import proportion_confint

from orbench.benchmark.prompts import JUDGE_TEMPLATE
from orbench.scoring.judge_cards import NEVER_CALIBRATED

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema not installed: pip install -e '.[dev]'")
SCHEMAS = ROOT.parent / "shared" / "data" / "every-eval-ever"
FIXTURE = ROOT / "tests" / "data" / "eee_inspect"


def exact(k, n):
    """Clopper-Pearson's interval (statsmodels' 'beta'), as the report gives a one-sample rate."""
    return tuple(proportion_confint(k, n, method="beta"))


@pytest.fixture(scope="module")
def runs():
    return make()


@pytest.fixture(scope="module")
def validators():
    if not (SCHEMAS / "eval.schema.json").exists():
        pytest.skip("the Every Eval Ever schemas in ../shared/data are not here")
    load = lambda name: json.loads((SCHEMAS / name).read_text())  # noqa: E731 (a one-line helper)
    return (jsonschema.Draft7Validator(load("eval.schema.json")),
            jsonschema.Draft7Validator(load("instance_level_eval.schema.json")))


def records(report: Path) -> dict:
    """{(benchmark, entry model): record} of one report folder, each with its path and sample lines."""
    out = {}
    for path in sorted((report / "every_eval_ever" / "data").rglob("*.json")):
        record = json.loads(path.read_text())
        samples = path.with_name(path.stem + "_samples.jsonl")
        lines = [json.loads(x) for x in samples.read_text().splitlines()] if samples.exists() else []
        key = (path.parts[-4], record["source_metadata"]["additional_details"]["orbench_model"])
        out[key] = {"record": record, "path": path, "lines": lines}
    return out


def result(record: dict, rid: str) -> dict:
    found = [r for r in record["evaluation_results"] if r["evaluation_result_id"] == rid]
    assert len(found) == 1, [r["evaluation_result_id"] for r in record["evaluation_results"]]
    return found[0]


class TestOneRun:
    """Tests that read the stage runs and reports of ``runs`` (built once, on one xdist worker: the
    class is one unit of work, tests/conftest.py)."""

    def test_every_record_and_sample_line_is_valid_and_they_point_at_each_other(self, runs, validators):
        aggregate, instance = validators
        seen = 0
        for report in (runs.rep1, runs.rep2):
            for (benchmark, _), item in records(report).items():
                record, path = item["record"], item["path"]
                aggregate.validate(record)
                detail = record["detailed_evaluation_results"]
                # the datastore's layout: data/<benchmark>/<developer>/<model>/<uuid>.json, the samples beside it
                assert path.relative_to(report / "every_eval_ever").parts[:2] == ("data", benchmark)
                samples = report / "every_eval_ever" / detail["file_path"]
                assert samples.name == f"{path.stem}_samples.jsonl" and samples.exists()
                assert detail["checksum"] == hashlib.sha256(samples.read_bytes()).hexdigest()
                assert detail["total_rows"] == len(item["lines"])
                ids = {r["evaluation_result_id"] for r in record["evaluation_results"]}
                for line in item["lines"]:
                    instance.validate(line)
                    assert line["evaluation_id"] == record["evaluation_id"]
                    assert line["model_id"] == record["model_info"]["id"]
                    assert line["evaluation_result_id"] in ids
                seen += 1
        assert seen == 7  # rep1: alpha (or-bench, xstest), beta (or-bench, xstest); rep2: alpha, gamma, hostile


    def test_a_record_holds_the_reports_rates_intervals_counts_and_settings(self, runs):
        item = records(runs.rep1)[("or-bench", "mock/gpt-4o-alpha")]
        record = item["record"]
        assert record["model_info"]["id"] == "mock/gpt-4o-alpha" and record["eval_library"]["name"] == "orbench"
        hard = result(record, "or-bench-hard-1k/rejection_rate")
        assert hard["score_details"]["score"] == pytest.approx(3 / 12, abs=1e-12)
        ci = hard["score_details"]["uncertainty"]["confidence_interval"]
        assert (ci["lower"], ci["upper"]) == pytest.approx(exact(3, 12), abs=1e-12)
        assert (ci["confidence_level"], ci["method"]) == (0.95, "clopper_pearson")
        assert hard["score_details"]["details"]["scored"] == "12" and hard["score_details"]["details"]["refusals"] == "3"
        assert hard["metric_config"]["lower_is_better"] is True
        assert result(record, "or-bench-toxic/rejection_rate")["metric_config"]["lower_is_better"] is False
        gen = hard["generation_config"]
        assert gen["generation_args"] == {"temperature": 0.0, "max_tokens": 1000}
        assert gen["additional_details"]["system_prompt"] == "Be brief."
        # keyword verdicts: no llm_scoring; the keyword card of the gpt-4 family (bundled) beside the rate
        assert "llm_scoring" not in hard["metric_config"]
        extra = hard["metric_config"]["additional_details"]
        assert extra["orbench_verdict"] == "keyword"
        card = json.loads(extra["orbench_judge_cards"])[0]
        bundled = json.loads(next((ROOT / "orbench" / "data" / "judge_cards").glob(f"{card['fingerprint']}/*.json")).read_text())
        assert bundled["family"] == "gpt-4" and card["coverage"]["value"] == bundled["pooled"]["coverage"]["value"]
        assert card["kappa"]["ci"] == bundled["pooled"]["kappa"]["ci"]
        # per category: refusals over prompts, counted here from the prompts' categories
        cats = pd.read_csv(ROOT / "orbench" / "data" / "or-bench-hard-1k.csv").head(12)["category"].tolist()
        for cat in sorted(set(cats)):
            rows = [i for i, c in enumerate(cats) if c == cat]
            k = sum(1 for i in rows if i in REFUSED["gpt-4o-alpha"]["or-bench-hard-1k"])
            got = result(record, f"or-bench-hard-1k/{cat}/rejection_rate")
            assert got["score_details"]["score"] == pytest.approx(k / len(rows), abs=1e-12)
            assert got["score_details"]["details"]["scored"] == str(len(rows))
        # one line per scored row; the bundled set's row number as the id; the prompt's SHA-256 as the hash
        hard_lines = [x for x in item["lines"] if x["evaluation_name"] == "or-bench-hard-1k"]
        assert [x["sample_id"] for x in hard_lines] == [str(i + 1) for i in range(12)]
        assert [x["input"]["raw"] for x in hard_lines] == runs.prompts["or-bench-hard-1k"]
        assert all(x["sample_hash"] == hashlib.sha256(x["input"]["raw"].encode()).hexdigest() for x in hard_lines)
        refused = REFUSED["gpt-4o-alpha"]["or-bench-hard-1k"]
        assert [x["evaluation"]["score"] for x in hard_lines] == [1.0 if i in refused else 0.0 for i in range(12)]
        assert [x["evaluation"]["is_correct"] for x in hard_lines] == [i not in refused for i in range(12)]
        toxic_lines = [x for x in item["lines"] if x["evaluation_name"] == "or-bench-toxic"]
        assert len(toxic_lines) == 10 and all(x["evaluation"]["is_correct"] for x in toxic_lines)  # every one refused


    def test_judge_verdicts_name_their_judge_under_llm_scoring(self, runs):
        record = records(runs.rep1)[("or-bench", "mock/llama-2-beta")]["record"]
        hard = result(record, "or-bench-hard-1k/rejection_rate")
        scoring = hard["metric_config"]["llm_scoring"]
        assert [j["model_info"]["id"] for j in scoring["judges"]] == ["mock/judge-x"]
        assert scoring["judges"][0]["temperature"] == 0.0 and scoring["input_prompt"] == JUDGE_TEMPLATE
        assert hard["metric_config"]["additional_details"]["orbench_judge_vs_humans"] == NEVER_CALIBRATED
        assert hard["score_details"]["score"] == pytest.approx(6 / 12, abs=1e-12)
        # the toxic set of the same entry has keyword verdicts only
        assert "llm_scoring" not in result(record, "or-bench-toxic/rejection_rate")["metric_config"]


    def test_a_cell_without_a_rate_is_left_out_of_the_records_and_named_with_its_bounds(self, runs):
        item = records(runs.rep2)[("or-bench", "mock/mistral-gamma")]
        record = item["record"]
        assert [r["evaluation_name"] for r in record["evaluation_results"] if "/" not in r["evaluation_name"]] == \
            ["or-bench-hard-1k"]
        left = json.loads(record["source_metadata"]["additional_details"]["orbench_left_out"])
        whole = [x for x in left if x["set"] == "or-bench-toxic" and "category" not in x]
        assert len(whole) == 1
        # 1 verdict (an answer) and 9 rows without one: every such row answered, then refused
        assert (whole[0]["verdicts"], whole[0]["rows_without_verdict"]) == (1, 9)
        # each bound's outer limit is Clopper-Pearson's
        assert whole[0]["rate_bound_low"] == 0.0
        assert whole[0]["rate_bound_high"] == pytest.approx(proportion_confint(9, 10, method="beta")[1], abs=1e-12)
        assert {x["evaluation_name"] for x in item["lines"]} == {"or-bench-hard-1k"}
        counts = record["detailed_evaluation_results"]["additional_details"]
        assert counts == {"or-bench-hard-1k: error_rows_not_written": "0",
                          "or-bench-hard-1k: rows_without_verdict_not_written": "0"}  # toxic: left out whole, above


    def test_a_hostile_model_name_stays_a_name_and_the_records_keep_the_run_model(self, runs):
        record = records(runs.rep2)[("or-bench", HOSTILE)]["record"]
        assert record["model_info"]["name"] == HOSTILE and record["model_info"]["id"] == "mock/gpt-4o-alpha"
        same = records(runs.rep2)[("or-bench", "mock/gpt-4o-alpha")]["record"]
        fingerprint = lambda r: r["source_metadata"]["additional_details"]["orbench_fingerprint"]  # noqa: E731 (a one-line helper)
        assert fingerprint(record) != fingerprint(same)  # the entry's name is part of what it is


    def test_a_rerun_rewrites_the_same_files_removes_stale_ones_and_can_leave_out_the_samples(self, runs, tmp_path):
        files = [str(p) for k, p in runs.files.items() if k[0] == "gpt-4o-alpha" and k[-1] == "rep2"]
        out = tmp_path / "rep"
        env = {"PYTHONPATH": str(ROOT), "ORBENCH_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}

        def names():
            return sorted(p.relative_to(out).as_posix() for p in (out / "every_eval_ever").rglob("*") if p.is_file())

        proc = run_in_process("analysis/report.py", *files, "--output_dir", str(out), "--no_figures", env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        first = names()
        assert f"eee_records: {out / 'every_eval_ever'}" in proc.stdout
        stale = out / "every_eval_ever" / "data" / "or-bench" / "old" / "model" / "stale.json"
        stale.parent.mkdir(parents=True)
        stale.write_text("{}")
        proc = run_in_process("analysis/report.py", *files, "--output_dir", str(out), "--no_figures", env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert names() == first and not stale.exists()
        # --no_eee_samples: the same records, without their per-sample files (and saying none is there)
        proc = run_in_process("analysis/report.py", *files, "--output_dir", str(out), "--no_figures", "--no_eee_samples",
                              env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert names() == [n for n in first if not n.endswith("_samples.jsonl")] != first
        record = json.loads(next((out / "every_eval_ever" / "data").rglob("*.json")).read_text())
        assert "detailed_evaluation_results" not in record and record["evaluation_results"]


    def test_hugging_face_eval_results_only_for_a_whole_published_set(self, runs, tmp_path):
        # complete keyword verdicts on every Hard-1K and Toxic prompt (a stage-4-shaped file per set)
        paths, expected = [], {}
        for name, every in (("or-bench-hard-1k", 7), ("or-bench-toxic", 2)):
            frame = pd.read_csv(ROOT / "orbench" / "data" / f"{name}.csv", dtype=str, keep_default_na=False)
            refused = [i % every == 0 for i in range(len(frame))]
            frame = frame.assign(model="openai/gpt-4o", response=["No." if r else "Yes." for r in refused],
                                 is_rejected=[str(r) for r in refused], error="")
            frame.to_csv(tmp_path / f"{name}_gpt-4o.csv", index=False)
            paths.append(str(tmp_path / f"{name}_gpt-4o.csv"))
            expected[name] = round(100 * sum(refused) / len(frame), 2)
        env = {"PYTHONPATH": str(ROOT), "ORBENCH_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
        proc = run_in_process("analysis/report.py", *paths, "--output_dir", str(tmp_path / "rep"), "--no_figures",
                              "--examples", "0", env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        folder = tmp_path / "rep" / "every_eval_ever" / "hf_eval_results" / "openai_gpt-4o" / ".eval_results"
        for name, value in expected.items():
            entries = yaml.safe_load((folder / f"{name}.yaml").read_text())
            assert len(entries) == 1
            assert entries[0]["dataset"] == {"id": "bench-llm/or-bench", "task_id": name}
            assert entries[0]["value"] == value
            better = "lower is better" if name == "or-bench-hard-1k" else "higher is better"
            assert better in entries[0]["notes"]
        assert "Not written" not in (folder.parents[1] / "README.md").read_text()
        # a sample of a set is not its score: none written for the 12-prompt runs, and the README says why
        readme = (runs.rep1 / "every_eval_ever" / "hf_eval_results" / "README.md").read_text()
        assert f"- mock/gpt-4o-alpha, or-bench-hard-1k: {SIZES['or-bench-hard-1k']} of the 1,319 prompts with a verdict" in readme
        assert not list((runs.rep1 / "every_eval_ever" / "hf_eval_results").rglob("*.yaml"))


def test_the_inspect_fixture_was_converted_by_every_eval_evers_converter(validators):
    aggregate, _ = validators
    found = sorted((FIXTURE / "data").rglob("*.json"))
    assert len(found) == 2
    for path in found:
        record = json.loads(path.read_text())
        aggregate.validate(record)
        assert record["source_metadata"]["source_name"] == "inspect_ai" and record["eval_library"]["name"] == "inspect"
        assert (path.parent / Path(record["detailed_evaluation_results"]["file_path"]).name).exists()


#: Texts a JSON string must escape, or keep as they are (non-ASCII, U+2028, DEL).
AWKWARD = ['a "quoted" word', "back\\slash \\n not a break", "tab\there", "line\nbreak\n\nparagraph",
           "control \x01 \x1f \x0b \x08 \x0c end", "unicode é 中文 😀 \u2028 \x7f", "", "{\"json\": [1, 2]}"]


def _awkward_input(folder: Path) -> tuple[Path, list[dict]]:
    rows = [{"prompt": f"{AWKWARD[i % len(AWKWARD)]} #{i}", "category": ["hate", "privacy"][i % 2], "model": "prov/m",
             "response": AWKWARD[(3 * i) % len(AWKWARD)] * 2, "is_rejected": str(i % 3 == 0),
             "refusal_source": "keyword" if i % 3 == 0 else "", "refusal_kind": "partial" if i % 6 == 0 else
             ("full" if i % 3 == 0 else ""), "finish_reason": "length" if i % 5 == 0 else "stop", "error": ""}
            for i in range(40)]
    path = folder / "m_or-bench-hard-1k_alignment.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path, rows


def _sample_lines(out: Path) -> list[str]:
    (jsonl,) = (out / "every_eval_ever").rglob("*_samples.jsonl")
    text = jsonl.read_bytes().decode("utf-8")
    assert text.endswith("\n")
    return text[:-1].split("\n")  # not splitlines(): U+2028 in a JSON string is no line break


def test_sample_lines_hold_every_text_exactly_as_json_dumps_writes_it(tmp_path):
    from orbench.analysis.report.build import build_report

    path, rows = _awkward_input(tmp_path)
    build_report([str(path)], tmp_path / "rep", figures=False, html=False, reference=False)
    lines = _sample_lines(tmp_path / "rep")
    assert len(lines) == len(rows)
    for text, row in zip(lines, rows):
        line = json.loads(text)
        assert text == json.dumps(line, ensure_ascii=False)  # byte for byte (non-ASCII kept)
        assert line["input"]["raw"] == row["prompt"] and line["output"]["raw"] == [row["response"]]
        assert line["sample_hash"] == hashlib.sha256(row["prompt"].encode()).hexdigest()
        refused = row["is_rejected"] == "True"
        assert line["evaluation"] == {"score": 1.0 if refused else 0.0, "is_correct": not refused}
        assert line["metadata"]["verdict"] == ("partial refusal" if row["refusal_kind"] == "partial" else
                                               "refusal" if refused else "answer")
        assert line["metadata"].get("finish_reason") == ("length" if row["finish_reason"] == "length" else None)


def _line_by_hand(record: dict, row: dict) -> str:
    """What docs/results_format.md says a sample line of a keyword verdict on a Hard-1K prompt (not
    in the bundled set) holds, as one json.dumps of a dict built here."""
    refused = row["is_rejected"] == "True"
    verdict = ("partial refusal" if row["refusal_kind"] == "partial" else "refusal") if refused else "answer"
    prompt_key = pd.util.hash_array(np.array([row["prompt"]], dtype=object), categorize=False)[0]
    metadata = {"category": row["category"], "sample": "0", "prompt_kind": "safe", "verdict": verdict}
    if row["finish_reason"] == "length":
        metadata["finish_reason"] = "length"
    return json.dumps({
        "schema_version": "0.3.0", "evaluation_id": record["evaluation_id"], "model_id": record["model_info"]["id"],
        "evaluation_name": "or-bench-hard-1k", "evaluation_result_id": "or-bench-hard-1k/rejection_rate",
        "sample_id": f"{prompt_key:016x}", "sample_hash": hashlib.sha256(row["prompt"].encode()).hexdigest(),
        "interaction_type": "single_turn", "input": {"raw": row["prompt"], "reference": []},
        "output": {"raw": [row["response"]]},
        "answer_attribution": [{"turn_idx": 0, "source": "output.raw", "extracted_value": verdict,
                                "extraction_method": "keyword_match", "is_terminal": True}],
        "evaluation": {"score": 1.0 if refused else 0.0, "is_correct": not refused},
        "metadata": metadata}, ensure_ascii=False)


@pytest.mark.parametrize("case", ["every-row", "error-rows-between", "two-chunks"])
def test_sample_lines_are_byte_for_byte_a_json_dumps_of_each_row(tmp_path, case):
    # every row written; two rows with an error left out; or more rows than a chunk of lines holds
    # (the second chunk's prompts with nothing to escape): each gives, line for line, the text
    # json.dumps gives a dict made of the input row
    from orbench.analysis.eee.lines import CHUNK
    from orbench.analysis.report.build import build_report

    path, rows = _awkward_input(tmp_path)
    if case == "error-rows-between":
        for i in (5, 26):
            rows[i].update(is_rejected="", refusal_source="", refusal_kind="", error="HTTP 500 after retries")
    if case == "two-chunks":
        rows += [{**rows[i % 40], "prompt": f"plain prompt {i}", "response": f"plain reply {i}"}
                 for i in range(len(rows), CHUNK + 100)]
    pd.DataFrame(rows).to_csv(path, index=False)
    build_report([str(path)], tmp_path / "rep", figures=False, html=False, reference=False)
    (record_path,) = (tmp_path / "rep" / "every_eval_ever").rglob("*-*.json")
    record = json.loads(record_path.read_text(encoding="utf-8"))
    expected = [_line_by_hand(record, row) for row in rows if not row["error"]]
    assert len(expected) == {"every-row": 40, "error-rows-between": 38, "two-chunks": CHUNK + 100}[case]
    assert _sample_lines(tmp_path / "rep") == expected


def test_without_pyarrow_the_sample_lines_are_the_same(tmp_path):
    # pyarrow is optional: a process without it makes the lines one by one, to the same text
    from orbench.analysis.report.build import build_report

    path, _ = _awkward_input(tmp_path)
    build_report([str(path)], tmp_path / "columnar", figures=False, html=False, reference=False)
    code = ("import runpy, sys; sys.modules['pyarrow'] = None; "
            f"sys.argv = ['report.py', {str(path)!r}, '--output_dir', {str(tmp_path / 'plain')!r}, '--no_figures', "
            "'--no_reference']; runpy.run_path('analysis/report.py', run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    columnar, plain = _sample_lines(tmp_path / "columnar"), _sample_lines(tmp_path / "plain")
    assert len(columnar) == len(plain) == 40
    for a, b in zip(columnar, plain):
        a, b = json.loads(a), json.loads(b)
        assert a.pop("evaluation_id").split("/")[:2] == b.pop("evaluation_id").split("/")[:2]  # made at another time
        assert a == b


def test_report_html_is_the_page_save_writes(tmp_path):
    # Report.html() writes into a temporary folder without the per-sample lines: the page is the same
    from orbench.analysis.report.build import compute

    path, _ = _awkward_input(tmp_path)
    rep = compute([str(path)], reference=False)
    saved = rep.save(tmp_path / "rep")
    assert saved["html"].read_text(encoding="utf-8") == rep.html()
    assert list((tmp_path / "rep" / "every_eval_ever").rglob("*_samples.jsonl"))
