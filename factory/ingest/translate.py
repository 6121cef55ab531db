"""EN→KO issue translation through any OpenAI-compatible endpoint, validated and cached in the DB.

Code must reach the agent byte for byte, so everything that is not prose (fenced code blocks, inline
code, URLs, file paths, identifiers) is replaced by a placeholder ``⟦n⟧`` before the text goes to the
model and put back afterwards. The result is then checked: every placeholder exactly once, code
blocks / inline code / URLs identical to the source, enough Hangul in the prose, and a sane length
ratio. A failed check is retried (with the reason fed back); the last reason is stored on rejection.

Calls carry ``X-Dflash-Tag: translation`` so the proxy keeps them out of the agent data."""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from factory.db import Issue, Translation

log = logging.getLogger(__name__)

TAG_HEADER = "X-Dflash-Tag"
TAG = "translation"

FENCE = re.compile(r"^([ \t]*)(```+|~~~+)[^\n]*\n.*?^\1\2[ \t]*$", re.M | re.S)
INLINE = re.compile(r"`[^`\n]+`")
URL = re.compile(r"\bhttps?://[^\s<>()\[\]`\"']+[^\s<>()\[\]`\"'.,;:!?]")
PATH = re.compile(
    r"(?<![\w/])(?:\.{1,2}/|/|~/)?(?:[\w.-]+/)+[\w.-]*\w|\b[\w-]+\.(?:py|js|ts|tsx|jsx|go|rs|java|kt|c|h|cc|cpp|hpp|rb|php|cs|swift|toml|yaml|yml|json|md|txt|cfg|ini|sh|lock|xml|html|css|sql)\b"
)
IDENT = re.compile(
    r"\b(?:[A-Za-z_][\w]*\.)+[A-Za-z_]\w*(?:\(\))?"  # dotted.names, module.func()
    r"|\b[A-Za-z_]\w*\(\)"  # func()
    r"|\b[a-z]+_[\w]+\b|\b_\w+\b"  # snake_case, _private
    r"|\b[a-z]+[A-Z]\w*\b"  # camelCase
    r"|\b[A-Z][a-z0-9]+[A-Z]\w*\b"  # PascalCase with an inner capital
    r"|\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b"  # CONSTANT_NAMES
    r"|--?[a-z][\w-]*"  # --flags
)
PLACEHOLDER = re.compile(r"⟦(\d+)⟧")
HANGUL = re.compile(r"[\uac00-\ud7a3\u1100-\u11ff\u3130-\u318f]")
LATIN = re.compile(r"[A-Za-z]")

SYSTEM = (
    "You are a professional technical translator. Translate the user's GitHub issue text from English "
    "into natural Korean (한국어). Keep every placeholder of the form ⟦number⟧ exactly as it is, each "
    "exactly once, in a sensible position. Keep Markdown structure (headings, lists, line breaks). "
    "Do not add explanations, notes or quotes: answer with the Korean translation only."
)


class Rejected(ValueError):
    """A translation attempt failed validation; the message is the reason."""


def mask(text: str) -> tuple[str, list[str]]:
    """Replace protected spans with ⟦i⟧; returns the masked text and the spans in order."""
    spans: list[str] = []

    def sub(pattern: re.Pattern[str], s: str) -> str:
        def rep(m: re.Match[str]) -> str:
            spans.append(m.group(0))
            return f"⟦{len(spans) - 1}⟧"

        return pattern.sub(rep, s)

    out = text
    for pat in (FENCE, INLINE, URL, PATH, IDENT):
        # never re-mask inside an existing placeholder
        parts = re.split(r"(⟦\d+⟧)", out)
        out = "".join(p if PLACEHOLDER.fullmatch(p) else sub(pat, p) for p in parts)
    return out, spans


def unmask(text: str, spans: list[str]) -> str:
    seen = Counter(int(m) for m in PLACEHOLDER.findall(text))
    missing = [i for i in range(len(spans)) if seen[i] == 0]
    extra = [i for i, n in seen.items() if i >= len(spans) or n > 1]
    if missing:
        raise Rejected(f"placeholder(s) lost: {', '.join(f'⟦{i}⟧' for i in missing[:5])}")
    if extra:
        raise Rejected(f"placeholder(s) invented or repeated: {', '.join(f'⟦{i}⟧' for i in extra[:5])}")
    return PLACEHOLDER.sub(lambda m: spans[int(m.group(1))], text)


def prose(text: str) -> str:
    masked, _ = mask(text)
    return PLACEHOLDER.sub(" ", masked)


@dataclass(frozen=True)
class Checks:
    min_hangul: float = 0.5  # Hangul / (Hangul + Latin letters) in the prose
    min_ratio: float = 0.2  # len(KO prose) / len(EN prose)
    max_ratio: float = 2.0


