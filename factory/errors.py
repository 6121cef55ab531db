"""The one exception base of the factory: every error this package raises on purpose derives from
``FactoryError`` (beside the builtin type callers already catch), so a caller can catch the package's own."""

from __future__ import annotations


class FactoryError(Exception):
    """Base of the errors `factory` raises."""
