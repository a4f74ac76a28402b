"""The names of the OR-Bench prompt sets and where each one is: bundled copies of Hard-1K and
Toxic in ``orbench/data``, the hub path of 80K.

A set name works wherever an input path does (``--input_file or-bench-hard-1k``): the one table
reader (``orbench.tables``) resolves it here. ``orbench.datasets`` re-exports these names and adds
the sampling command.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

HARD_1K = "or-bench-hard-1k"
TOXIC = "or-bench-toxic"
EIGHTY_K = "or-bench-80k"
SET_NAMES = (HARD_1K, TOXIC, EIGHTY_K)

HUB_80K = "hf://datasets/bench-llm/or-bench/or-bench-80k.csv"
_BUNDLED = {HARD_1K: "or-bench-hard-1k.csv", TOXIC: "or-bench-toxic.csv"}
PUBLISHED_RESULTS = "published_results.csv"
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
