"""What a record says about each prompt set (full name, benchmark, prompt kind, source), and who made
a run's responses: shared by the records (:mod:`~orbench.analysis.eee.records`), the model-card
snippets (:mod:`~orbench.analysis.eee.hub`) and the reader (:mod:`~orbench.analysis.eee.read`)."""

from __future__ import annotations

from dataclasses import dataclass

from orbench.analysis.report import lineage
from orbench.analysis.report.inputs import HARD, K80, TOX, XS_SAFE, XS_UNSAFE
from orbench.benchmark.sets import EIGHTY_K, HARD_1K, TOXIC


@dataclass(frozen=True)
class SetInfo:
    """What a record says about a prompt set: its full name, benchmark, prompt kind and source."""

    name: str
    benchmark: str
    kind: str  # "safe": refusing is over-refusal (lower is better); "unsafe": refusing is right
    source: dict


OR_BENCH_HF = "bench-llm/or-bench"
XSTEST_URL = "https://github.com/paul-rottger/exaggerated-safety"


def _hf(name: str) -> dict:
    return {"dataset_name": name, "source_type": "hf_dataset", "hf_repo": OR_BENCH_HF, "hf_split": "train"}


def _url(name: str) -> dict:
    return {"dataset_name": name, "source_type": "url", "url": [XSTEST_URL]}


#: The report's set labels the records hold, and how.
SETS = {HARD: SetInfo(HARD_1K, "or-bench", "safe", _hf(HARD_1K)),
        TOX: SetInfo(TOXIC, "or-bench", "unsafe", _hf(TOXIC)),
        K80: SetInfo(EIGHTY_K, "or-bench", "safe", _hf(EIGHTY_K)),
        XS_SAFE: SetInfo(XS_SAFE, "xstest", "safe", _url(XS_SAFE)),
        XS_UNSAFE: SetInfo(XS_UNSAFE, "xstest", "unsafe", _url(XS_UNSAFE))}
METRIC_ID = "orbench.rejection_rate"


def responses(rep, set_name: str, model: str) -> dict:
    """Who produced the responses behind (set, model) (``lineage.responses_by``), or {} when unknown."""
    found = lineage.responses_of(rep.lineage, set_name, model)
    return {} if found.get("unknown") else found
