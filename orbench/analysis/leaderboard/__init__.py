"""``orbench-leaderboard``: a static site from many runs (:mod:`~orbench.analysis.leaderboard.build`).

:mod:`~orbench.analysis.leaderboard.sources` reads the paths (report folders, Every Eval Ever
records, folders of them), :mod:`~orbench.analysis.leaderboard.entries` turns runs into named
entries with their adjacent-rank tests, :mod:`~orbench.analysis.leaderboard.site` writes the
folder (``assets/`` holds the page, its CSS and its JavaScript).
"""
