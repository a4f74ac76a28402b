"""A seeded mix of provider faults through the real SDKs: no row may come out silently wrong.

Each row of the input gets, from a seeded schedule, zero or more faults from the fake provider
(429 with ``Retry-After: 0``, 500, 502 with an HTML page, a malformed body, empty ``choices``,
null content, a dropped connection) for its first few requests, or a content filter on every
request. The stage runs, then reruns (bounded) until it exits 0. After every run each row must be
exactly one of: the fake's answer for that prompt, a documented provider block (only where the
fake blocked), or an error row whose own columns are all empty. Anything else is a row silently
wrong, and the test counts them and asserts zero.
"""

from __future__ import annotations

import random

import pandas as pd
import pytest
from conftest import read

from orbench.stages import check_alignment, moderate

FAULTS = [
    {"status": 429, "retry_after": "0"},
    {"status": 500},
    {"status": 502, "html": True},
    {"malformed": True},
    {"empty_choices": True},
    {"null_content": True},
    {"drop": True},
]
ALIGN_ADDS = ["model", "response", "is_rejected", "refusal_source", "refusal_kind", "finish_reason"]
MAX_RUNS = 6


# which rows come out how is tested, not the pauses between retries (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("quick_backoff")


def schedule(fake, rng: random.Random, marker: str, model: str | None = None) -> bool:
    """Give ``marker`` a random fault plan on the fake; True when it is blocked for good."""
    roll = rng.random()
    if roll < 0.05:
        fake.add_rule(match=marker, model=model, content_filter=True)
        return True
    if roll < 0.45:
        for _ in range(rng.randint(1, 2)):  # one or two faults, each for one to three requests
            fake.add_rule(match=marker, model=model, times=rng.randint(1, 3), **rng.choice(FAULTS))
    return False


def check_rows(path, prompts: list[str], row_ok) -> None:
    """The output at ``path`` has one row per prompt, in order, and ``row_ok(i, row)`` holds for
    every row: none is silently wrong (those that are, are listed)."""
    out = read(path)
    assert list(out.prompt) == prompts
    wrong = [(i, dict(row)) for i, row in out.iterrows() if not row_ok(i, row)]
    assert wrong == [], f"{len(wrong)} rows silently wrong, e.g. {wrong[:3]}"


def run_until_done(main, argv: list[str], check) -> list[int]:
    """Run, check every row, rerun until exit 0 (bounded); the exit codes seen."""
    codes = []
    for _ in range(MAX_RUNS):
        codes.append(main(argv))
        assert codes[-1] in (0, 1), codes
        check()
        if codes[-1] == 0:
            break
    return codes


def test_fault_mix_stage4_no_row_silently_wrong(env, fake, tmp_path):
    rng = random.Random(20240531)
    n = 300
    prompts = [f"<r{i:04d}> How do I look after a houseplant, variant {i}?" for i in range(n)]
    pd.DataFrame({"prompt": prompts, "category": "harmful"}).to_csv(tmp_path / "in.csv", index=False)
    blocked = {i for i in range(n) if schedule(fake, rng, f"<r{i:04d}>")}
    faulted = len(fake.rules)
    argv = ["--model", "openai/gpt-4o", "--input_file", "in.csv", "--output_file", "out.csv",
            "--max_retries", "2", "--concurrency", "64"]
    seen = {"answer": 0, "block": 0, "error": 0}

    def row_ok(i: int, row) -> bool:
        if row.error:
            ok = (row.error.startswith("check_alignment: ")
                  and all(row[c] == "" for c in ALIGN_ADDS))
            kind = "error"
        elif row.refusal_source == "provider_block":
            ok = (i in blocked and row.response == "" and row.is_rejected == "True"
                  and row.finish_reason == "content_filter" and row.model == "openai/gpt-4o")
            kind = "block"
        else:
            ok = (i not in blocked and row.response == f"Fake answer to: {prompts[i]}"
                  and row.is_rejected == "False" and row.refusal_source == ""
                  and row.refusal_kind == "" and row.finish_reason == "stop"
                  and row.model == "openai/gpt-4o")
            kind = "answer"
        seen[kind] += 1
        return ok

    codes = run_until_done(check_alignment.main, argv, lambda: check_rows(tmp_path / "out.csv", prompts, row_ok))
    assert codes[-1] == 0, codes
    final = read(tmp_path / "out.csv")
    assert set(final.index[final.refusal_source == "provider_block"]) == blocked
    assert (final.error == "").all()
    # the schedule really exercised the faults: some rows failed in the first run
    assert faulted >= 100 and len(blocked) >= 5 and seen["error"] > 0 and codes[0] == 1


def test_fault_mix_moderation_ensemble_never_flips(env, fake, tmp_path):
    rng = random.Random(7)
    n, models = 120, ("mod-a", "mod-b", "mod-c")
    prompts = [f"<m{i:04d}> What is the boiling point of water at altitude {i}?" for i in range(n)]
    pd.DataFrame({"prompt": prompts}).to_csv(tmp_path / "in.csv", index=False)
    blocked = {(i, m) for i in range(n) for m in models if schedule(fake, rng, f"<m{i:04d}>", m)}
    fake.add_rule(text="Ordinary question. [[11. None of the above]]")
    argv = ["--moderator_model", ",".join(f"openai/{m}" for m in models), "--input_file", "in.csv",
            "--output_file", "out.csv", "--max_retries", "2", "--concurrency", "48"]
    own = [f"openai_{m}_{part}" for m in models for part in ("label", "is_toxic", "raw")] + [
        "is_toxic", "moderation_category", "toxic_votes", "safe_votes", "unparsed_votes"]

    def expected(i: int) -> dict:
        """By hand: a block is a toxic vote, the fake's answer a safe one; three voters, majority."""
        labels = ["provider_block" if (i, m) in blocked else "none" for m in models]
        toxic = labels.count("provider_block")
        return {"is_toxic": str(toxic >= 2), "moderation_category": "provider_block" if toxic >= 2 else "none",
                "toxic_votes": str(toxic), "safe_votes": str(3 - toxic), "unparsed_votes": "0",
                **{f"openai_{m}_label": labels[k] for k, m in enumerate(models)}}

    def row_ok(i: int, row) -> bool:
        if row.error:
            return row.error.startswith("moderate: ") and all(row[c] == "" for c in own)
        return {k: row[k] for k in expected(i)} == expected(i)

    codes = run_until_done(moderate.main, argv, lambda: check_rows(tmp_path / "out.csv", prompts, row_ok))
    assert codes[-1] == 0 and codes[0] == 1, codes
    assert blocked  # the seed puts some provider blocks in the ensemble
    votes = pd.Series([sum((i, m) in blocked for m in models) for i in range(n)])
    assert (votes == 1).any()  # a lone block, outvoted
