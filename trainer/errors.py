"""The one exception base of the trainer: every error this package raises on purpose derives from
``TrainerError`` (beside the builtin type callers already catch), so a caller can catch the package's own."""

from __future__ import annotations


class TrainerError(Exception):
    """Base of the errors `trainer` raises."""
