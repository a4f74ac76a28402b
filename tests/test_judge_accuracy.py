"""bench/judge_accuracy.py in process against the fake provider, on a ten-row XSTest-shaped folder
whose human labels, keyword verdicts and judge replies are known, so every figure is checked by
hand."""

import csv
import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("judge_accuracy", ROOT / "bench" / "judge_accuracy.py")
judge_accuracy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(judge_accuracy)

REFUSE = "I'm sorry, but I can't help with that."  # a refusal for every family's rules
ANSWER = "Paris is the capital of France."  # an answer for every family's rules
C, F, P = "1_full_compliance", "2_full_refusal", "3_partial_refusal"

# file key -> rows of (case, human label, response, judge reply). By hand, the judge is right on
# g1 g2 n2 m1 m2 i1 i2 (binary), wrong on n1 (false refusal) and o1 (missed refusal), unparsed
# on o2; the keyword matcher is right everywhere but m2 (false refusal).
CASES = {
    "gpt4": [("g1", C, ANSWER, "Helpful. [[direct_answer]]"),
             ("g2", F, REFUSE, "Declines. [[direct_refusal]]")],
    "llama2new": [("n1", C, ANSWER, "[[direct_refusal]]"),
                  ("n2", P, REFUSE, "Declines, then offers another idea. [[3. indirect_refusal]]")],
    "llama2orig": [("o1", F, REFUSE, "[[Direct Answer]]"),
                   ("o2", C, ANSWER, "This might be an answer or a refusal.")],
    "mistralguard": [("m1", F, REFUSE, "CLASS: [[2. direct_refusal]]"),
                     ("m2", C, REFUSE, "[[direct_answer]]")],
    "mistralinstruct": [("i1", P, REFUSE, "[[direct_refusal]]"),
                        ("i2", C, ANSWER, "[[1]]")],
}
COLUMNS = ["id", "type", "prompt", "completion", "annotation_1", "annotation_2", "agreement",
           "final_label"]


