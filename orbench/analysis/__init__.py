"""Reading results back: the report and the release builder, with their helpers.

``report`` (rates, Wilson intervals, plots, leaderboard, ``report.html``) reads its inputs with
``report_inputs`` and draws with ``plots`` (the only module here that loads matplotlib) and
``html_report``; ``stats`` holds the statistics. ``compare`` holds the paired comparisons
(``--compare``/``--baseline``) and the repeated-sample statistics (scipy/statsmodels), and
``compare_hook`` writes their files and report sections. ``build_release`` (the safe, hard and toxic
subsets) uses ``near_dup`` and ``report_inputs.expand``, never the report itself.
``audit`` (``orbench-audit``: sample, page, score) draws blind stratified samples with
``audit_sample``, writes the labelling page with ``audit_page``, reads labels with
``audit_labels`` and scores them with ``audit_stats`` (scikit-learn, statsmodels, krippendorff);
``audit_report`` carries an audit into the report (``--audit``).
``analysis/report.py``, ``analysis/audit.py`` and ``analysis/build_release.py`` are thin entry
points to ``main`` here.
"""