def validate(source: str, translated: str, checks: Checks = Checks()) -> None:
    """Raise :class:`Rejected` with the reason when ``translated`` is not an acceptable translation."""
    if not translated.strip() and source.strip():
        raise Rejected("empty translation")
    if [m.group(0) for m in FENCE.finditer(source)] != [m.group(0) for m in FENCE.finditer(translated)]:
        raise Rejected("code blocks differ from the source")
    src_wo, tr_wo = FENCE.sub("", source), FENCE.sub("", translated)
    if Counter(INLINE.findall(src_wo)) != Counter(INLINE.findall(tr_wo)):
        raise Rejected("inline code differs from the source")
    if Counter(URL.findall(src_wo)) != Counter(URL.findall(tr_wo)):
        raise Rejected("URLs differ from the source")
    sp, tp = prose(source), prose(translated)
    src_letters = len(LATIN.findall(sp))
    if src_letters == 0:
        return  # nothing to translate (all code)
    hangul, latin = len(HANGUL.findall(tp)), len(LATIN.findall(tp))
    share = hangul / max(1, hangul + latin)
    if share < checks.min_hangul:
        raise Rejected(f"Hangul share {share:.2f} < {checks.min_hangul}")
    ratio = len(tp.strip()) / max(1, len(sp.strip()))
    if not checks.min_ratio <= ratio <= checks.max_ratio:
        raise Rejected(f"length ratio {ratio:.2f} outside [{checks.min_ratio}, {checks.max_ratio}]")


@dataclass
class Result:
    ok: bool
    title: str | None
    body: str | None
    reason: str | None
    attempts: int


class Translator:
    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        api_key: str = "dflash",
        max_attempts: int = 3,
        max_tokens: int = 4096,
        timeout: float = 300.0,
        checks: Checks = Checks(),
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.max_attempts = max_attempts
        self.max_tokens = max_tokens
        self.checks = checks
        self._http = httpx.Client(
            timeout=timeout,
            transport=transport,
            headers={"Authorization": f"Bearer {api_key}", TAG_HEADER: TAG},
        )
        self._model = model

    @property
    def model_name(self) -> str | None:
        return self._model

    @property
    def model(self) -> str:
        if self._model is None:
            r = self._http.get(f"{self.base_url}/models")
            r.raise_for_status()
            self._model = str(r.json()["data"][0]["id"])
        return self._model

    def _complete(self, masked: str, temperature: float, feedback: str | None) -> str:
        messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
        if feedback:
            messages.append(
                {"role": "system", "content": f"A previous attempt was rejected ({feedback}). Fix that."}
            )
        messages.append({"role": "user", "content": masked})
        r = self._http.post(
            f"{self.base_url}/chat/completions",
            json={
                "model": self.model,
                "messages": messages,
                "temperature": temperature,
                # room for a Korean version (more tokens per character than English), not for a ramble
                "max_tokens": min(self.max_tokens, 256 + 2 * len(masked)),
                "stream": False,
            },
        )
        r.raise_for_status()
        return str(r.json()["choices"][0]["message"]["content"] or "")

    def translate_text(self, text: str) -> tuple[str, int]:
        """(translation, attempts); raises Rejected with the last reason."""
        masked, spans = mask(text)
        if not LATIN.search(PLACEHOLDER.sub(" ", masked)):
            return text, 0
        reason = None
        for attempt in range(1, self.max_attempts + 1):
            out = self._complete(masked, temperature=0.0 if attempt == 1 else 0.3 * attempt, feedback=reason)
            try:
                translated = unmask(out.strip(), spans)
                validate(text, translated, self.checks)
                return translated, attempt
            except Rejected as exc:
                reason = str(exc)
                log.info("translation attempt %d rejected: %s", attempt, reason)
        raise Rejected(reason or "rejected")

    def translate_issue(self, title: str, body: str) -> Result:
        attempts = 0
        try:
            t_title, n = self.translate_text(title)
            attempts += n
            t_body, n = self.translate_text(body)
            attempts += n
        except Rejected as exc:
            return Result(False, None, None, str(exc), attempts + self.max_attempts)
        except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
            return Result(False, None, None, f"endpoint error: {exc!r}"[:500], attempts + 1)
        return Result(True, t_title, t_body, None, attempts)


def translate_missing(
    sessions: sessionmaker[OrmSession],
    translator: Translator,
    *,
    lang: str = "ko",
    limit: int | None = None,
    retry_rejected: bool = False,
    concurrency: int = 1,
    on_done: Callable[[int, Result], None] | None = None,
) -> dict[str, int]:
    """Translate every issue that has no cached translation (ok or rejected) yet."""
    with sessions() as s:
        q = select(Issue.id, Issue.title, Issue.body).order_by(Issue.id)
        done = select(Translation.issue_id).where(Translation.lang == lang)
        if retry_rejected:
            done = done.where(Translation.status == "ok")
        todo = list(s.execute(q.where(Issue.id.not_in(done))).all())
    if limit is not None:
        todo = todo[:limit]
    counts = {"ok": 0, "rejected": 0}

    def one(row: Any) -> None:
        res = translator.translate_issue(row.title, row.body)
        with sessions.begin() as s:
            existing = s.scalar(
                select(Translation).where(Translation.issue_id == row.id, Translation.lang == lang)
            )
            t = existing or Translation(issue_id=row.id, lang=lang)
            t.status = "ok" if res.ok else "rejected"
            t.title, t.body, t.reason, t.attempts = res.title, res.body, res.reason, res.attempts
            t.model = translator.model_name
            if existing is None:
                s.add(t)
        counts["ok" if res.ok else "rejected"] += 1
        if on_done:
            on_done(row.id, res)

    if concurrency <= 1:
        for row in todo:
            one(row)
    else:
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(one, todo))
    return counts
