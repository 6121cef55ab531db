"""Read Debian package mirrors from apt source files (the host's or an image's); no host name is hard-coded."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit


def parse_sources(text: str, suite: str | None = None) -> list[str]:
    """Mirror URIs in one-line (`deb URI suite ...`) or deb822 (`URIs:`/`Suites:`) sources text."""
    found: list[str] = []
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for raw in stanza.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("deb ") or line.startswith("deb-src "):
                parts = [p for p in line.split() if not p.startswith("[")]
                if len(parts) >= 3 and (suite is None or parts[2] == suite):
                    found.append(parts[1])
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.strip()
        if "uris" in fields and (suite is None or suite in fields.get("suites", "").split()):
            found.extend(fields["uris"].split())
    return [u for u in found if urlsplit(u).scheme in ("http", "https")]


def host_mirror(suite: str, root: Path = Path("/")) -> str:
    """The first mirror the host's own apt sources name for `suite`."""
    files = [root / "etc/apt/sources.list", *sorted((root / "etc/apt/sources.list.d").glob("*"))]
    for path in files:
        if path.is_file() and path.suffix in ("", ".list", ".sources"):
            mirrors = parse_sources(path.read_text(errors="replace"), suite)
            if mirrors:
                return mirrors[0]
    raise RuntimeError(f"no apt source for suite {suite!r} under {root}/etc/apt; set DFLASH_SANDBOX_MIRROR")
