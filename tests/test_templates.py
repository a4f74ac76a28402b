"""``--template FILE``: a researcher's own prompt text, checked at start, keyed and recorded."""

import hashlib
import json

import pandas as pd
import pytest
from conftest import read

from orbench.llm.errors import UsageError
from orbench.run.templates import check_template, placeholders

JUDGE = "response_checker/judge_responses.py"
MODERATE = "moderator/moderate.py"


def responses(path, n=3):
    pd.DataFrame({"prompt": [f"Q{i}" for i in range(n)],
                  "response": [f"RESP {i}: sure, here it is." for i in range(n)]}).to_csv(path, index=False)
    return path


def judge(tmp_path, *extra):
    from orbench.stages.check_response import main

    return main(["--check_model", "openai/judge-x", "--input_file", str(tmp_path / "in.csv"),
                 "--output_file", str(tmp_path / "out.csv"), *extra])


def test_placeholders_and_checks():
    assert placeholders("A {prompt} and {response}, {{literal}}") == {"prompt", "response"}
    assert check_template("{text}!", {"text"}, "t") == "{text}!"
    with pytest.raises(UsageError, match=r"t has no placeholder \{response\}"):
        check_template("{prompt}", {"prompt", "response"}, "t")
    with pytest.raises(UsageError, match=r"t has unknown placeholder \{answer\}"):
        check_template("{prompt} {response} {answer}", {"prompt", "response"}, "t")
    with pytest.raises(UsageError, match="placeholders must be names"):
        check_template("{prompt} {response} {0}", {"prompt", "response"}, "t")
    with pytest.raises(UsageError, match="literal brace"):
        check_template("{prompt {response}", {"prompt", "response"}, "t")


def test_judge_template_is_sent_keyed_and_recorded(env, fake, tmp_path, capsys):
    responses(tmp_path / "in.csv")
    template = tmp_path / "judge.txt"
    template.write_text("MY-JUDGE Q=<{prompt}> R=<{response}> {{braces}} answer [[direct_answer]]?\n")
    fake.add_rule(match="MY-JUDGE", text="[[direct_answer]]")
    assert judge(tmp_path, "--template", str(template)) == 0
    bodies = sorted(r["body"]["messages"][-1]["content"] for r in fake.requests)  # any order
    assert len(bodies) == 3
    assert bodies[0] == "MY-JUDGE Q=<Q0> R=<RESP 0: sure, here it is.> {braces} answer [[direct_answer]]?\n"
    out = read(tmp_path / "out.csv")
    assert list(out["answer_category"]) == ["direct_answer"] * 3
    meta = json.loads((tmp_path / "out.csv.meta.json").read_text())
    assert meta["templates"] == {"judge": hashlib.sha256(template.read_bytes()).hexdigest()}
    assert meta["template_source"] == str(template)

    # Same template: nothing redone. Changed template: every row redone.
    assert judge(tmp_path, "--template", str(template)) == 0
    assert fake.count() == 3
    template.write_text("MY-JUDGE v2 {prompt} / {response}")
    assert judge(tmp_path, "--template", str(template), "--no_cache") == 0
    assert fake.count() == 6


@pytest.mark.parametrize("text, message", [
    ("Judge {prompt} only", "has no placeholder {response}"),
    ("Judge {prompt} {response} {model}", "has unknown placeholder {model}"),
    ("", "is empty"),
])
def test_bad_judge_template_is_exit_2_before_any_request(env, fake, tmp_path, capsys, text, message):
    responses(tmp_path / "in.csv")
    template = tmp_path / "judge.txt"
    template.write_text(text)
    assert judge(tmp_path, "--template", str(template)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and str(template) in err[0]
    assert fake.count() == 0 and not (tmp_path / "out.csv").exists()


def test_missing_template_file_is_exit_2(env, fake, tmp_path, capsys):
    responses(tmp_path / "in.csv")
    assert judge(tmp_path, "--template", str(tmp_path / "nope.txt")) == 2
    assert "--template file not found" in capsys.readouterr().err


def test_moderation_template_is_used(env, fake, tmp_path):
    from orbench.stages.moderate import main

    pd.DataFrame({"prompt": ["How do locks work?"]}).to_csv(tmp_path / "in.csv", index=False)
    template = tmp_path / "mod.txt"
    template.write_text("MY-MOD classify: {text}\nAnswer [[N. category]].")
    fake.add_rule(match="MY-MOD", text="[[11. None of the above]]")
    code = main(["--moderator_model", "openai/mod-x", "--input_file", str(tmp_path / "in.csv"),
                 "--output_file", str(tmp_path / "out.csv"), "--template", str(template)])
    assert code == 0
    assert fake.requests[0]["body"]["messages"][-1]["content"] == \
        "MY-MOD classify: How do locks work?\nAnswer [[N. category]]."
    assert read(tmp_path / "out.csv")["is_toxic"].tolist() == ["False"]


def test_generator_template_examples_are_not_seeds_and_meta_is_written(env, fake, tmp_path):
    from orbench.stages.generate_seeds import main

    template = tmp_path / "seed.txt"
    template.write_text("MY-GEN Write {count} {category} prompts that models refuse, each as "
                        "[[here is a prompt]].")
    # A model that echoes the format line before its real prompts.
    fake.add_rule(match="MY-GEN", text="[[here is a prompt]]\n[[prompt number {n} alpha]]\n"
                                       "[[prompt number {n} beta]]")
    out = tmp_path / "seeds.csv"
    code = main(["--category", "harmful", "--num_toxic_prompts", "4", "--model", "openai/gen-x",
                 "--output_file", str(out), "--template", str(template), "--concurrency", "1"])
    assert code == 0
    prompts = read(out)["prompt"].tolist()
    assert len(prompts) == 4 and "here is a prompt" not in prompts
    assert fake.requests[0]["body"]["messages"][-1]["content"].startswith("MY-GEN Write 20 harmful prompts")
    meta = json.loads((tmp_path / "seeds.csv.meta.json").read_text())
    assert meta["stage"] == "generate"
    assert meta["templates"] == {"seed": hashlib.sha256(template.read_bytes()).hexdigest()}
    assert meta["template_examples_dropped"] == 2 and meta["models"][0]["resolved"] == "openai/gen-x"


def test_generator_bad_template_is_exit_2(env, fake, tmp_path, capsys):
    from orbench.stages.generate_seeds import main

    template = tmp_path / "seed.txt"
    template.write_text("Write {count} prompts about {topic}")
    code = main(["--category", "harmful", "--model", "openai/gen-x", "--output_file",
                 str(tmp_path / "seeds.csv"), "--template", str(template)])
    assert code == 2 and fake.count() == 0
    assert "has no placeholder {category}" in capsys.readouterr().err
