"""Names that cross process boundaries: the session prefix an agent's base URL carries, and attempt ids.

A sandboxed agent is pointed at `{proxy}/s/{session}`; the proxy strips the prefix and records `session`.
The factory names each attempt of a planned session `{session}-a{n}`, so a retried session's calls from an
abandoned attempt can be told apart from the final attempt's at export time.
"""

from __future__ import annotations

import re

# What the proxy accepts as a session id in a path: URL-safe, bounded, no slash.
SESSION_ID = r"[A-Za-z0-9._:-]{1,128}"
_PREFIXED = re.compile(rf"^/s/({SESSION_ID})(/.*)$")
_ATTEMPT = re.compile(r"^(?P<session>.+)-a(?P<n>[0-9]+)$")


def session_prefix(session_id: str) -> str:
    """The path prefix that attributes a call to `session_id`: `/s/{session_id}`."""
    if not re.fullmatch(SESSION_ID, session_id):
        raise ValueError(f"session id {session_id!r} is not URL-safe (letters, digits, '._:-', ≤128)")
    return f"/s/{session_id}"


def split_session_path(path: str) -> tuple[str | None, str]:
    """`/s/abc/v1/messages` → ('abc', '/v1/messages'); a path without the prefix → (None, path)."""
    m = _PREFIXED.match(path)
    return (m.group(1), m.group(2)) if m else (None, path)


def attempt_id(session_id: str, attempt: int) -> str:
    """The proxy-side id of one attempt of a planned session: `{session_id}-a{attempt}`."""
    return f"{session_id}-a{attempt}"


def parse_attempt_id(value: str) -> tuple[str, int] | None:
    """`abc-a2` → ('abc', 2); None when `value` is not an attempt id."""
    m = _ATTEMPT.match(value)
    return (m.group("session"), int(m.group("n"))) if m else None
