"""The report: rejection rates with intervals, figures, leaderboard, comparisons and report.html."""
