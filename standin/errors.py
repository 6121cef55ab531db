"""The one exception base of the stand-in target and its server: every error this package raises on purpose derives from
``StandinError`` (beside the builtin type callers already catch), so a caller can catch the package's own."""

from __future__ import annotations


class StandinError(Exception):
    """Base of the errors `standin` raises."""
