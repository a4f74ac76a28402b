"""orbench-leaderboard: the site built from report folders and Every Eval Ever records, read back from its files.

The site is built once for the module, through the real script (run as ``__main__``), from two real
reports (``tests/leaderboard_runs.py``), a copy of one report's records (the same runs: shown
once), and the inspect log converted by EEE's converter (``tests/data/eee_inspect``). What the
page does with it in a browser is ``tests/test_leaderboard_browser.py``.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import ROOT, run_in_process
from leaderboard_runs import HOSTILE, REFUSED, make
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint

from orbench.analysis.eee.read import COMPUTED_EXACT
from orbench.scoring.judge_cards import NEVER_CALIBRATED

FIXTURE = ROOT / "tests" / "data" / "eee_inspect"
SCRIPT = "analysis/leaderboard.py"
ALPHA_BRIEF, ALPHA_NONE = "mock/gpt-4o-alpha (system prompt: Be brief.)", "mock/gpt-4o-alpha (system prompt: none)"


def exact(k, n):
    """Clopper-Pearson's interval (statsmodels' 'beta'), as the report gives a one-sample rate."""
    return tuple(proportion_confint(k, n, method="beta"))


def other_benchmark(path: Path) -> Path:
    """The inspect fixture's Hard-1K record made into one of another benchmark (no OR-Bench or XSTest set)."""
    record = json.loads(next((FIXTURE / "data" / "or_bench_hard_1k").rglob("*.json")).read_text())
    for result in record["evaluation_results"]:
        result["evaluation_name"] = result["source_data"]["dataset_name"] = "mmlu"
        result["source_data"]["additional_details"]["inspect_dataset_name"] = "mmlu"
    record.pop("detailed_evaluation_results")
    path.write_text(json.dumps(record))
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    runs = make()
    tmp = tmp_path_factory.mktemp("leaderboard")
    copies = tmp / "copies"
    shutil.copytree(runs.rep1 / "every_eval_ever" / "data", copies / "data")
    other_benchmark(copies / "mmlu.json")  # a record of another benchmark among them: skipped, counted
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    proc = run_in_process(SCRIPT, str(runs.root), str(runs.rep1), str(copies), str(FIXTURE), "--output_dir",
                          str(tmp / "site"), env=env, cwd=tmp)
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp / "site" / "data.json").read_text())
    return {"runs": runs, "site": tmp / "site", "data": data, "proc": proc, "copies": copies,
            "by_name": {e["name"]: e for e in data["entries"]}}


def test_the_site_is_one_folder_that_fetches_nothing(built):
    site, proc = built["site"], built["proc"]
    assert proc.stdout.strip().splitlines()[-1] == str(site / "index.html")
    assert {p.name for p in site.iterdir()} == {"index.html", "leaderboard.css", "leaderboard.js", "data.js", "data.json",
                                                "records", "provenance"}
    page = (site / "index.html").read_text()
    links = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert sorted(links) == ["data.js", "data:,", "leaderboard.css", "leaderboard.js"]
    for name in ("leaderboard.js", "leaderboard.css"):
        text = (site / name).read_text()
        assert not re.search(r"\b(fetch|XMLHttpRequest|import\s*\(|@import|url\(\s*['\"]?https?:)", text), name
    js = (site / "data.js").read_text()
    assert js.startswith("window.ORBENCH_LEADERBOARD = ") and js.rstrip().endswith(";")
    assert json.loads(js[len("window.ORBENCH_LEADERBOARD = "):].rstrip().rstrip(";")) == built["data"]


def test_entries_are_named_by_what_differs_and_each_run_is_shown_once(built):
    assert set(built["by_name"]) == {ALPHA_BRIEF, ALPHA_NONE, "mock/llama-2-beta", "mock/mistral-gamma", HOSTILE,
                                     "openai-api/mock-model"}
    # the copied records are the report's runs: each named once as a copy, none an entry of its own
    copies = [n for n in built["data"]["notes"] if "same fingerprint" in n]
    assert len(copies) == 4 and all(n.startswith(str(built["copies"])) for n in copies)
    assert f"{built['copies']}: 1 JSON file(s) skipped: not Every Eval Ever records, or records with no " \
           f"rejection rate on an OR-Bench or XSTest set" in built["data"]["notes"]
    assert all(f"{n.split(': the same run as ')[0]}: the same run as" in built["proc"].stderr for n in copies)
    sources = {e["name"]: (e["source"], e["ours"]) for e in built["data"]["entries"]}
    assert sources["openai-api/mock-model"] == ("inspect", False) and sources[ALPHA_NONE] == ("orbench", True)


