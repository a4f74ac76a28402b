"""OR-Bench pipeline: the one installable package of this project, a folder per layer.

``orbench.llm`` talks to models (provider table, client, cache, pacer, batch APIs, one module per
wire protocol under ``llm.providers``); ``orbench.run`` is the resumable CSV runner every stage goes
through (lifecycle, flags, settings and row keys, tables, provenance); ``orbench.scoring`` turns
replies into verdicts (keyword matchers, cascade, label parsing, judge cards); ``orbench.benchmark``
holds the benchmark's own data (categories, named sets, prompt templates). On top of them,
``orbench.stages`` has the five pipeline stages, ``orbench.analysis`` the report, the audit, judge
calibration and the release builder, and ``orbench.integrations`` the inspect_ai tasks. The
scripts in the project's stage folders and in ``analysis/`` are thin entry points into them.

From Python, the same runs are one call each (``orbench.api``, loaded on first use)::

    import orbench
    answers = orbench.evaluate("or-bench-hard-1k", "openai/gpt-4o", limit=20)
    verdicts = orbench.judge(answers)            # keyword verdicts; check_model="gpt4" for the judge
    print(orbench.report(verdicts).summary)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

__all__ = ["evaluate", "evaluate_async", "judge", "judge_async", "generate", "generate_async",
           "rewrite", "rewrite_async", "moderate", "moderate_async", "report", "report_async",
           "calibrate", "calibrate_async", "ask", "ask_async", "Report", "Card", "UsageError", "RowError",
           "__version__"]

if TYPE_CHECKING:  # for type checkers and editors; at run time they load on first use (below)
    from orbench.api import (  # noqa: F401 - names for type checkers, loaded at run time by __getattr__
        Card,
        Report,
        RowError,
        UsageError,
        ask,
        ask_async,
        calibrate,
        calibrate_async,
        evaluate,
        evaluate_async,
        generate,
        generate_async,
        judge,
        judge_async,
        moderate,
        moderate_async,
        report,
        report_async,
        rewrite,
        rewrite_async,
    )


def __getattr__(name: str):
    """The public API (``orbench.api``), imported on first use: ``import orbench`` stays light for the
    scripts, which import only the layers they need."""
    if name in __all__:
        from orbench import api

        value = getattr(api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'orbench' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
