"""The one exception base of the Docker sandboxes: every error this package raises on purpose derives from
``SandboxError`` (beside the builtin type callers already catch), so a caller can catch the package's own."""

from __future__ import annotations


class SandboxError(Exception):
    """Base of the errors `sandboxes` raises."""


class SandboxSetupError(SandboxError, RuntimeError):
    """The machine could not give a sandbox what it needs: Docker, an image build, iptables, a patch."""


class SandboxInputError(SandboxError, ValueError):
    """What was asked of the sandboxes is wrong: an unknown agent or family, a revision, a proxy URL."""