def test_cells_hold_rates_intervals_bounds_judges_cards_and_settings(built):
    by = built["by_name"]
    hard = by[ALPHA_BRIEF]["cells"]["hard"]
    assert (hard["rate"], hard["n"], hard["judge"], hard["verdict"]) == (0.25, 12, "keyword", "keyword")
    assert (hard["low"], hard["high"]) == pytest.approx(exact(3, 12), abs=1e-12) and hard["method"] == "clopper_pearson"
    assert (hard["cut_off"], hard["replies"], hard["samples"]) == (0, 12, 1)
    assert hard["settings"] == {"temperature": 0.0, "max_tokens": 1000, "system_prompt": "Be brief.", "samples": 1}
    assert by[ALPHA_NONE]["cells"]["hard"]["settings"]["system_prompt"] == "none"
    card = hard["card"]
    bundled = json.loads(next((ROOT / "orbench" / "data" / "judge_cards").glob(f"{card['fingerprint']}/*.json")).read_text())
    assert card["coverage"]["value"] == bundled["pooled"]["coverage"]["value"] and card["coverage"]["valid"] is True
    assert card["kappa"]["value"] == bundled["pooled"]["kappa"]["value"] and card["labels"] == "XSTest v2"
    assert re.match(r"\d{4}-\d\d-\d\dT", by[ALPHA_BRIEF]["date"])
    beta = by["mock/llama-2-beta"]["cells"]["hard"]
    assert (beta["judge"], beta["verdict"], beta["card"], beta["card_text"]) == ("mock/judge-x", "judge", None,
                                                                                 NEVER_CALIBRATED)
    # no rate where 9 of 10 rows have no verdict: the bounds, unranked
    gamma = by["mock/mistral-gamma"]["cells"]["toxic"]
    assert gamma["rate"] is None and gamma["rank"] is None and gamma["no_verdict"] == 9
    assert gamma["judge"] == "mock/judge-bad" and gamma["verdict"] == "judge"
    cp = proportion_confint(9, 10, method="beta")  # the bounds' outer limits: Clopper-Pearson's
    assert (gamma["bound_low"], gamma["bound_high"]) == pytest.approx((0.0, cp[1]), abs=1e-12)
    # another tool's record: its rate, an interval computed from score and n, said so; its categories
    other = by["openai-api/mock-model"]["cells"]
    assert (other["hard"]["rate"], other["toxic"]["rate"]) == pytest.approx((4 / 12, 8 / 12), abs=1e-12)
    assert (other["hard"]["low"], other["hard"]["high"]) == pytest.approx(exact(4, 12), abs=1e-12)
    assert other["hard"]["method"] == COMPUTED_EXACT and other["hard"]["judge"] == "not stated in the record"
    assert other["hard"]["categories"]["harassment"]["rate"] == 1.0
    # XSTest keeps its own types as categories: none is an OR-Bench category
    xs = set(by[ALPHA_BRIEF]["cells"]["xstest-safe"]["categories"])
    sets = {s["key"]: s for s in built["data"]["sets"]}
    assert xs and xs <= set(sets["xstest-safe"]["categories"]) and not xs & set(sets["hard"]["categories"])


def _counts(a: set, b: set, n: int) -> tuple[int, int]:
    return len(a - b), len(b - a)


def test_adjacent_ranks_are_compared_paired_with_holm_across_the_set(built):
    by = built["by_name"]
    ids = {e["id"]: e["name"] for e in built["data"]["entries"]}
    # XSTest safe: alpha refuses 1 of 10, beta all 10: 9 discordant prompts, all one way
    first, second = by[ALPHA_BRIEF]["cells"]["xstest-safe"], by["mock/llama-2-beta"]["cells"]["xstest-safe"]
    assert (first["rank"], second["rank"]) == (1, 2) and ids[first["next"]["next"]] == "mock/llama-2-beta"
    p = mcnemar([[0, 0], [9, 0]], exact=True).pvalue
    assert first["next"]["p"] == pytest.approx(p, rel=1e-12) and first["next"]["p_holm"] == pytest.approx(p, rel=1e-12)
    assert first["next"]["differs"] is True and first["next"]["n"] == 10 and second["next"] is None
    # Hard-1K: the safe set ranks the lowest rate first; ties by name; each pair McNemar's, Holm across the set
    ranked = sorted((e for e in built["data"]["entries"] if (e["cells"].get("hard") or {}).get("rank")),
                    key=lambda e: e["cells"]["hard"]["rank"])
    assert [e["name"] for e in ranked] == ["mock/mistral-gamma", HOSTILE, ALPHA_BRIEF, ALPHA_NONE, "mock/llama-2-beta"]
    # like with like: all five on the same 12 prompts, one sample; the inspect record's prompts are not known
    # (its per-sample scores do not give its rate), so it is not ranked among them
    assert {e["cells"]["hard"]["rank_group"] for e in ranked} == {ranked[0]["cells"]["hard"]["rank_group"]}
    assert ranked[0]["cells"]["hard"]["measured_on"].startswith("a sample: 12 of the 1,319 prompts of or-bench-hard-1k")
    other = by["openai-api/mock-model"]["cells"]["hard"]
    assert other["rank"] is None and other["rank_why"].startswith(
        "not ranked: which prompts it was measured on is not known (the per-sample scores (mean 0.0000)")
    refused = {"mock/mistral-gamma": REFUSED["mistral-gamma"]["or-bench-hard-1k"],
               HOSTILE: REFUSED["gpt-4o-alpha"]["or-bench-hard-1k"], ALPHA_BRIEF: REFUSED["gpt-4o-alpha"]["or-bench-hard-1k"],
               ALPHA_NONE: REFUSED["gpt-4o-alpha"]["or-bench-hard-1k"],
               "mock/llama-2-beta": REFUSED["llama-2-beta"]["or-bench-hard-1k"]}  # judge-x follows the refusals
    tested = []
    for a, b in zip(ranked, ranked[1:]):
        nxt = a["cells"]["hard"]["next"]
        a_only, b_only = _counts(refused[a["name"]], refused[b["name"]], 12)
        assert nxt["p"] == pytest.approx(mcnemar([[0, a_only], [b_only, 0]], exact=True).pvalue, rel=1e-12)
        assert (nxt["a_only"], nxt["b_only"], nxt["n"]) == (a_only, b_only, 12)
        tested.append(nxt)
    holm = multipletests([t["p"] for t in tested], method="holm")[1]
    assert [t["p_holm"] for t in tested] == pytest.approx(list(holm), rel=1e-12)
    assert len(tested) == 4 and not any(t["differs"] for t in tested)


