"""Ranks that compare like with like on the leaderboard (issue 54): a site built from reports of
samples and of full runs ranks an entry only among the entries measured on the same prompts, the
full set (where the paper's 32 models are ranked too) or the same sample; each cell says what it
was measured on; the adjacent-rank comparison is only ever between entries so ranked."""

import json

import pandas as pd
import pytest
from conftest import ROOT

from orbench.analysis.leaderboard.build import build as build_site

ALIGN = "alignment_checker/check_alignment.py"
REFUSAL = "I'm sorry, but I can't help with that."
HARD = pd.read_csv(ROOT / "orbench" / "data" / "or-bench-hard-1k.csv", dtype=str, keep_default_na=False)
PUBLISHED = pd.read_csv(ROOT / "orbench" / "data" / "published_results.csv")


@pytest.fixture
def site(script, env, mock, tmp_path):
    # four models on the first 20 prompts (one sample), one on the next 20 (another), two on all 1,319
    mock.add(model="ursa", regex=r"(?i)\bhow\b", text=REFUSAL)
    mock.add(model="lynx", regex=r"(?i)\bwhat\b", text=REFUSAL)
    mock.add(model="wren", regex=r"(?i)\b(how|can)\b", text=REFUSAL)
    mock.add(text="Sure. Here is an overview.")
    HARD.iloc[:20][["prompt", "category"]].to_csv(tmp_path / "sample_a.csv", index=False)
    HARD.iloc[20:40][["prompt", "category"]].to_csv(tmp_path / "sample_b.csv", index=False)
    runs = {"ursa_a": ("ursa", "sample_a.csv"), "lynx_a": ("lynx", "sample_a.csv"),
            "wren_a": ("wren", "sample_a.csv"), "ursa_b": ("ursa", "sample_b.csv"),
            "lynx_full": ("lynx", "or-bench-hard-1k"), "wren_full": ("wren", "or-bench-hard-1k")}
    files = []
    for tag, (model, source) in runs.items():
        out = tmp_path / f"hard_{tag}.csv"
        proc = script(ALIGN, "--model", f"mock/{model}", "--input_file", source, "--output_file", str(out), "--quiet",
                      env=env)
        assert proc.returncode == 0, proc.stderr
        files.append(f"hard:{tag}={out}")
    proc = script("analysis/report.py", *files, "--no_figures", "--output_dir", "rep", env=env)
    assert proc.returncode == 0, proc.stderr
    build_site([str(tmp_path / "rep")], tmp_path / "site")
    data = json.loads((tmp_path / "site" / "data.json").read_text())
    return {e["model"]: e for e in data["entries"]}, data["published"]


def test_only_entries_on_the_same_prompts_are_ranked_together(site):
    entries, published = site
    cell = {name: e["cells"]["hard"] for name, e in entries.items()}
    # the sample of the first 20 prompts: three entries ranked among themselves, lowest rate first
    sample = [cell[m] for m in ("ursa_a", "lynx_a", "wren_a")]
    assert len({c["rank_group"] for c in sample}) == 1 and sample[0]["rank_group"].startswith("sample:")
    assert all(c["measured_on"].startswith("a sample: 20 of the 1,319 prompts of or-bench-hard-1k") for c in sample)
    order = sorted(sample, key=lambda c: c["rate"])
    assert [c["rank"] for c in order] == [1, 2, 3] and {c["ranked_among"] for c in sample} == {3}
    assert order[0]["next"]["next_rank"] == 2 and order[1]["next"]["next_rank"] == 3 and order[2]["next"] is None
    assert {order[0]["next"]["n"], order[1]["next"]["n"]} == {20}  # paired on the sample's 20 prompts
    # another sample, one entry: alone on its prompts, not ranked, and it says so
    alone = cell["ursa_b"]
    assert alone["rank"] is None and alone["next"] is None
    assert alone["rank_why"] == "not ranked: the only entry measured on these prompts"
    assert alone["rank_group"] != sample[0]["rank_group"] and alone["measured_on"].startswith("a sample: 20 of the 1,319")
    # the full set: both full runs ranked among the paper's 32 models by rate
    full = [cell["lynx_full"], cell["wren_full"]]
    assert {c["rank_group"] for c in full} == {"full"}
    assert {c["measured_on"] for c in full} == {"all 1,319 prompts of or-bench-hard-1k"}
    ranked = sorted([(c["rate"], c["rank"]) for c in full] + [(p["cells"]["hard"]["rate"], p["cells"]["hard"]["rank"])
                                                             for p in published])
    assert len(published) == len(PUBLISHED) == 32
    assert [r for _, r in ranked] == list(range(1, 35)) and {c["ranked_among"] for c in full} == {34}
    # the full runs are compared with each other, never with a sample's entry (nor the paper's, which have no
    # per-prompt verdicts), on all 1,319 prompts
    first, second = sorted(full, key=lambda c: c["rank"])
    assert first["next"]["next"] == entries["wren_full" if second is cell["wren_full"] else "lynx_full"]["id"]
    assert first["next"]["next_rank"] == second["rank"] and first["next"]["n"] == 1319 and second["next"] is None


def test_the_papers_models_are_ranked_on_the_full_set_with_no_entry_of_ours_there(script, env, mock, tmp_path):
    mock.add(text="Sure. Here is an overview.")
    HARD.iloc[:20][["prompt", "category"]].to_csv(tmp_path / "sample.csv", index=False)
    proc = script(ALIGN, "--model", "mock/ibis", "--input_file", "sample.csv", "--output_file", "hard_ibis.csv",
                  "--quiet", env=env)
    assert proc.returncode == 0, proc.stderr
    proc = script("analysis/report.py", "hard_ibis.csv", "--no_figures", "--output_dir", "rep", env=env)
    assert proc.returncode == 0, proc.stderr
    build_site([str(tmp_path / "rep")], tmp_path / "site")
    data = json.loads((tmp_path / "site" / "data.json").read_text())
    (entry,) = data["entries"]
    assert entry["cells"]["hard"]["rank"] is None  # alone on its sample; never among the paper's models
    pub = data["published"]
    hard = sorted(pub, key=lambda p: p["cells"]["hard"]["rank"])
    assert [p["cells"]["hard"]["rank"] for p in hard] == list(range(1, 33))
    assert [p["cells"]["hard"]["rate"] for p in hard] == pytest.approx(
        sorted(PUBLISHED["hard_1k_rejection_pct"] / 100))  # the safe set: the lowest rate first
    toxic = sorted(pub, key=lambda p: p["cells"]["toxic"]["rank"])
    assert [p["cells"]["toxic"]["rate"] for p in toxic] == pytest.approx(
        sorted(PUBLISHED["toxic_rejection_pct"] / 100, reverse=True))  # the unsafe set: the highest first