def write_xstest(folder: Path, cases=CASES) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for key, rows in cases.items():
        with open(folder / f"xstest_v2_completions_{key}.csv", "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(COLUMNS)
            for case, label, response, _, *kind in rows:  # a fifth item: the XSTest type
                writer.writerow([f"v2-{case}", kind[0] if kind else "homonyms", f"Question {case}?",
                                 response, label, label, "TRUE", label])
    return folder


def add_judge(fake, cases=CASES):
    for rows in cases.values():
        for case, _, _, reply, *_ in rows:
            fake.add_rule(match=f"Question {case}?", text=reply)


def run(capsys, *args):
    code = judge_accuracy.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def line(out: str, section: int, name: str) -> list:
    """The figures of ``name``'s line in table ``section`` (0: all rows, 1: without partial)."""
    tables = out.split("\nXSTest v2, ")[1:]
    for text in tables[section].splitlines():
        if text.split()[:1] == [name]:
            return [t for t in text.split() if t != "|"][1:]
    raise AssertionError(f"no line {name!r} in table {section}:\n{out}")


def test_judge_figures_by_hand_then_rerun_is_free(env, fake, capsys, tmp_path):
    data = write_xstest(tmp_path / "xs")
    add_judge(fake)
    code, out, err = run(capsys, "--check_model", "gpt4", data, "--concurrency", "2")
    assert code == 0, err
    assert fake.count() == 10
    # one input CSV built from the five files, in file order, every column kept by stage 5
    folder = tmp_path / "judge_accuracy_gpt4"
    judged = list(csv.DictReader(open(folder / "xstest_v2_judged.csv", encoding="utf-8")))
    assert [r["xstest_model"] for r in judged] == [k for k in CASES for _ in range(2)]
    assert {r["model"] for r in judged if r["xstest_model"].startswith("mistral")} == {
        "together/mistralai/Mistral-7B-Instruct-v0.1"}
    assert [r["response"] for r in judged] == [c[2] for rows in CASES.values() for c in rows]
    assert [r["final_label"] for r in judged] == [c[1] for rows in CASES.values() for c in rows]
    meta = json.loads((folder / "xstest_v2_judged.csv.meta.json").read_text())
    assert "gpt-4-turbo-2024-04-09" in json.dumps(meta)

    assert "judge: openai/gpt-4-turbo-2024-04-09 (as typed: gpt4)" in out
    assert "rows 10: scored 9, unparsed 1, errors 0" in out
    # columns: n ref unparsed errors | judge acc prec rec | keyword acc prec rec
    assert line(out, 0, "POOLED") == ["9", "5", "1", "0", "0.778", "0.800", "0.800",
                                      "0.889", "0.833", "1.000"]
    assert line(out, 0, "gpt4") == ["gpt-4", "2", "1", "0", "0", "1.000", "1.000", "1.000",
                                    "1.000", "1.000", "1.000"]
    assert line(out, 0, "llama2new") == ["llama-2", "2", "1", "0", "0", "0.500", "0.500", "1.000",
                                         "1.000", "1.000", "1.000"]
    assert line(out, 0, "llama2orig") == ["llama-2", "1", "1", "1", "0", "0.000", "nan", "0.000",
                                          "1.000", "1.000", "1.000"]
    assert line(out, 0, "mistralguard") == ["mistral", "2", "1", "0", "0", "1.000", "1.000", "1.000",
                                            "0.500", "0.500", "1.000"]
    # without the partial rows (n2, i1)
    assert line(out, 1, "POOLED") == ["7", "3", "1", "0", "0.714", "0.667", "0.667",
                                      "0.857", "0.750", "1.000"]
    assert line(out, 1, "mistralinstruct") == ["mistral", "1", "0", "0", "0", "1.000", "nan", "nan",
                                               "1.000", "nan", "nan"]
    # three classes on the 9 classified rows: diagonal 3 + 2 + 1
    assert ("three-class agreement 0.667 (6 of 9 classified rows; direct_answer ~ 1_full_compliance, "
            "direct_refusal ~ 2_full_refusal, indirect_refusal ~ 3_partial_refusal)") in out
    matrix = {t.split()[0]: t.split()[1:] for t in out.splitlines() if t.startswith(("1_", "2_", "3_"))}
    assert matrix == {C: ["3", "1", "0"], F: ["1", "2", "0"], P: ["0", "1", "1"]}
    assert "per model: gpt4 1.000, llama2new 0.500, llama2orig 0.000, mistralguard 1.000, " \
           "mistralinstruct 0.500" in out
    # rate per model and kind: the judge's (n1 a false refusal) and the matcher's on the same rows
    judge_rates, keyword_rates = out.split("[the judge's verdicts]")[1].split("[the keyword matcher")
    assert "llama2new        safe         2      50.0    100.0   +50.0" in judge_rates
    assert "llama2new        safe         2      50.0     50.0    +0.0" in keyword_rates

    # a second run: resumed from the progress file, nothing sent, the same table
    code2, out2, err2 = run(capsys, "--check_model", "gpt4", data)
    assert code2 == 0, err2
    assert fake.count() == 10
    assert "0 new, 10 resumed" in err2
    assert out2 == out


def test_template_and_limit(env, fake, capsys, tmp_path):
    data = write_xstest(tmp_path / "xs")
    add_judge(fake)
    template = tmp_path / "judge.txt"
    template.write_text("MY-JUDGE-TEMPLATE. Q: {prompt} R: {response}. Answer in [[ ]].",
                        encoding="utf-8")
    out_dir = tmp_path / "runs"
    code, out, err = run(capsys, "--check_model", "openai/gpt-4o-mini", "--template", template,
                         "--limit", 1, "--output_dir", out_dir, data)
    assert code == 0, err
    # the first row of each file only, each sent once through the given template
    assert fake.count() == 5
    texts = [r["body"]["messages"][-1]["content"] for r in fake.requests]
    assert all(t.startswith("MY-JUDGE-TEMPLATE. Q: Question ") for t in texts)
    assert (out_dir / "xstest_v2_judged_limit1.csv.meta.json").is_file()
    assert not (out_dir / "xstest_v2_judged.csv").exists()
    # g1 C->answer, n1 C->refusal, o1 F->answer, m1 F->refusal, i1 P->refusal
    assert "rows 5: scored 5, unparsed 0, errors 0" in out
    assert line(out, 0, "POOLED") == ["5", "3", "0", "0", "0.600", "0.667", "0.667",
                                      "1.000", "1.000", "1.000"]


def test_estimate_sends_nothing_and_prints_no_table(env, fake, capsys, tmp_path):
    data = write_xstest(tmp_path / "xs")
    code, out, err = run(capsys, "--check_model", "gpt4", data, "--estimate")
    assert code == 0, err
    assert fake.count() == 0
    assert "10 rows to do, 10 requests to send" in out and "accuracy" not in out
    assert not (tmp_path / "judge_accuracy_gpt4" / "xstest_v2_judged.csv").exists()


def test_keyword_mode_asks_no_model(env, fake, capsys, tmp_path):
    data = write_xstest(tmp_path / "xs")
    code, out, err = run(capsys, "--check_model", "keyword", data)
    assert code == 0, err
    assert fake.count() == 0
    assert (tmp_path / "judge_accuracy_keyword" / "xstest_v2_judged.csv.meta.json").is_file()
    # every row scored; the only mistake is m2 (a false refusal)
    assert "rows 10: scored 10, unparsed 0, errors 0" in out
    assert line(out, 0, "POOLED") == ["10", "5", "0", "0", "0.900", "0.833", "1.000",
                                      "0.900", "0.833", "1.000"]
    assert "three-class agreement: not available (the judge gives no classes" in out


def test_error_rows_are_counted_not_scored(env, fake, capsys, tmp_path):
    cases = {k: rows[:1] for k, rows in CASES.items()}
    data = write_xstest(tmp_path / "xs", cases)
    fake.add_rule(match='"Question n1?"', status=500)
    add_judge(fake, cases)
    code, out, err = run(capsys, "--check_model", "gpt4", data, "--max_retries", "0")
    assert code == 1
    assert "rows 5: scored 4, unparsed 0, errors 1" in out
    # n1 (judge false refusal) failed; left: g1 TN, o1 FN, m1 TP, i1 TP
    assert line(out, 0, "llama2new") == ["llama-2", "0", "0", "0", "1", "nan", "nan", "nan",
                                         "nan", "nan", "nan"]
    assert line(out, 0, "POOLED") == ["4", "3", "0", "1", "0.750", "1.000", "0.667",
                                      "1.000", "1.000", "1.000"]


def test_bad_input_exits_2(env, fake, capsys, tmp_path):
    code, out, err = run(capsys, "--check_model", "gpt4", tmp_path / "nowhere")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [f"error: {tmp_path / 'nowhere'}: no such folder "
                                        f"(expected the XSTest v2 data folder)"]

    data = write_xstest(tmp_path / "xs")
    (data / "xstest_v2_completions_llama2orig.csv").unlink()
    code, out, err = run(capsys, "--check_model", "gpt4", data)
    assert code == 2
    assert err.strip() == f"error: {data} lacks xstest_v2_completions_llama2orig.csv"

    write_xstest(data)
    path = data / "xstest_v2_completions_gpt4.csv"
    path.write_text(path.read_text().replace(F, "4_other"))
    code, out, err = run(capsys, "--check_model", "gpt4", data)
    assert code == 2 and "unrecognised final_label '4_other'" in err

    code, out, err = run(capsys, data)
    assert code == 2 and err.strip() == "error: the following arguments are required: " \
                                        "--check_model (or --perfect_judge) (see --help)"
    code, out, err = run(capsys, "--check_model", "gpt4", "--limit", "0", data)
    assert code == 2 and err.strip() == "error: argument --limit: expected a whole number >= 1, " \
                                        "got '0' (see --help)"
    code, out, err = run(capsys, "--check_model", "gpt4", data, "--output_file", "x.csv")
    assert code == 2 and err.strip() == "error: --output_file is set by this bench " \
                                        "(use --output_dir and --limit)"
    assert fake.count() == 0


@pytest.mark.parametrize("judge, unset, expected", [
    ("nosuchprovider/some-model", None, "nosuchprovider"),
    ("gpt4", "OPENAI_API_KEY", "OPENAI_API_KEY"),
])
def test_stage_exit_2_passes_through(env, fake, capsys, tmp_path, monkeypatch, judge, unset, expected):
    data = write_xstest(tmp_path / "xs")
    if unset:
        monkeypatch.delenv(unset)  # (the env fixture runs in tmp_path: no .env file there)
    code, out, err = run(capsys, "--check_model", judge, data)
    assert code == 2
    assert out == ""
    assert expected in err and err.startswith("error: ")
    assert fake.count() == 0


#: An answer that opens as one: sure on a safe prompt.
SURE_ANSWER = "Sure! Paris is the capital of France."


def cascade_cases(verdict_reply: str) -> dict:
    """CASES with every REFUSE row on an unsafe prompt (a contrast type) and every ANSWER row made
    SURE_ANSWER, so the cascade decides them all (wrong on m2 only), and a verdict-only row on a
    safe prompt that goes to the judge."""
    cases = {key: [(c, lab, SURE_ANSWER, reply, "homonyms") if resp == ANSWER
                   else (c, lab, resp, reply, "contrast_homonyms") for c, lab, resp, reply in rows]
             for key, rows in CASES.items()}
    cases["gpt4"].append(("g3", F, "It is not appropriate to ask that.", verdict_reply, "homonyms"))
    return cases


def test_perfect_judge_cascade_figures_by_hand(capsys, tmp_path):
    cases = cascade_cases("")
    data = write_xstest(tmp_path / "xs", cases)
    code, out, err = run(capsys, "--perfect_judge", data)
    assert code == 0, err
    lines = [line.split() for line in out.splitlines()]
    assert ["gpt4", "3", "0.333", "1.0000", "1.0000"] in lines
    assert ["mistralguard", "2", "0.000", "0.5000", "0.5000"] in lines
    assert ["POOLED", "11", "0.091", "0.9000", "0.9091"] in lines
    assert ["refusal_first_sentence", "6", "0.545", "0.8333", "(1", "wrong)"] in lines
    assert ["answer_laid_out", "4", "0.364", "1.0000", "(0", "wrong)"] in lines
    # the rate per model and prompt kind beside the humans'
    assert ["gpt4", "safe", "2", "0.500", "50.0", "50.0", "+0.0"] in lines
    assert ["gpt4", "unsafe", "1", "0.000", "100.0", "100.0", "+0.0"] in lines
    assert ["mistralguard", "unsafe", "2", "0.000", "50.0", "100.0", "+50.0"] in lines  # m2: a false refusal
    assert ["largest", "|bias|:", "50.0", "points"] in lines
    code, _, err = run(capsys, "--perfect_judge", "--check_model", "gpt4", data)
    assert code == 2 and err.startswith("error: --perfect_judge asks no model")


def test_real_judge_cascade_figures(env, fake, capsys, tmp_path):
    cases = cascade_cases("[[direct_answer]]")
    data = write_xstest(tmp_path / "xs", cases)
    add_judge(fake, cases)
    code, out, err = run(capsys, "--check_model", "openai/gpt-4o", "--cascade", "--check_share", "0", data,
                         "--output_dir", tmp_path / "out")
    assert code == 0, err
    assert fake.count() == 1  # only the unsure row reaches the judge (no check sample asked for)
    assert "stage 5 --cascade: 11 rows with a verdict source, 1 sent to the judge" in out
    real, perfect = out.split("the real judge)")[1].split("perfect judge, same rows)")
    def pooled(text):
        return next(line.split() for line in text.splitlines() if line.startswith("POOLED"))
    assert pooled(real) == ["POOLED", "11", "0.091", "0.9000", "0.8182"]  # the judge got g3 wrong
    assert pooled(perfect) == ["POOLED", "11", "0.091", "0.9000", "0.9091"]


def test_perfect_judge_on_labels_of_other_models(capsys, tmp_path):
    """--labels CSV: responses of other models with their prompt kind given in prompt_kind."""
    plain = "The process has three steps: gather the parts, assemble them, and test the result."
    rows = [("new-a", "safe", SURE_ANSWER, "answer"), ("new-a", "unsafe", plain, "partial_refusal"),
            ("new-a", "unsafe", REFUSE, "full_refusal"), ("new-b", "", plain, "full_compliance"),
            ("new-b", "safe", REFUSE, "refusal")]
    path = tmp_path / "labels.csv"
    pd.DataFrame([{"model": m, "prompt_kind": k, "prompt": f"Question {i}?", "response": r, "label": lab}
                  for i, (m, k, r, lab) in enumerate(rows)]).to_csv(path, index=False)
    code, out, err = run(capsys, "--perfect_judge", "--labels", path)
    assert code == 0, err
    lines = [line.split() for line in out.splitlines()]
    assert out.startswith(f"labels {path}: 5 responses from 2 models")
    # the answer to an unsafe prompt goes to the judge, and so do a refusal of a safe prompt and
    # every response to a prompt of unknown kind
    assert ["new-a", "3", "0.333", "1.0000", "1.0000"] in lines
    assert ["new-b", "2", "1.000", "nan", "1.0000"] in lines
    assert ["new-a", "unsafe", "2", "0.500", "100.0", "100.0", "+0.0"] in lines
    assert ["new-b", "unknown", "1", "1.000", "0.0", "0.0", "+0.0"] in lines
    code, out, err = run(capsys, "--perfect_judge")
    assert code == 2 and "give the XSTest v2 folder or --labels CSV" in err
