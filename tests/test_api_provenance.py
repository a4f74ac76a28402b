"""Provenance through the Python API (issue 54): one chain (stage 4 on a sample of Hard-1K, then a
keyword re-score) run through the scripts and through the API, with and without ``output_file``,
gives the same report.json provenance, the same Every Eval Ever settings and the same leaderboard
entry (the site shows it once). Only what names a run's place and time may differ: the command
that made it, the folder it ran in, file paths and names, start and end times (``VARY``)."""

import json

import pytest

import orbench
from orbench.analysis.leaderboard.build import build as build_site

REFUSAL = "I'm sorry, but I can't help with that."
ALIGN = "alignment_checker/check_alignment.py"
JUDGE = "response_checker/judge_responses.py"
#: What may differ between the scripts' chain and the API's: where and when each run was made.
VARY = {"command", "cwd", "started", "finished", "file", "path", "output", "name", "report", "report_id",
        # the run's time, and the checksum of the per-sample file whose lines repeat the evaluation_id
        "evaluation_id", "evaluation_timestamp", "retrieved_timestamp", "checksum", "date", "built",
        # the leaderboard's copies: a file's place on the site, named after it, and whether it was copied or
        # written from report.json (an in-memory run has no file); its records' file names (random)
        "href", "how", "records"}


def _same(value):
    """``value`` with the keys of ``VARY`` left out, and the file names in lineage steps blanked."""
    if isinstance(value, dict):
        out = {k: _same(v) for k, v in value.items() if k not in VARY}
        if "steps" in out:
            out["steps"] = [[step[0], "", step[2]] for step in value["steps"]]
        return out
    if isinstance(value, list):
        return [_same(v) for v in value]
    return value


@pytest.fixture
def answers(fake):
    fake.add_rule(model="m", match="kill", text=REFUSAL)
    fake.add_rule(model="m", text="Sure, here is how.")
    return fake


def _eee(folder):
    (path,) = [p for p in (folder / "every_eval_ever" / "data").rglob("*.json")]
    return json.loads(path.read_text())


def test_the_api_chain_keeps_the_scripts_provenance(script, env, answers, tmp_path):
    (tmp_path / "cli").mkdir()
    assert script(ALIGN, "--model", "openai/m", "--input_file", "or-bench-hard-1k", "--limit", "6", "--no_cache",
                  "--output_file", "cli/hard.csv", env=env).returncode == 0
    assert script(JUDGE, "--check_model", "keyword", "--input_file", "cli/hard.csv",
                  "--output_file", "cli/hard_kw.csv", env=env).returncode == 0
    proc = script("analysis/report.py", "cli/hard_kw.csv", "--no_reference", "--no_figures", "--output_dir", "r_cli",
                  env=env)
    assert proc.returncode == 0, proc.stderr
    cli = json.loads((tmp_path / "r_cli" / "report.json").read_text())

    in_memory = orbench.judge(orbench.evaluate("or-bench-hard-1k", "openai/m", limit=6, no_cache=True, quiet=True),
                              quiet=True)
    orbench.report(in_memory, no_reference=True).save(tmp_path / "r_mem", figures=False)
    h = orbench.evaluate("or-bench-hard-1k", "openai/m", limit=6, no_cache=True, quiet=True, output_file="api/hard.csv")
    j = orbench.judge(h, output_file="api/hard_kw.csv", quiet=True)
    orbench.report(j, no_reference=True, output_dir=str(tmp_path / "r_files"), no_figures=True)
    for folder in ("r_mem", "r_files"):
        api = json.loads((tmp_path / folder / "report.json").read_text())
        assert _same(api["inputs"]) == _same(cli["inputs"]), folder
        assert _same(api["lineage"]) == _same(cli["lineage"]), folder
        assert _same(_eee(tmp_path / folder)) == _same(_eee(tmp_path / "r_cli")), folder

    sites = {}
    for folder in ("r_cli", "r_mem", "r_files"):
        build_site([str(tmp_path / folder)], tmp_path / f"site_{folder}", with_published=False)
        sites[folder] = json.loads((tmp_path / f"site_{folder}" / "data.json").read_text())
        (entry,) = sites[folder]["entries"]
        assert entry["name"] == "openai/m" and entry["cells"]["hard"]["settings"]["max_tokens"] not in (None, "")
    for folder in ("r_mem", "r_files"):
        assert _same(sites[folder]["entries"]) == _same(sites["r_cli"]["entries"]), folder
    # the same run through the scripts and the API: one entry, not two
    _, notes = build_site([str(tmp_path / f) for f in ("r_cli", "r_mem", "r_files")], tmp_path / "site_all",
                          with_published=False)
    assert len(json.loads((tmp_path / "site_all" / "data.json").read_text())["entries"]) == 1
    assert sum("(same fingerprint): shown once" in n for n in notes) == 2
    # an in-memory run is named as such, not by a temporary folder that is gone with the report
    text = (tmp_path / "r_mem" / "report.json").read_text() + (tmp_path / "r_mem" / "report.html").read_text()
    assert "orbench-report-" not in text
    assert "or-bench-hard-1k_openai_m_alignment_keyword_judged.csv (in memory)" in text
    assert "or-bench-hard-1k_openai_m_alignment.csv (in memory)" in text


