"""OR-Bench pipeline: the one installable package of this project, a folder per layer.

``orbench.llm`` talks to models (provider table, client, cache, pacer, batch APIs, one module per
wire protocol under ``llm.providers``); ``orbench.run`` is the resumable CSV runner every stage goes
through (lifecycle, flags, settings and row keys, tables, provenance); ``orbench.scoring`` turns
replies into verdicts (keyword matchers, cascade, label parsing, judge cards); ``orbench.benchmark``
holds the benchmark's own data (categories, named sets, prompt templates). On top of them,
``orbench.stages`` has the five pipeline stages, ``orbench.analysis`` the report, the audit, judge
calibration and the release builder, and ``orbench.integrations`` the inspect_ai tasks. The
scripts in the project's stage folders and in ``analysis/`` are thin entry points into them.
"""

__version__ = "0.1.0"
