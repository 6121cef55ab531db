"""A session's calls grouped into trajectories while the export reads them, and the rows they become.

A call joins the open trajectory of its session whose last call's prompt ids its own prompt ids extend
(the longest such); otherwise it starts one. A call without ids but with a message list joins, the same
way, the trajectory without ids whose last call shares the most leading messages; a call with neither
belongs to no trajectory. When the session's last call has gone by, each trajectory becomes one
`trajectories` row (its last call's prompt + completion ids and messages) and one `calls` row per call
(offsets into it; records/dataset.py has the layout). The session's trainable calls are merged into its
`sequences` rows by the rule the trainer shares (records/sequences.py).

What a session holds while open: its last call's prompt ids per trajectory, every call's row without its
prompt and request, and its message texts, shared between consecutive calls (a message equal to the
previous call's is the same string object), so memory grows with what the session adds, not with turns²."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from factory.publish.chat_rows import ChatView, chat_columns, chat_view, no_chat, share
from records.dataset import common_prefix, split_request
from records.sequences import Sequence, SessionMerge, untrainable


@dataclass
class _Member:
    row: dict[str, Any]
    prompt_len: int | None
    completion: np.ndarray | None
    messages: list[str] | None
    chat: ChatView | None = None
    shared_next: int | None = None  # leading messages equal to the next member's


@dataclass
class _Trajectory:
    id: str
    head_prompt: np.ndarray | None
    members: list[_Member] = field(default_factory=list)

    def shared_messages(self, messages: list[str]) -> int:
        head = self.members[-1].messages or []
        n = 0
        for a, b in zip(head, messages, strict=False):
            if a != b:
                break
            n += 1
        return n


@dataclass
class Emitted:
    """One trajectory's rows (or, with `trajectory` None, calls that belong to none, or the sequences)."""

    trajectory: dict[str, Any] | None
    calls: list[dict[str, Any]]
    sequences: list[Sequence] = field(default_factory=list)


# Called with each call's row, prompt ids and chat view as they arrive (the export's chat-view check).
OnView = Callable[[dict[str, Any], Any, ChatView], None]


