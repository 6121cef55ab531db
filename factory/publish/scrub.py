"""Secret scrubbing for the published dataset: API keys, tokens, private keys, passwords in URLs and
e-mail addresses are replaced by ``<REDACTED:kind>``; counts per kind go into the dataset card.

Replacements never contain quotes or backslashes and the patterns never match them, so scrubbing a
JSON document's text leaves it valid JSON."""

from __future__ import annotations

import re
from collections import Counter

# (kind, pattern, group to replace: 0 = whole match)
PATTERNS: list[tuple[str, re.Pattern[str], int]] = [
    (
        "private_key",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----", re.S
        ),
        0,
    ),
    ("anthropic_key", re.compile(r"\bsk-ant-[A-Za-z0-9_-]{20,}"), 0),
    ("openai_key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"), 0),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})"), 0),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), 0),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}"), 0),
    ("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), 0),
    ("huggingface_token", re.compile(r"\bhf_[A-Za-z0-9]{30,}"), 0),
    ("stripe_key", re.compile(r"\b[rs]k_(?:live|test)_[0-9A-Za-z]{20,}"), 0),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), 0),
    ("url_password", re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@\"'\\<>]+:([^@\s/\"'\\<>]+)@"), 1),
    (
        "assigned_secret",
        re.compile(
            r"(?i)\b(?:api[_-]?key|secret[_-]?key|access[_-]?token|auth[_-]?token|client[_-]?secret|password|passwd)"
            r"[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9_\-/+=.]{12,})"
        ),
        1,
    ),
    ("email", re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"), 0),
]


def scrub(text: str | None, counts: Counter[str] | None = None) -> tuple[str | None, int]:
    """(scrubbed text, number of replacements); `counts` is updated per kind."""
    if not text:
        return text, 0
    total = 0
    for kind, pattern, group in PATTERNS:

        def rep(m: re.Match[str], kind: str = kind, group: int = group) -> str:
            if group == 0:
                return f"<REDACTED:{kind}>"
            start, end = m.span(group)
            return m.group(0)[: start - m.start()] + f"<REDACTED:{kind}>" + m.group(0)[end - m.start() :]

        text, n = pattern.subn(rep, text)
        if n:
            total += n
            if counts is not None:
                counts[kind] += n
    return text, total
