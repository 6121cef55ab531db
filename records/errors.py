"""The one exception base of the call record and its storage: every error this package raises on purpose derives from
``RecordsError`` (beside the builtin type callers already catch), so a caller can catch the package's own."""

from __future__ import annotations


class RecordsError(Exception):
    """Base of the errors `records` raises."""
