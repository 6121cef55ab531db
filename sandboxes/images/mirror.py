"""Read Debian package mirrors from apt source files (the host's or an image's); no host name is hard-coded."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from sandboxes.errors import SandboxSetupError


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


# Debian's release names: an archive that serves one of them serves every other release too (the same
# `dists/` tree), so a host on bookworm can build a trixie base from its own mirror.
RELEASES = {
    "bullseye",
    "bookworm",
    "trixie",
    "forky",
    "duke",
    "sid",
    "oldstable",
    "stable",
    "testing",
    "unstable",
}


def host_mirror(suite: str, root: Path = Path("/")) -> str:
    """The first mirror the host's own apt sources name for `suite`, else the host's Debian archive (a
    source of one of Debian's releases, not of its -updates or -security suites)."""
    files = [root / "etc/apt/sources.list", *sorted((root / "etc/apt/sources.list.d").glob("*"))]
    texts = [
        p.read_text(errors="replace") for p in files if p.is_file() and p.suffix in ("", ".list", ".sources")
    ]
    for want in [suite, *sorted(RELEASES)]:
        for text in texts:
            mirrors = parse_sources(text, want)
            if mirrors:
                return mirrors[0]
    raise SandboxSetupError(
        f"no Debian apt source under {root}/etc/apt to build {suite!r}; set DFLASH_SANDBOX_MIRROR"
    )
