"""OR-Bench pipeline: the one installable package of this project.

The shared library (provider table and clients, cache, the CSV stage runner, refusal rules,
label parsing, the vocabulary of outputs) sits at the top level; ``orbench.llm.providers`` holds one
module per wire protocol, ``orbench.stages`` the five pipeline stages, and ``orbench.analysis``
the report and the release builder. The scripts in the project's stage folders and in
``analysis/`` are thin entry points into ``orbench.stages`` and ``orbench.analysis``.
"""

__version__ = "0.1.0"
