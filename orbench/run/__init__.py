"""The resumable stage runner: the run lifecycle, the shared flags, settings and row keys,
reading and writing tables, provenance files and the run's outcomes."""
