"""OR-Bench in other frameworks: inspect_ai tasks and scorers, and inspect logs back to CSV."""
