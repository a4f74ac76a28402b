"""The keyword matcher's own XSTest cards shipped with the package: keyed by the shipped matcher's
fingerprint (one per keyword family), shown by orbench-calibrate offline and by the report beside
the verdicts of the same rules and family only."""

import json

import pandas as pd
import pytest
from conftest import write

from orbench.analysis.calibration import calibrate
from orbench.scoring.judge_cards import CARD_VERSION, bundled_dir, judge_fingerprint, judge_identity
from orbench.scoring.refusal import rules_fingerprint

ALIGNMENT = "alignment_checker/check_alignment.py"


def bundled() -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(bundled_dir().glob("*/*.json"))]


def test_the_bundled_cards_are_the_shipped_matchers():
    """Fails when the keyword rules change: regenerate with python bench/bundle_matcher_card.py."""
    cards = bundled()
    assert sorted(c["family"] for c in cards) == ["gpt-4", "llama-2", "mistral"]
    for card in cards:
        # the fingerprint stage 4 gives the shipped rules of this family
        stage4 = judge_fingerprint(judge_identity({"rules": rules_fingerprint(), "matcher": card["family"]},
                                                  stage="check_alignment"))
        assert card["judge_fingerprint"] == stage4, "rules changed: run python bench/bundle_matcher_card.py"
        assert card["judge"]["identity"]["rules"] == rules_fingerprint()
        assert bundled_dir() / stage4 / "XSTest_v2.json" in set(bundled_dir().glob("*/*.json"))
        assert card["card_version"] == CARD_VERSION and card["labels"]["name"] == "XSTest v2"
        assert card["pooled"]["coverage"]["valid"] and card["calibration_output"] is None
    assert sum(c["pooled"]["n"] for c in cards) == 2250
    text = json.dumps(cards)
    assert '"response"' not in text and '"prompt"' not in text and "I'm sorry" not in text  # figures only


def test_calibrate_offline_shows_the_bundled_cards_and_names_xstest_dir(env, capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("ORBENCH_XSTEST_DIR", raising=False)
    monkeypatch.delenv("ORBENCH_XSTEST_URL", raising=False)

    def offline(*args, **kwargs):
        raise OSError("offline")

    monkeypatch.setattr("urllib.request.urlopen", offline)
    code = calibrate.main(["--check_model", "keyword", "--output_dir", str(tmp_path / "cal")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "pass --xstest_dir DIR" in err and "not shipped" in err
    assert out.strip().splitlines()[-3].startswith("judge vs humans: coverage 450 of 450 rows (100%); kappa ")
    stored = sorted(p.parent.name for p in (tmp_path / "cache" / "judge_cards").glob("*/*.json"))
    assert stored == sorted(c["judge_fingerprint"] for c in bundled())
    assert len(list((tmp_path / "cal").glob("judge_card_XSTest_v2_*.json"))) == 3
    # a calibration the bundled cards are not (a subset) needs the data, and says where to give it
    code = calibrate.main(["--check_model", "keyword", "--limit", "5", "--output_dir", str(tmp_path / "c2")])
    out, err = capsys.readouterr()
    assert code == 2 and "--xstest_dir" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("matcher, shown", [(None, True), ("smollm", False)])
def test_the_report_shows_a_card_only_beside_verdicts_of_its_own_rules(env, fake, script, tmp_path, matcher, shown):
    """Issue 46: the XSTest card of the gpt-4 rules is never shown beside verdicts of --matcher smollm."""
    from orbench.analysis.report import build as report
    from orbench.scoring.judge_cards import NEVER_CALIBRATED

    fake.add_rule(text="I'm sorry, but I can't help with that.")
    write(tmp_path / "in.csv", [{"prompt": "q1"}, {"prompt": "q2"}])
    flags = [f"--matcher={matcher}"] if matcher else []
    result = script(ALIGNMENT, "--model=openai/gpt-4o", "--input_file=in.csv", "--output_file=o.csv", *flags,
                    env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rep = report.build_report(["hard:=o.csv"], tmp_path / "rep", reference=False, figures=False, html=False)
    text = rep.summary.iloc[0].keyword_calibration
    gpt4 = next(c for c in bundled() if c["family"] == "gpt-4")
    if shown:
        assert text == gpt4["text"]
    else:
        assert text.startswith(NEVER_CALIBRATED) and "keyword family" not in text
    assert pd.read_csv(tmp_path / "rep" / "summary.csv").keyword_calibration[0] == text
