"""The one exception base of the model layer and its stand-in server: every error this package raises on
purpose derives from ``LmError`` (beside the builtin type callers already catch), so a caller can catch the package's own."""

from __future__ import annotations


class LmError(Exception):
    """Base of the errors `lm` raises."""
