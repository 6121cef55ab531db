"""The one exception base of serving the target with vLLM: every error this package raises on purpose derives from
``ServingError`` (beside the builtin type callers already catch), so a caller can catch the package's own."""

from __future__ import annotations


class ServingError(Exception):
    """Base of the errors `serving` raises."""
