"""The names of the prompt sets and where each one is: bundled copies of OR-Bench's Hard-1K and
Toxic and of XSTest's safe and unsafe prompts in ``orbench/data``, the hub path of OR-Bench-80K;
and each set's *prompt kind* (:data:`SET_KINDS`).

A set name works wherever an input path does (``--input_file or-bench-hard-1k``,
``--input_file xstest-safe``): the one table reader (``orbench.run.tables``) resolves it here.
``orbench.benchmark.datasets`` re-exports these names and adds the sampling command.

Prompt kinds. A prompt is ``safe`` (meant to be answered: Hard-1K, 80K, XSTest's 250 safe
prompts) or ``unsafe`` (meant to be refused: Toxic, XSTest's 200 unsafe contrast prompts).
Stage 4 records it in ``prompt_kind`` and stage 5's cascade uses it (a plain answer is not
taken as sure on a prompt meant to be refused). :func:`prompt_kind` decides it for one row: the
row's own ``prompt_kind`` cell (a column of your prompt file), else the kind declared for the
whole input (``--prompt_kind``), else the kind of the bundled set the prompt text belongs to,
else unknown (empty).
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

from orbench.llm.errors import UsageError
from orbench.scoring.vocab import PROMPT_KINDS, SAFE_PROMPT, UNSAFE_PROMPT

HARD_1K = "or-bench-hard-1k"
TOXIC = "or-bench-toxic"
EIGHTY_K = "or-bench-80k"
XSTEST_SAFE = "xstest-safe"
XSTEST_UNSAFE = "xstest-unsafe"
SET_NAMES = (HARD_1K, TOXIC, EIGHTY_K, XSTEST_SAFE, XSTEST_UNSAFE)
#: What each named set's prompts are meant to get: an answer (safe) or a refusal (unsafe).
SET_KINDS = {HARD_1K: SAFE_PROMPT, TOXIC: UNSAFE_PROMPT, EIGHTY_K: SAFE_PROMPT,
             XSTEST_SAFE: SAFE_PROMPT, XSTEST_UNSAFE: UNSAFE_PROMPT}
#: The column that carries a prompt's kind (stage 4 writes it; a prompt file may bring its own).
PROMPT_KIND_COLUMN = "prompt_kind"

HUB_80K = "hf://datasets/bench-llm/or-bench/or-bench-80k.csv"
_BUNDLED = {HARD_1K: "or-bench-hard-1k.csv", TOXIC: "or-bench-toxic.csv",
            XSTEST_SAFE: "xstest-safe.csv", XSTEST_UNSAFE: "xstest-unsafe.csv"}
PUBLISHED_RESULTS = "published_results.csv"
#: XSTest, whose prompts ``xstest-safe`` and ``xstest-unsafe`` are (CC-BY-4.0).
XSTEST_CITATION = ('Paul Röttger, Hannah Rose Kirk, Bertie Vidgen, Giuseppe Attanasio, Federico '
                   'Bianchi, Dirk Hovy. "XSTest: A Test Suite for Identifying Exaggerated Safety '
                   'Behaviours in Large Language Models". NAACL 2024.')
#: The paper the sets and the published results come from (cited in the report and its plot).
CITATION = ('Justin Cui, Wei-Lin Chiang, Ion Stoica, Cho-Jui Hsieh. "OR-Bench: An Over-Refusal '
            'Benchmark for Large Language Models". arXiv:2405.20947, 2024.')

#: What a published leaderboard row is (the paper's figures, not a run of this suite); format it
#: with the set sizes ``hard`` and ``toxic``.
PUBLISHED_ABOUT = ("the paper's figure: all {hard} Hard-1K and {toxic} Toxic prompts, temperature 0, "
                   "no system prompt, verdicts by the paper's LLM judge (direct_answer / direct_refusal / "
                   "indirect_refusal; both refusals count)")


def data_path(file: str) -> Path:
    """The path of a file shipped in ``orbench/data``."""
    return Path(str(resources.files("orbench") / "data" / file))


def resolve_set(name: str) -> str | None:
    """The path or URL a set name stands for (``or-bench-hard-1k`` -> the bundled CSV), else None.

    Names match case-insensitively, with or without ``.csv``; anything else is not a set name.
    """
    key = str(name).strip().lower()
    if key.endswith(".csv"):
        key = key[:-4]
    if key in _BUNDLED:
        return str(data_path(_BUNDLED[key]))
    if key == EIGHTY_K:
        return HUB_80K
    return None


def published_results_path() -> Path:
    """The paper's per-model Hard-1K and Toxic rejection rates (32 models)."""
    return data_path(PUBLISHED_RESULTS)


def _set_key(name: str) -> str:
    key = str(name).strip().lower()
    return key[:-4] if key.endswith(".csv") else key


def set_kind(name: str) -> str:
    """The prompt kind of a named set (``or-bench-toxic`` -> ``unsafe``), else ``""``."""
    return SET_KINDS.get(_set_key(name), "")


@cache
def bundled_prompt_kinds() -> dict[str, str]:
    """{prompt text (stripped): kind} over every bundled set; how a prompt is recognised."""
    import csv

    kinds: dict[str, str] = {}
    for name, file in _BUNDLED.items():
        with open(data_path(file), newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                kinds[row["prompt"].strip()] = SET_KINDS[name]
    return kinds


def check_kind(value: str, where: str) -> str:
    """``value`` as a prompt kind (``""`` for an empty cell); ``UsageError`` naming ``where`` otherwise."""
    text = str(value or "").strip().lower()
    if text and text not in PROMPT_KINDS:
        raise UsageError(f"{where}: prompt_kind {value!r} is not a prompt kind (expected "
                         f"{' or '.join(PROMPT_KINDS)}, or empty when unknown)")
    return text


def check_kind_column(table, where: str) -> None:
    """``UsageError`` naming the first row of ``table`` whose ``prompt_kind`` cell is not a kind."""
    if PROMPT_KIND_COLUMN not in table.columns:
        return
    cells = table[PROMPT_KIND_COLUMN].astype(str).str.strip().str.lower()
    bad = ~cells.isin(("", "nan", *PROMPT_KINDS))
    if bad.any():
        position = int(bad.to_numpy().nonzero()[0][0])
        check_kind(table[PROMPT_KIND_COLUMN].iloc[position], f"{where}, row {position + 2}")


def prompt_kind(row: dict, declared: str = "") -> str:
    """The kind of one row's prompt: its ``prompt_kind`` cell, else ``declared`` (the kind given for
    the whole input), else the kind of the bundled set its text belongs to, else ``""``."""
    own = str(row.get(PROMPT_KIND_COLUMN) or "").strip().lower()
    if own in PROMPT_KINDS:
        return own
    if declared:
        return declared
    return bundled_prompt_kinds().get(str(row.get("prompt") or "").strip(), "")


def with_prompt_kinds(frame, declared: str = ""):
    """``frame`` with its ``prompt_kind`` column filled for every row (:func:`prompt_kind`): kept in
    place where the input had one, else added before ``error`` when any row's kind is known (a file
    of prompts of no known kind stays as it was). Stages 4 and 5 call it on their finished output,
    so a row's kind is never a stale value from an earlier run's progress file."""
    kinds = [prompt_kind(row, declared) for row in frame.to_dict("records")]
    if PROMPT_KIND_COLUMN in frame.columns:
        frame[PROMPT_KIND_COLUMN] = kinds
        return frame
    if not any(kinds):
        return frame
    position = list(frame.columns).index("error") if "error" in frame.columns else len(frame.columns)
    frame.insert(position, PROMPT_KIND_COLUMN, kinds)
    return frame
