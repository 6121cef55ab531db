"""The text side of issue translation: what is masked (code, URLs, paths, identifiers, flags), how a body
is cut into pieces, and the checks a translation must pass (placeholders, code byte for byte, Hangul
share, length ratio, language identified by `lingua`)."""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass

from lingua import Language, LanguageDetector, LanguageDetectorBuilder

from factory.errors import FactoryError

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
    r"|(?<![\w-])--?[a-z][\w-]*"  # --flags (not the second half of a hyphenated word: well-known)
)
PLACEHOLDER = re.compile(r"⟦(\d+)⟧")
THINK = re.compile(r"<think>.*?</think>\s*", re.S)
HANGUL = re.compile(r"[\uac00-\ud7a3\u1100-\u11ff\u3130-\u318f]")
LATIN = re.compile(r"[A-Za-z]")


class TranslationRejected(FactoryError, ValueError):
    """A translation attempt failed validation; the message is the reason."""


# Languages an issue or an answer plausibly comes in; a small set keeps the detector fast and small.
_LANGUAGES = (
    Language.ENGLISH,
    Language.KOREAN,
    Language.CHINESE,
    Language.JAPANESE,
    Language.RUSSIAN,
    Language.SPANISH,
    Language.GERMAN,
    Language.FRENCH,
    Language.PORTUGUESE,
)


@functools.cache
def _detector() -> LanguageDetector:
    return LanguageDetectorBuilder.from_languages(*_LANGUAGES).build()


def language_of(text: str) -> str | None:
    """The language of `text` (lower-case English name), or None when it has no letters to tell."""
    if not any(c.isalpha() for c in text):
        return None
    lang = _detector().detect_language_of(text)
    return lang.name.lower() if lang is not None else None


def strip_reasoning(answer: str) -> str:
    """The answer without a reasoning target's ``<think>…</think>`` block; an unclosed one is a rejection."""
    out = THINK.sub("", answer)
    if "<think>" in out:
        raise TranslationRejected("the answer is an unfinished reasoning block (no </think>)")
    return out


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
        raise TranslationRejected(f"placeholder(s) lost: {', '.join(f'⟦{i}⟧' for i in missing[:5])}")
    if extra:
        raise TranslationRejected(
            f"placeholder(s) invented or repeated: {', '.join(f'⟦{i}⟧' for i in extra[:5])}"
        )
    return PLACEHOLDER.sub(lambda m: spans[int(m.group(1))], text)


def _fine(piece: str, max_chars: int) -> list[str]:
    """A piece longer than `max_chars` cut at line ends, then sentence ends, then spaces (never inside a
    word, so never inside a ⟦n⟧ placeholder): one long line of a bug report still fits a request."""
    if len(piece) <= max_chars:
        return [piece]
    for sep in (r"(?<=\n)", r"(?<=[.!?。]\s)", r"(?<=\s)"):
        parts = [p for p in re.split(sep, piece) if p]
        if len(parts) > 1:
            return [q for p in parts for q in _fine(p, max_chars)]
    return [piece]  # one word longer than the limit: sent whole


def paragraphs(text: str, max_chars: int) -> list[str]:
    """`text` cut after blank lines into pieces of at most `max_chars` (a longer paragraph is cut at line
    ends, a longer line at sentence ends, then at spaces); joined, the pieces are `text` again."""
    blocks = re.split(r"(?<=\n\n)", text)
    out: list[str] = []
    for block in blocks:
        for part in _fine(block, max_chars):
            if out and len(out[-1]) + len(part) <= max_chars:
                out[-1] += part
            else:
                out.append(part)
    return [p for p in out if p]


def prose(text: str) -> str:
    masked, _ = mask(text)
    return PLACEHOLDER.sub(" ", masked)


@dataclass(frozen=True)
class Checks:
    min_hangul: float = 0.5  # Hangul / (Hangul + Latin letters) in the prose
    min_ratio: float = 0.2  # len(KO prose) / len(EN prose)
    max_ratio: float = 2.0


def validate(source: str, translated: str, checks: Checks = Checks()) -> None:
    """Raise :class:`TranslationRejected` with the reason when ``translated`` is not an acceptable translation."""
    if not translated.strip() and source.strip():
        raise TranslationRejected("empty translation")
    if [m.group(0) for m in FENCE.finditer(source)] != [m.group(0) for m in FENCE.finditer(translated)]:
        raise TranslationRejected("code blocks differ from the source")
    src_wo, tr_wo = FENCE.sub("", source), FENCE.sub("", translated)
    if Counter(INLINE.findall(src_wo)) != Counter(INLINE.findall(tr_wo)):
        raise TranslationRejected("inline code differs from the source")
    if Counter(URL.findall(src_wo)) != Counter(URL.findall(tr_wo)):
        raise TranslationRejected("URLs differ from the source")
    sp, tp = prose(source), prose(translated)
    src_letters = len(LATIN.findall(sp))
    if src_letters == 0:
        return  # nothing to translate (all code)
    hangul, latin = len(HANGUL.findall(tp)), len(LATIN.findall(tp))
    share = hangul / max(1, hangul + latin)
    if share < checks.min_hangul:
        raise TranslationRejected(f"Hangul share {share:.2f} < {checks.min_hangul}")
    detected = language_of(tp)
    if detected not in (None, "korean"):
        raise TranslationRejected(f"the translation reads as {detected}, not Korean")
    ratio = len(tp.strip()) / max(1, len(sp.strip()))
    if not checks.min_ratio <= ratio <= checks.max_ratio:
        raise TranslationRejected(
            f"length ratio {ratio:.2f} outside [{checks.min_ratio}, {checks.max_ratio}]"
        )
