"""Scrub a session's calls in linear, not quadratic, time.

Each call of an agent session resends the whole conversation, so scanning every request (and every prompt's
decoded ids) in full costs O(turns²) per session. Here a call is compared with the previous call of its
session *as published* (already scrubbed): the part both share at the start and at the end is already
clean, only the middle (with an overlap on each side, for a secret cut by the boundary) is scanned. A
secret of an earlier call is not in the scrubbed previous call, so the shared start ends at it and it is
scanned again: nothing is skipped that was ever found.

State is one text and one id array per open session, dropped after the session's last call."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from factory.publish.redact_ids import IdsRedactor
from factory.publish.scrub import Finding, Scrubber
from factory.publish.stats import ExportStats
from records.dataset import common_prefix, common_prefix_str, common_suffix_str

# Characters scanned before / after the changed middle of a request: longer than any token shape with its
# `name = ` context (a PyPI token is about 200); a key block is found from its BEGIN line wherever it is.
TEXT_OVERLAP = 512
IDS_OVERLAP = 1024  # tokens scanned before the new part of a prompt
_BLOCK_START = "-----BEGIN"
# A call's texts that resend the conversation: the agent's request, and the Chat body the proxy sent upstream.
TEXT_FIELDS = ("request_json", "upstream_request_json")


class SessionScrubber:
    def __init__(self, scrubber: Scrubber, redactor: IdsRedactor | None, remaining: Counter[str]) -> None:
        self.scrubber, self.redactor = scrubber, redactor
        self.remaining = remaining  # calls of each session still to come
        self._text: dict[tuple[str, str], str] = {}  # (session, field) -> its previous text, scrubbed
        self._ids: dict[str, np.ndarray] = {}

    def seen(self, session: str) -> None:
        """One call of `session` went by (kept or not); its state goes with its last call."""
        self.remaining[session] -= 1
        if self.remaining[session] <= 0:
            for f in TEXT_FIELDS:
                self._text.pop((session, f), None)
            self._ids.pop(session, None)

    def text(
        self, session: str, text: str | None, counts: Counter[str], field: str = "request_json"
    ) -> tuple[str | None, int]:
        """A request text scrubbed, scanning only what differs from the session's previous one (`field`:
        which of the call's resent texts, `TEXT_FIELDS`)."""
        if not text:
            return text, 0
        prev = self._text.get((session, field))
        start, end = 0, len(text)
        if prev is not None:
            p = common_prefix_str(prev, text)
            s = common_suffix_str(prev, text, min(len(prev), len(text)) - p)
            start, end = max(0, p - TEXT_OVERLAP), min(len(text), len(text) - s + TEXT_OVERLAP)
            block = text.rfind(_BLOCK_START, 0, start)
            if block >= 0 and text.find("-----END", block, start) < 0:
                start = block  # a key block still open where the window begins
        found = [Finding(f.start + start, f.end + start, f.kind) for f in self.scrubber.find(text[start:end])]
        out = self.scrubber.redact(text, found) if found else text
        counts.update(f.kind for f in found)
        self._text[(session, field)] = out
        return out, len(found)

    def prompt_ids(
        self, session: str, ids: np.ndarray, counts: Counter[str]
    ) -> tuple[np.ndarray | None, int]:
        """The prompt ids with secrets re-tokenized (None: a secret could not be cut out cleanly)."""
        assert self.redactor is not None
        prev = self._ids.get(session)
        start = max(0, common_prefix(prev, ids) - IDS_OVERLAP) if prev is not None else 0
        if start:
            region = self.redactor.decode(ids[start:])
            end = region.find("-----END")
            if end >= 0 and region.rfind(_BLOCK_START, 0, end) < 0:
                start = 0  # a key block that begins before the window ends inside it
        res = self.redactor.redact(ids, start)
        if res is None:
            return None, 0
        out, found = res
        counts.update(f.kind for f in found)
        self._ids[session] = out
        return out, len(found)

    def completion_ids(self, ids: np.ndarray, counts: Counter[str]) -> tuple[np.ndarray | None, int]:
        assert self.redactor is not None
        res = self.redactor.redact(ids, 0)
        if res is None:
            return None, 0
        counts.update(f.kind for f in res[1])
        return res[0], len(res[1])


def scrub_row(row: dict[str, Any], state: SessionScrubber, session: str, counts: Counter[str]) -> int:
    """Scrub a `calls` row's text in place; returns the number of secrets found in its text."""
    hits = 0
    for f in TEXT_FIELDS:
        row[f], n = state.text(session, row.get(f), counts, f)
        hits += n
    for col in ("response_json", "error"):
        row[col], n = state.scrubber.scrub(row.get(col), counts)
        hits += n
    return hits


def scrub_call(row: dict[str, Any], proxy_sid: str, state: SessionScrubber, stats: ExportStats) -> None:
    """Scrub a call row's text; redact secrets inside its ids, or drop the ids when that cannot be done."""
    prompt, completion = row.get("prompt_token_ids"), row.get("completion_token_ids")
    has_ids = prompt is not None or completion is not None
    text_hits = scrub_row(row, state, proxy_sid, stats.secrets)
    if not has_ids:
        return
    stats.calls_with_ids += 1
    if state.redactor is None:
        ok, found = not text_hits, 0
        new_p, new_c = prompt, completion
    else:
        new_p, n1 = (
            state.prompt_ids(proxy_sid, prompt, stats.secrets_in_ids) if prompt is not None else (None, 0)
        )
        new_c, n2 = (
            state.completion_ids(completion, stats.secrets_in_ids) if completion is not None else (None, 0)
        )
        ok = (prompt is None or new_p is not None) and (completion is None or new_c is not None)
        found = n1 + n2
    if not ok:
        row.update(
            prompt_token_ids=None,
            completion_token_ids=None,
            token_ids_source=None,
            ids_exact=None,
            ids_redacted=None,
        )
        stats.token_ids_dropped += 1
        return
    row.update(prompt_token_ids=new_p, completion_token_ids=new_c, ids_redacted=bool(found))
    stats.ids_redacted += bool(found)
    stats.calls_with_ids_kept += 1