class SessionTrajectories:
    def __init__(
        self,
        session: dict[str, Any],
        on_view: OnView | None = None,
        trained_tags: frozenset[str] = frozenset(),
    ) -> None:
        self.session, self.on_view, self.trained_tags = session, on_view, trained_tags
        self.trajectories: list[_Trajectory] = []
        self.loose: list[dict[str, Any]] = []  # calls with neither ids nor a message list
        self.merge = SessionMerge()
        self.prompt_hashes: dict[str, bytes] = {}  # trainable call -> its prompt ids' hash (re-samples)

    def add(self, row: dict[str, Any], tag: str | None = None) -> None:
        """Take a scrubbed `calls` row with `prompt_token_ids`, `request_json` and (when the proxy translated
        it) `upstream_request_json` whole; `tag` is the record's (not a published column)."""
        prompt = row.pop("prompt_token_ids", None)
        wire_row = {k: row.pop(k, None) for k in ("request_json", "upstream_request_json", "translated")}
        chat = chat_view({**wire_row, "api": row.get("api")}, row.get("response_json"))
        if chat is not None and self.on_view is not None:
            self.on_view(row, prompt, chat)
        params, fld, messages = split_request(wire_row["request_json"])
        row.update(request_params=params, messages_field=fld)
        completion = row.get("completion_token_ids")
        if (
            prompt is not None
            and completion is not None
            and untrainable({**row, "tag": tag, "prompt_token_ids": prompt}, self.trained_tags) is None
        ):
            self.merge.add(row["call_id"], prompt, completion)
            self.prompt_hashes[row["call_id"]] = ids_hash(prompt)
        if prompt is None and messages is None:
            row.update(trajectory_id=None, prompt_len=None, messages_prefix=None, messages_tail=None)
            row["completion_in_trajectory"] = None
            no_chat(row)
            self.loose.append(row)
            return
        traj = self._join(prompt, messages)
        if traj.members and messages is not None:
            shared = traj.shared_messages(messages)
            traj.members[-1].shared_next = shared
            messages[:shared] = (traj.members[-1].messages or [])[:shared]  # the same string objects
        last_chat = traj.members[-1].chat if traj.members else None
        if last_chat is not None:
            last_chat.shared_next = share(last_chat, chat)
        if prompt is not None:
            traj.head_prompt = np.asarray(prompt, dtype=np.int32)
        row["trajectory_id"] = traj.id
        traj.members.append(
            _Member(row, None if prompt is None else len(prompt), _ids(completion), messages, chat)
        )

    def _join(self, prompt: Any, messages: list[str] | None) -> _Trajectory:
        best, score = None, 0
        ids = None if prompt is None else np.asarray(prompt, dtype=np.int32)
        for t in self.trajectories:
            if ids is not None and t.head_prompt is not None:
                n = len(t.head_prompt)
                if n <= len(ids) and common_prefix(t.head_prompt, ids) == n and n + 1 > score:
                    best, score = t, n + 1
            elif ids is None and t.head_prompt is None and messages:
                shared = t.shared_messages(messages)
                if shared > score:
                    best, score = t, shared
        if best is None:
            best = _Trajectory(f"{self.session['session_id']}-t{len(self.trajectories):03d}", None)
            self.trajectories.append(best)
        return best

    def close(self, split: str) -> Iterator[Emitted]:
        """Every trajectory's rows (its calls in turn order), the calls in none, then the sequences."""
        for t in self.trajectories:
            yield self._emit(t)
        if self.loose:
            yield Emitted(None, self.loose)
        s = self.session
        seqs = self.merge.sequences(
            s["session_id"], repo=s["repo"], agent=s["agent"], lang=s["lang"], split=split, arrays=True
        )
        yield Emitted(None, [], seqs)

    def _emit(self, t: _Trajectory) -> Emitted:
        head = t.members[-1]
        tokens = None
        if t.head_prompt is not None:
            tail = head.completion if head.completion is not None else np.zeros(0, np.int32)
            tokens = np.concatenate([t.head_prompt, tail]).astype(np.int32)
        final = head.messages
        keep = len(final) if final is not None else 0
        for m in reversed(t.members):  # a message is shared with the last call if every step kept it
            if m.shared_next is not None:
                keep = min(keep, m.shared_next)
            prefix = None if m.messages is None else min(keep, len(m.messages))
            m.row.update(
                prompt_len=m.prompt_len,
                messages_prefix=prefix,
                messages_tail=None if m.messages is None or prefix is None else m.messages[prefix:],
            )
        for m in t.members:
            m.row["completion_in_trajectory"] = _in(tokens, m)
        chat = chat_columns([m.chat for m in t.members], [m.row for m in t.members])
        s = self.session
        traj = {
            "trajectory_id": t.id,
            "session_id": s["session_id"],
            "repo": s["repo"],
            "lang": s["lang"],
            "agent": s["agent"],
            "api": head.row.get("api"),
            "n_calls": len(t.members),
            "call_ids": [m.row["call_id"] for m in t.members],
            "token_ids": tokens,
            "messages": final,
            **chat,
        }
        calls = [m.row for m in t.members]  # in arrival order, as the session made them
        return Emitted(traj, calls)


def ids_hash(ids: Any) -> bytes:
    """A prompt's ids, hashed: a re-sample is published only when its prompt is a published call's."""
    return hashlib.blake2b(np.asarray(ids, dtype=np.int32).tobytes(), digest_size=16).digest()


def _ids(value: Any) -> np.ndarray | None:
    return None if value is None else np.asarray(value, dtype=np.int32)


def _in(tokens: np.ndarray | None, m: _Member) -> bool | None:
    """Whether the call's completion ids follow its prompt in the trajectory (its span can be trained)."""
    if tokens is None or m.prompt_len is None or m.completion is None:
        return None
    end = m.prompt_len + len(m.completion)
    return end <= len(tokens) and bool(np.array_equal(tokens[m.prompt_len : end], m.completion))