def test_a_table_edited_between_two_calls_is_told_apart_as_a_replaced_file_is(env, answers):
    responses = orbench.evaluate("or-bench-hard-1k", "openai/m", limit=6, no_cache=True, quiet=True)
    kept = orbench.judge(responses, quiet=True)
    edited = orbench.judge(responses.iloc[:4], quiet=True)  # four rows of six: not the table stage 4 made
    assert kept.attrs["orbench"]["meta"]["input"]["sha256"] == responses.attrs["orbench"]["sha256"]
    rep = orbench.report(kept, no_reference=True)
    assert rep.lineage[0]["responses"]["temperature"] == 0.0 and not rep.warnings
    rep = orbench.report(edited, no_reference=True)
    (why,) = [w for w in rep.warnings if w.startswith("settings unknown")]
    assert ("or-bench-hard-1k_openai_m_alignment.csv (in memory) has changed since "
            "or-bench-hard-1k_openai_m_alignment_keyword_judged.csv was made from it") in why


def test_the_generation_stages_hand_their_records_on(env, fake, tmp_path):
    from orbench.analysis.report.lineage import read_chain
    from orbench.run.provenance import dumps, meta_path_for

    fake.add_rule(match="Generate 20", text="[[seed one]]\n[[seed two]]")
    fake.add_rule(match="rewrite", text="[[1. first]] [[2. second]] [[3. third]] [[4. fourth]] [[5. fifth]]")
    fake.add_rule(text="Fine. [[11. None of the above]]")
    seeds = orbench.generate("harmful", "openai/g", num_toxic_prompts=2, quiet=True)
    rewrites = orbench.rewrite(seeds, "openai/r", quiet=True)
    moderated = orbench.moderate(rewrites, "openai/a", quiet=True, output_file="mod.csv")  # written, its input not
    chain = read_chain(str(tmp_path / "mod.csv"))
    assert [link["meta"]["stage"] for link in chain] == ["moderate", "rewrite", "generate"]
    assert [link["file"] for link in chain[1:]] == [f"{rewrites.attrs['orbench']['name']} (in memory)",
                                                    f"{seeds.attrs['orbench']['name']} (in memory)"]
    assert not any(link["changed"] for link in chain)
    assert chain[1]["meta"] == json.loads(dumps({**rewrites.attrs["orbench"]["meta"], "input": {
        k: v for k, v in rewrites.attrs["orbench"]["meta"]["input"].items() if k not in ("record", "record_sha256",
                                                                                         "name")}}))
    assert json.loads(meta_path_for(tmp_path / "mod.csv").read_text())["input"]["sha256"] == \
        rewrites.attrs["orbench"]["sha256"]
    assert moderated.attrs["orbench"]["output"] == str(tmp_path / "mod.csv")
