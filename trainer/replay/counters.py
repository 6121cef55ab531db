"""vLLM's speculative-decoding counters, read from a server's /metrics (Prometheus text).

`vllm:spec_decode_num_drafts`, `…_num_draft_tokens`, `…_num_accepted_tokens` and
`…_num_accepted_tokens_per_pos{position}` (served with the `_total` suffix). Counters only grow, so the
difference of two scrapes is what happened in between; mean acceptance length = 1 + accepted / drafts
(the bonus token included, as vLLM reports it) and per-position acceptance = accepted_at_k / drafts.
Values of every label set (several engines) are summed; a `model_name` label, when given, must match.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

PREFIX = "vllm:spec_decode_"
DRAFTS = PREFIX + "num_drafts"
DRAFT_TOKENS = PREFIX + "num_draft_tokens"
ACCEPTED = PREFIX + "num_accepted_tokens"
PER_POS = PREFIX + "num_accepted_tokens_per_pos"


@dataclass(frozen=True)
class SpecCounters:
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_pos: tuple[float, ...] = ()

    def __sub__(self, before: SpecCounters) -> SpecCounters:
        n = max(len(self.per_pos), len(before.per_pos))
        mine = (*self.per_pos, *([0.0] * (n - len(self.per_pos))))
        theirs = (*before.per_pos, *([0.0] * (n - len(before.per_pos))))
        return SpecCounters(
            self.drafts - before.drafts,
            self.draft_tokens - before.draft_tokens,
            self.accepted - before.accepted,
            tuple(a - b for a, b in zip(mine, theirs, strict=True)),
        )

    def __add__(self, other: SpecCounters) -> SpecCounters:
        n = max(len(self.per_pos), len(other.per_pos))
        a = (*self.per_pos, *([0.0] * (n - len(self.per_pos))))
        b = (*other.per_pos, *([0.0] * (n - len(other.per_pos))))
        return SpecCounters(
            self.drafts + other.drafts,
            self.draft_tokens + other.draft_tokens,
            self.accepted + other.accepted,
            tuple(x + y for x, y in zip(a, b, strict=True)),
        )

    @property
    def mal(self) -> float | None:
        """Mean acceptance length, or None when nothing was drafted."""
        return 1 + self.accepted / self.drafts if self.drafts > 0 else None

    @property
    def per_position(self) -> list[float]:
        return [v / self.drafts for v in self.per_pos] if self.drafts > 0 else []

    def as_dict(self) -> dict[str, object]:
        mal = self.mal
        return {
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted,
            "mal": round(mal, 4) if mal is not None else None,
            "draft_acceptance_rate": round(self.accepted / self.draft_tokens, 4)
            if self.draft_tokens
            else None,
            "per_position_acceptance": [round(v, 4) for v in self.per_position],
        }


def parse(text: str, model: str | None = None) -> SpecCounters | None:
    """The spec-decode counters in a /metrics page, or None when the server exposes none."""
    totals = {DRAFTS: 0.0, DRAFT_TOKENS: 0.0, ACCEPTED: 0.0}
    per_pos: dict[int, float] = {}
    found = False
    for family in text_string_to_metric_families(text):
        name = family.name.removesuffix("_total")  # a page without TYPE lines keeps the suffix
        if not name.startswith(PREFIX):
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue  # `_created` timestamps
            if model is not None and sample.labels.get("model_name", model) != model:
                continue
            found = True
            if name == PER_POS:
                pos = int(sample.labels.get("position", 0))
                per_pos[pos] = per_pos.get(pos, 0.0) + sample.value
            elif name in totals:
                totals[name] += sample.value
    if not found:
        return None
    positions = tuple(per_pos.get(k, 0.0) for k in range(max(per_pos) + 1)) if per_pos else ()
    return SpecCounters(totals[DRAFTS], totals[DRAFT_TOKENS], totals[ACCEPTED], positions)


async def scrape(client: httpx.AsyncClient, url: str, model: str | None = None) -> SpecCounters | None:
    """GET URL/metrics and parse it; an HTTP error is raised (httpx.HTTPError)."""
    reply = await client.get(f"{url}/metrics")
    reply.raise_for_status()
    return parse(reply.text, model)
