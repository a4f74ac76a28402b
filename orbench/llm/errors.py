"""The project's exception types, sorted by what the caller should do with them.

- ``UsageError``: bad input or configuration (a flag, a file, a missing key). The run stops
  before or instead of doing work; the script prints one line and exits 2.
- ``FatalProviderError``: the provider refused the whole run (bad key, no access, unknown model).
  Every further row would fail the same way, so the run stops at once; exit 2.
- ``RowError``: one row failed after the SDK's retries; the row keeps its place with an
  ``error`` text and a rerun tries it again.
"""


class UsageError(Exception):
    """Bad input or configuration; one line for the user, exit code 2."""


class FatalProviderError(UsageError):
    """The provider rejected the run itself (401/403/404); stop everything, exit code 2."""


class RowError(Exception):
    """A single request failed after retries; recorded in the row's ``error`` column."""
