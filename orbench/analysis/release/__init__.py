"""The release builder: safe, hard and toxic subsets, near-duplicates, a dataset card."""
