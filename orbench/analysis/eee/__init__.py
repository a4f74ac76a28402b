"""Every Eval Ever (github.com/evaleval/every_eval_ever, schema 0.3.0): results that travel.

:mod:`~orbench.analysis.eee.records` writes a report's results as Every Eval Ever records (one
aggregate JSON per model and benchmark, its per-sample JSONL beside it, in the datastore's
``data/<benchmark>/<developer>/<model>/<uuid>.json`` layout); :mod:`~orbench.analysis.eee.hub` writes
the Hugging Face ``.eval_results`` snippets for a model card; :mod:`~orbench.analysis.eee.read`
reads records, ours and other tools', for the leaderboard.
"""

#: The schema version the records are written in (and the shared copies in ``shared/data`` are).
SCHEMA_VERSION = "0.3.0"
#: The report's sub-folder holding the records.
FOLDER = "every_eval_ever"
#: ``source_metadata.source_name`` of the records this suite writes.
SOURCE_NAME = "orbench"
#: Prefix of the suite's own keys in the records' ``additional_details`` maps.
KEY = "orbench_"
