"""`Sequence`: one training sequence (a merged session or a part of one), as build writes and train reads."""

from __future__ import annotations

from dataclasses import dataclass, field

from records.agents import OTHER_AGENT


@dataclass
class Sequence:
    input_ids: list[int]
    loss_mask: list[int]
    span_starts: list[int]
    span_ends: list[int]
    session_id: str | None
    group: str
    repo: str | None = None
    agent: str = OTHER_AGENT
    language: str = "en"
    call_ids: list[str] = field(default_factory=list)
    split: str = "train"

    @property
    def supervised(self) -> int:
        return sum(self.loss_mask)
