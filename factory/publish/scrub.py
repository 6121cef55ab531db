"""Secret scrubbing for the published dataset.

A secret is found by `detect-secrets`' regex plugins (AWS, GitHub, GitLab, npm, PyPI, Slack, Stripe,
OpenAI, JWT, Discord, Twilio, SendGrid, … tokens) and by this module's own patterns (private key blocks,
Anthropic/Hugging Face/Google keys, AWS secret keys, passwords in URLs, `password=`-style assignments,
high-entropy values assigned to a key/secret/token name, e-mail addresses). Each is replaced by
``<REDACTED:kind>``.

Known public constants of the agents are never secrets: Claude Code's system prompt carries
``noreply@anthropic.com`` in its commit attribution line, so every Claude Code call would otherwise be
"scrubbed" and lose its exact token ids. `PUBLIC_CONSTANTS` lists them; an export may add more.

Replacements never contain quotes or backslashes, and a finding that contains one is left to the patterns
that replace a whole block, so scrubbing a JSON document's text leaves it valid JSON."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.plugins.base import RegexBasedDetector

# Strings the agents themselves send on every call (system prompts, attribution lines): public, not secrets.
PUBLIC_CONSTANTS: tuple[str, ...] = ("noreply@anthropic.com",)

# detect-secrets plugins that look for a token by its shape. Left out: IPPublicDetector (an IP address is
# not a credential), PrivateKeyDetector (it reports the header line only; the own pattern removes the block),
# and the vendor detectors driven by a keyword (IBM, SoftLayer, Cloudant, Artifactory): they cost more than
# all the others together and their `<vendor>_key = value` shape is the high-entropy assignment below.
_SKIPPED_PLUGINS = {
    "IPPublicDetector",
    "PrivateKeyDetector",
    "IbmCloudIamDetector",
    "IbmCosHmacDetector",
    "SoftlayerDetector",
    "CloudantDetector",
    "ArtifactoryDetector",
}

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
    ("gitlab_token", re.compile(r"\bgl(?:pat|dt|ft|rt|soat)-[A-Za-z0-9_-]{20,50}"), 0),
    ("npm_token", re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"), 0),
    ("pypi_token", re.compile(r"\bpypi-AgE[A-Za-z0-9_-]{50,}"), 0),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), 0),
    (
        "aws_secret_key",
        re.compile(r"(?i)aws.{0,20}?(?:secret|key).{0,20}?[:=]\s*[\"']?([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"),
        1,
    ),
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
]
# A pattern runs only when one of its literals is in the text (a C substring search; Python's `re` does not
# skip ahead to a literal behind `\b`). Lower-case literals are looked for in the lower-cased text.
_NEEDS: dict[str, tuple[str, ...]] = {
    "private_key": ("PRIVATE KEY-----",),
    "anthropic_key": ("sk-ant-",),
    "openai_key": ("sk-",),
    "github_token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "gitlab_token": ("glpat-", "gldt-", "glft-", "glrt-", "glsoat-"),
    "npm_token": ("npm_",),
    "pypi_token": ("pypi-AgE",),
    "aws_access_key": ("AKIA", "ASIA"),
    "google_api_key": ("AIza",),
    "slack_token": ("xox",),
    "huggingface_token": ("hf_",),
    "stripe_key": ("_live_", "_test_"),
    "jwt": ("eyJ",),
    "url_password": ("://",),
}
_NEEDS_LOWER: dict[str, tuple[str, ...]] = {
    "aws_secret_key": ("aws",),
    "assigned_secret": ("key", "token", "secret", "passw"),
    "high_entropy_assignment": ("key", "secret", "token", "passw", "pwd", "credential"),
}
_EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")

# A long random-looking value assigned to a name that says it is secret (`DB_TOKEN = "…"`, `secret: …`).
_ENTROPY_ASSIGNMENT = re.compile(
    r"(?i)(?:key|secret|token|passw(?:or)?d|pwd|credential)s?[\w.-]*[\"']?\s*[:=]\s*[\"']?"
    r"([A-Za-z0-9_\-/+=]{20,})"
)
# Identifiers that are random but public by design: a UUID (session and cache keys), a git object id.
_NOT_SECRET = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}|[0-9a-f]{40}|[0-9a-f]{64}")
# `password = get_password_from_env`: a name in code, not a value (no digit, and `_` or `.` in it).
_CODE_NAME = re.compile(r"(?=[^0-9]*$)[A-Za-z_][A-Za-z_.]*[_.][A-Za-z_.]*")
ENTROPY_MIN_BITS = 3.5  # bits per character; English words and identifiers stay below, keys above


def _entropy(value: str) -> float:
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


def _slug(secret_type: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", secret_type.lower()).strip("_")


@dataclass(frozen=True, order=True)
class Finding:
    start: int
    end: int
    kind: str


class Scrubber:
    """Finds secrets in a text and replaces them; `allow` holds public strings that are never secrets."""

    def __init__(self, allow: Iterable[str] = PUBLIC_CONSTANTS) -> None:
        self.allow = frozenset(allow)
        plugins: dict[str, type[Any]] = get_mapping_from_secret_type_to_class()
        self._plugins = [
            (_slug(t), cls())
            for t, cls in sorted(plugins.items())
            if issubclass(cls, RegexBasedDetector) and cls.__name__ not in _SKIPPED_PLUGINS
        ]

    def find(self, text: str | None) -> list[Finding]:
        """Non-overlapping secret spans of `text` (the longest wins where two overlap), in order."""
        if not text:
            return []
        spans: list[Finding] = []
        lower = text.lower()

        def wanted(kind: str) -> bool:
            if kind in _NEEDS_LOWER:
                return any(w in lower for w in _NEEDS_LOWER[kind])
            return any(w in text for w in _NEEDS.get(kind, ("",)))

        for kind, pattern, group in PATTERNS:
            if not wanted(kind):
                continue
            for m in pattern.finditer(text):
                value = m.group(group)
                if value in self.allow or (kind == "assigned_secret" and _CODE_NAME.fullmatch(value)):
                    continue
                spans.append(Finding(m.start(group), m.end(group), kind))
        for m in _ENTROPY_ASSIGNMENT.finditer(text) if wanted("high_entropy_assignment") else ():
            value = m.group(1)
            has_digit, has_alpha = any(c.isdigit() for c in value), any(c.isalpha() for c in value)
            if _NOT_SECRET.fullmatch(value) or value in self.allow:
                continue
            if has_digit and has_alpha and _entropy(value) >= ENTROPY_MIN_BITS:
                spans.append(Finding(m.start(1), m.end(1), "high_entropy_assignment"))
        for kind, plugin in self._plugins:
            for value in set(plugin.analyze_string(text)):
                if len(value) < 8 or value in self.allow or '"' in value or "\\" in value:
                    continue
                spans += [Finding(m.start(), m.end(), kind) for m in re.finditer(re.escape(value), text)]
        spans += [
            Finding(m.start(), m.end(), "email")
            for m in _EMAIL.finditer(text)
            if m.group(0) not in self.allow
        ]
        return _disjoint(spans)

    def redact(self, text: str, findings: list[Finding]) -> str:
        out, pos = [], 0
        for f in findings:
            out += [text[pos : f.start], f"<REDACTED:{f.kind}>"]
            pos = f.end
        out.append(text[pos:])
        return "".join(out)

    def scrub(self, text: str | None, counts: Counter[str] | None = None) -> tuple[str | None, int]:
        """(scrubbed text, number of replacements); `counts` is updated per kind."""
        findings = self.find(text)
        if not findings or text is None:
            return text, 0
        if counts is not None:
            counts.update(f.kind for f in findings)
        return self.redact(text, findings), len(findings)


def _disjoint(spans: list[Finding]) -> list[Finding]:
    """Non-overlapping spans in text order; `spans` come in priority order (the patterns' order, then
    entropy, then detect-secrets, e-mail last). A later span overlapping a kept one widens it (the secret
    may be longer than the first pattern saw), except an e-mail match, which is only dropped: in
    `user:password@host` the password is the secret, not an address."""
    kept: list[Finding] = []
    for f in spans:
        hit = [i for i, k in enumerate(kept) if f.start < k.end and k.start < f.end]
        if not hit:
            kept.append(f)
        elif f.kind != "email":
            i = hit[0]
            k = kept[i]
            kept[i] = Finding(min(k.start, f.start), max(k.end, f.end), k.kind)
    kept.sort()
    merged: list[Finding] = []
    for f in kept:  # widening may have made two kept spans touch
        if merged and f.start < merged[-1].end:
            merged[-1] = Finding(merged[-1].start, max(f.end, merged[-1].end), merged[-1].kind)
        else:
            merged.append(f)
    return merged


_DEFAULT: Scrubber | None = None


def scrub(text: str | None, counts: Counter[str] | None = None) -> tuple[str | None, int]:
    """`Scrubber().scrub` with the default public constants (one shared instance)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Scrubber()
    return _DEFAULT.scrub(text, counts)
