"""Reading results back: the report, the human audit, judge calibration and the release builder.

Shared here: ``stats`` (every interval rule and the tests' names for them), ``compare`` (paired
comparisons for ``--compare``/``--baseline`` and the repeated-sample statistics) and ``html_kit``
(the pages' HTML helpers). Each command has its folder: ``report`` (``orbench-report``: reading
inputs columnar, computing, then writing the files, plots and ``report.html``), ``audit``
(``orbench-audit``: plan, sample, page, score), ``calibration`` (``orbench-calibrate``: judge cards)
and ``release`` (``orbench-release``: the safe, hard and toxic subsets, near-duplicates).
``analysis/report.py``, ``audit.py``, ``calibrate.py``, ``build_release.py`` and ``inspect_to_csv.py``
at the project's top are thin entry points to their ``main``.
"""
