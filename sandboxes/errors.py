"""The one exception base of the Docker sandboxes: every error this package raises on purpose derives from
``SandboxError`` (beside the builtin type callers already catch), so a caller can catch the package's own."""

from __future__ import annotations


class SandboxError(Exception):
    """Base of the errors `sandboxes` raises."""
