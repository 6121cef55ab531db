"""EN→KO issue translation through any OpenAI-compatible endpoint, validated and cached in the DB.

Code must reach the agent byte for byte, so everything that is not prose (fenced code blocks, inline
code, URLs, file paths, identifiers) is replaced by a placeholder ``⟦n⟧`` before the text goes to the
model and put back afterwards. The result is then checked: every placeholder exactly once, code
blocks / inline code / URLs identical to the source, enough Hangul in the prose, and a sane length
ratio, and the language of the result (`lingua`) is Korean. A failed check is retried (with the reason fed
back); the last reason is stored on rejection.

A long body is translated in pieces of whole paragraphs (`max_piece_chars`), so no answer has to exceed
`max_tokens`; a reasoning target's ``<think>…</think>`` block is removed from each answer. A body whose
prose has no Latin letters is not taken as already translated: its language is identified, and a source
that is not English is rejected with that reason. `translate_missing` translates `concurrency` issues at
once; `translate_in_background` runs it on a thread so sessions of translated issues can start meanwhile.

Calls carry ``X-Dflash-Tag: translation`` so the proxy keeps them out of the agent data."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from factory.db import Issue, Translation
from factory.ingest.translate_text import (
    LATIN,
    PLACEHOLDER,
    Checks,
    TranslationRejected,
    language_of,
    mask,
    paragraphs,
    prose,
    strip_reasoning,
    unmask,
    validate,
)

__all__ = [
    "Checks",
    "Result",
    "TranslationRejected",
    "Translator",
    "mask",
    "prose",
    "translate_in_background",
    "translate_missing",
    "unmask",
    "validate",
]

log = logging.getLogger(__name__)

TAG_HEADER = "X-Dflash-Tag"
TAG = "translation"

SYSTEM = (
    "You are a professional technical translator. Translate the user's GitHub issue text from English "
    "into natural Korean (한국어). Keep every placeholder of the form ⟦number⟧ exactly as it is, each "
    "exactly once, in a sensible position. Keep Markdown structure (headings, lists, line breaks). "
    "Do not add explanations, notes or quotes: answer with the Korean translation only."
)


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
        max_piece_chars: int = 1500,
        timeout: float = 300.0,
        checks: Checks = Checks(),
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.max_attempts = max_attempts
        self.max_tokens = max_tokens
        # a piece's answer needs about 2 tokens per source character (see _complete): stay under max_tokens
        self.max_piece_chars = max(200, min(max_piece_chars, (max_tokens - 256) // 2))
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
        return strip_reasoning(str(r.json()["choices"][0]["message"]["content"] or ""))

    def translate_text(self, text: str) -> tuple[str, int]:
        """(translation, attempts); raises TranslationRejected with the last reason."""
        masked, spans = mask(text)
        prose_only = PLACEHOLDER.sub(" ", masked)
        if not LATIN.search(prose_only):
            source = language_of(prose_only)
            if source not in (None, "english"):
                raise TranslationRejected(f"the source reads as {source}, not English")
            return text, 0
        reason = None
        for attempt in range(1, self.max_attempts + 1):
            try:
                pieces = [self._piece(p, attempt, reason) for p in paragraphs(masked, self.max_piece_chars)]
                translated = unmask("".join(pieces).strip(), spans)
                validate(text, translated, self.checks)
                return translated, attempt
            except TranslationRejected as exc:
                reason = str(exc)
                log.info("translation attempt %d rejected: %s", attempt, reason)
        raise TranslationRejected(reason or "rejected")

    def _piece(self, piece: str, attempt: int, feedback: str | None) -> str:
        """One piece (whole paragraphs, with their trailing blank lines) translated, its placeholders kept."""
        body, tail = piece.rstrip(), piece[len(piece.rstrip()) :]
        if not LATIN.search(PLACEHOLDER.sub(" ", body)):
            return piece  # code only: nothing to send
        out = self._complete(body, temperature=0.0 if attempt == 1 else 0.3 * attempt, feedback=feedback)
        want, got = Counter(PLACEHOLDER.findall(body)), Counter(PLACEHOLDER.findall(out))
        if want != got:
            lost = sorted(set(want) - set(got), key=int)
            raise TranslationRejected(
                f"placeholder(s) lost: {', '.join(f'⟦{i}⟧' for i in lost[:5])}"
                if lost
                else f"placeholder(s) invented or repeated: {', '.join(f'⟦{i}⟧' for i in sorted(got - want, key=int)[:5])}"
            )
        return out.strip() + tail

    def translate_issue(self, title: str, body: str) -> Result:
        attempts = 0
        try:
            t_title, n = self.translate_text(title)
            attempts += n
            t_body, n = self.translate_text(body)
            attempts += n
        except TranslationRejected as exc:
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


def translate_in_background(
    sessions: sessionmaker[OrmSession], translator: Translator, **kwargs: Any
) -> Future[dict[str, int]]:
    """`translate_missing(sessions, translator, **kwargs)` on its own thread: the caller plans and runs
    sessions of the issues already translated (each translation is committed as it finishes; `on_done`
    hears of each) and collects the counts with `.result()` before planning the rest."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="translate")
    future = pool.submit(translate_missing, sessions, translator, **kwargs)
    pool.shutdown(wait=False)
    return future
