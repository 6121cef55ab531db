"""Redact a secret inside exact token ids without giving the ids up.

The ids are decoded with the target's own tokenizer, the text is searched with the same `Scrubber` as
the JSON, and each secret's token span is cut at clean token boundaries (where the decoded prefix is a
prefix of the text) and re-tokenized with its placeholder. Everything outside that span keeps the exact
ids the target produced; the row is marked `ids_redacted`. The result is checked: decoding the new ids
must give the scrubbed text, else the caller drops the ids (counted, never silent).

The tokenizer comes from `transformers.AutoTokenizer` (a local path or a Hub name in the export
settings): `factory` may not import the project's `standin`, and the decode/encode pair is all this
needs. Without a tokenizer, ids cannot be searched; then ids are dropped only on rows whose JSON text
had a real secret (see `factory/publish/export.py`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from factory.publish.scrub import Finding, Scrubber


class IdsRedactor:
    def __init__(self, tokenizer: Any, scrubber: Scrubber) -> None:
        self.tok, self.scrubber = tokenizer, scrubber

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        return str(
            self.tok.decode(
                [int(i) for i in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False
            )
        )

    def encode(self, text: str) -> list[int]:
        return [int(i) for i in self.tok.encode(text, add_special_tokens=False)]

    def redact(self, ids: np.ndarray, start: int = 0) -> tuple[np.ndarray, list[Finding]] | None:
        """`ids` with every secret in the text of `ids[start:]` replaced by its placeholder's tokens, and
        what was found; None when the re-tokenized ids would not decode to the scrubbed text."""
        region = ids[start:]
        text = self.decode(region)
        findings = self.scrubber.find(text)
        if not findings:
            return ids, []
        spans = self._token_spans(region, text, findings)
        if spans is None:
            return None
        out = region.tolist()
        for (s, e, cs, ce), group in reversed(spans):
            middle = text[cs:ce]
            shifted = [Finding(f.start - cs, f.end - cs, f.kind) for f in group]
            out[s:e] = self.encode(self.scrubber.redact(middle, shifted))
        if self.decode(out) != self.scrubber.redact(text, findings):
            return None
        return np.concatenate([ids[:start], np.asarray(out, dtype=np.int32)]), findings

    def _token_spans(
        self, ids: np.ndarray, text: str, findings: list[Finding]
    ) -> list[tuple[tuple[int, int, int, int], list[Finding]]] | None:
        """For each group of findings, (first token, end token, first char, end char) at clean boundaries;
        findings whose token spans touch are merged into one group."""
        groups: list[tuple[tuple[int, int, int, int], list[Finding]]] = []
        for f in findings:
            s, cs = self._boundary(ids, text, f.start, down=True)
            e, ce = self._boundary(ids, text, f.end, down=False)
            if s < 0 or e < 0:
                return None
            if groups and s < groups[-1][0][1]:
                (ps, _pe, pcs, _pce), members = groups[-1]
                groups[-1] = ((ps, e, pcs, ce), [*members, f])
            else:
                groups.append(((s, e, cs, ce), [f]))
        return groups

    def _boundary(self, ids: np.ndarray, text: str, char: int, *, down: bool) -> tuple[int, int]:
        """A token index i whose decoded prefix is exactly text[:c] with c ≤ char (down) or c ≥ char (up);
        (i, c), or (-1, -1) when there is none."""
        lo, hi = 0, len(ids)
        while lo < hi:  # first i whose decoded prefix reaches `char`
            mid = (lo + hi) // 2
            if len(self.decode(ids[:mid])) < char:
                lo = mid + 1
            else:
                hi = mid
        i = lo
        step = -1 if down else 1
        while 0 <= i <= len(ids):
            head = self.decode(ids[:i])
            c = len(head)
            ok_side = c <= char if down else c >= char
            if ok_side and text.startswith(head) and self.decode(ids[i:]) == text[c:]:
                return i, c
            i += step
        return -1, -1
