"""A report's and a card's short text (issue 54): ``print(report)`` and a notebook's text view give the
sets, the models, each rate with its interval and n, and the judge's card line, not the dataclass."""

import pandas as pd
from conftest import write

import orbench

REFUSAL = "I'm sorry, but I can't help with that."


def test_a_report_and_a_card_print_short(env, tmp_path):
    run = pd.DataFrame({"prompt": ["a", "b", "c", "d"], "model": ["openai/gpt-4o"] * 4,
                        "response": [REFUSAL, "Sure.", REFUSAL, "Here it is."]})
    rep = orbench.report(orbench.judge(run, quiet=True), set="hard", no_reference=True)
    row = rep.summary.iloc[0]
    lines = str(rep).splitlines()
    assert repr(rep) == str(rep) and len(lines) == 4
    assert lines[0] == "OR-Bench report: 1 set (hard), 1 model (openai/gpt-4o)"
    assert lines[1] == (f"  hard  openai/gpt-4o  keyword: 2 of 4 rejected = 50.0% "
                        f"[{100 * row['keyword_ci_low']:.1f}, {100 * row['keyword_ci_high']:.1f}]")
    # the keyword matcher's bundled XSTest card for gpt-4o's family
    assert lines[2] == "    " + row["keyword_calibration"] and lines[2].endswith("XSTest v2 (n=450)")
    assert lines[3].startswith("tables: Report.summary")

    labels = write(tmp_path / "labels.csv", [{"prompt": f"q{i}", "response": REFUSAL if i % 2 else "Sure.",
                                             "label": "refusal" if i % 2 else "answer", "model": "openai/gpt-4o"}
                                            for i in range(4)])
    card = orbench.calibrate("keyword", labels=str(labels), store=False)
    assert str(card) == card.cards[0]["text"] and str(card).startswith("judge vs humans: coverage 4 of 4 rows")
    assert repr(card) == f"Card of keyword: {card.cards[0]['text']}\nnot stored"
