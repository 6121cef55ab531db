"""The one exception base of clikit: what a generated command raises derives from ``ClikitError``."""

from __future__ import annotations


class ClikitError(Exception):
    """Base of the errors `clikit` raises."""