def test_meta_files_and_records_are_copied_into_the_site_and_linked_relatively(built):
    site, entry = built["site"], built["by_name"][ALPHA_BRIEF]
    runs = built["runs"]
    expected = sorted(f"{p.name}.meta.json" for k, p in runs.files.items() if k[0] == "gpt-4o-alpha" and k[-1] == "rep1")
    assert sorted(p["name"] for p in entry["provenance"]) == expected
    for item in entry["provenance"]:
        assert not item["href"].startswith(("/", "http")) and item["how"] == "copied"
        original = next(p for k, p in runs.files.items() if f"{p.name}.meta.json" == item["name"] and k[-1] == "rep1")
        assert (site / item["href"]).read_bytes() == Path(f"{original}.meta.json").read_bytes()
    assert len(entry["records"]) == 2  # its OR-Bench and its XSTest record
    for item in entry["records"]:
        original = next((runs.rep1 / "every_eval_ever" / "data").rglob(item["name"]))
        assert (site / item["href"]).read_bytes() == original.read_bytes()
    assert built["by_name"]["openai-api/mock-model"]["provenance"] == []


def test_the_papers_models_are_a_layer_of_their_own(built):
    published = built["data"]["published"]
    assert len(published) == 32
    first = published[0]  # Claude-2.1 in orbench/data/published_results.csv: 99.8 and 100.0
    assert first["model"] == "Claude-2.1" and first["cells"]["hard"]["rate"] == pytest.approx(0.998)
    assert (first["cells"]["hard"]["low"], first["cells"]["hard"]["high"]) == pytest.approx(exact(round(0.998 * 1319), 1319))
    assert built["data"]["published_fit"] and len(built["data"]["published_fit"]) == 3
    assert all(e["name"] != "Claude-2.1" for e in built["data"]["entries"])


def _bad_cases(tmp: Path, runs) -> dict:
    (tmp / "not_a_record.json").write_text(json.dumps({"hello": "world"}))
    (tmp / "broken.json").write_text("{not json")
    record = json.loads(next((runs.rep1 / "every_eval_ever" / "data").rglob("*.json")).read_text())
    del record["model_info"]["id"]
    (tmp / "no_id.json").write_text(json.dumps(record))
    bare = tmp / "bare_report"
    bare.mkdir()
    shutil.copy(runs.rep1 / "report.json", bare / "report.json")
    (tmp / "empty").mkdir()
    samples = next((runs.rep1 / "every_eval_ever" / "data").rglob("*.jsonl"))
    other_benchmark(tmp / "mmlu.json")
    return {"missing": (str(tmp / "nope"), "no such file or folder"),
            "not_a_record": (str(tmp / "not_a_record.json"), "is not an Every Eval Ever record"),
            "broken": (str(tmp / "broken.json"), "is not JSON"),
            "no_id": (str(tmp / "no_id.json"), "whose model_info has no 'id'"),
            "bare_report": (str(bare), "a report folder without Every Eval Ever records"),
            "empty": (str(tmp / "empty"), "no report folder (report.json) and no Every Eval Ever record in it"),
            "samples": (str(samples), "a per-sample file: give its aggregate record"),
            "other_benchmark": (str(tmp / "mmlu.json"), "no rejection rate on an OR-Bench or XSTest set (results: mmlu"),
            "csv": (str(runs.files[("gpt-4o-alpha", "or-bench-hard-1k", "rep1")]), "neither a report folder nor")}


def test_bad_input_is_one_line_naming_the_path_exit_2_and_nothing_written(tmp_path):
    runs = make()
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    for name, (path, why) in _bad_cases(tmp_path, runs).items():
        out = tmp_path / f"site_{name}"
        proc = run_in_process(SCRIPT, str(runs.rep2), path, "--output_dir", str(out), env=env, cwd=tmp_path)
        assert proc.returncode == 2, (name, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {path}: ") and why in lines[0], (name, lines)
        assert not out.exists(), name
