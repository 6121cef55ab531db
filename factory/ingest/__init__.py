"""Ingest: the repository registry, GitHub issues, the bundled sample issues, and EN→KO translation."""
