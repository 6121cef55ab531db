"""The replay itself: probe the endpoints, refuse what cannot be compared, replay each level on each one.

Endpoints are replayed one after the other (never at the same time), so two servers on one machine do
not slow each other down. /metrics is scraped before and after each level; at concurrency 1 also around
every call, which gives the spec-decode counters of each call and so MAL per agent and language.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from trainer.replay.calls import ReplayCall, ReplayError
from trainer.replay.client import Outcome, send
from trainer.replay.counters import SpecCounters, scrape
from trainer.replay.divergence import Divergence, attribute, classify
from trainer.replay.settings import ReplaySettings


@dataclass
class Served:
    """An endpoint as it describes itself."""

    label: str
    url: str
    model: str  # the id requests name
    root: str  # what is served (vLLM's `root`: the model path), compared across endpoints
    max_model_len: int | None
    speculative: bool
    has_counters: bool
    engine: str | None = None  # what /version reports (vLLM: "vLLM 0.32.0")

    def as_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "engine": self.engine,
            "model": self.model,
            "root": self.root,
            "max_model_len": self.max_model_len,
            "speculative": self.speculative,
            "spec_decode_counters": self.has_counters,
        }


@dataclass
class LevelRun:
    label: str
    concurrency: int
    outcomes: list[Outcome]
    wall_seconds: float
    spec: SpecCounters | None  # the level's counter delta


@dataclass
class Progress:
    """Callbacks the CLI turns into a progress bar (or plain lines off a terminal)."""

    start: Callable[[str, int], None] = lambda _name, _total: None
    advance: Callable[[Outcome], None] = lambda _outcome: None
    finish: Callable[[], None] = lambda: None


@dataclass
class ReplayRun:
    served: list[Served]
    runs: list[LevelRun] = field(default_factory=list)
    aborted: str | None = None
    dropped: dict[str, str] = field(default_factory=dict)  # label -> why it was left out after a level
    divergences: list[Divergence] = field(default_factory=list)


async def probe(client: httpx.AsyncClient, label: str, url: str, speculative: bool) -> Served:
    try:
        reply = await client.get(f"{url}/v1/models")
        reply.raise_for_status()
        card = reply.json()["data"][0]
    except httpx.HTTPError as e:
        raise ReplayError(f"endpoint {label} ({url}) is unreachable: {type(e).__name__}: {e}") from None
    except (ValueError, KeyError, IndexError, TypeError):
        raise ReplayError(f"endpoint {label} ({url}): /v1/models lists no model") from None
    try:
        counters = await scrape(client, url, card["id"])
    except httpx.HTTPError as e:
        if speculative:
            raise ReplayError(
                f"endpoint {label} ({url}) serves no /metrics ({e}): its acceptance cannot be read"
            ) from None
        counters = None
    if speculative and counters is None:
        raise ReplayError(
            f"endpoint {label} ({url}) is labelled speculative but its /metrics has no vllm:spec_decode_* "
            "counters: serve it with --speculative-config (vLLM) or --draft (the stand-in), or list it "
            "outside --speculative"
        )
    limit = card.get("max_model_len")
    return Served(
        label,
        url,
        str(card["id"]),
        str(card.get("root") or card["id"]),
        int(limit) if limit else None,
        speculative,
        counters is not None,
        await engine_version(client, url, card),
    )


async def engine_version(client: httpx.AsyncClient, url: str, card: dict[str, Any]) -> str | None:
    """The engine and its version as the server reports them (vLLM's /version; its cards say owned_by)."""
    try:
        reply = await client.get(f"{url}/version")
        payload = reply.json() if reply.status_code == 200 else {}
        version = payload.get("version")
    except (httpx.HTTPError, ValueError, AttributeError):
        payload, version = {}, None
    if payload.get("engine") == "stand-in":  # our engine, shaped like vLLM: said as what it is
        return f"stand-in ({payload.get('strategy') or 'autoregressive'})"
    owner = str(card.get("owned_by") or "")
    name = "vLLM" if owner == "vllm" else owner or "unknown engine"
    return f"{name} {version}" if version else name


def check_same_model(served: list[Served]) -> None:
    roots = {s.root for s in served}
    if len(roots) > 1:
        listed = ", ".join(f"{s.label}: {s.root}" for s in served)
        raise ReplayError(f"the endpoints serve different models ({listed}): speedups would mean nothing")


def fit_context(calls: list[ReplayCall], served: list[Served]) -> None:
    """Lower max_tokens so prompt + completion fits the smallest context; a prompt that alone does not fit
    is sent as is, and the server's refusal is reported for that call."""
    limits = [s.max_model_len for s in served if s.max_model_len]
    if not limits:
        return
    limit = min(limits)
    for c in calls:
        n = c.prompt_tokens
        if n is not None and n < limit:
            c.max_tokens = max(1, min(c.max_tokens, limit - n))


async def _safe_scrape(client: httpx.AsyncClient, s: Served) -> SpecCounters | None:
    if not s.has_counters:
        return None
    try:
        return await scrape(client, s.url, s.model)
    except httpx.HTTPError as e:
        raise ReplayError(f"endpoint {s.label} ({s.url}) stopped answering /metrics: {e}") from None


async def replay_level(
    client: httpx.AsyncClient, s: Served, calls: list[ReplayCall], level: int, progress: Progress
) -> LevelRun:
    gate = asyncio.Semaphore(level)

    async def one(call: ReplayCall) -> Outcome:
        async with gate:
            before = await _safe_scrape(client, s) if level == 1 else None
            out = await send(client, s.url, s.model, call, s.label, level)
            after = await _safe_scrape(client, s) if level == 1 else None
            if before is not None and after is not None:
                out.spec = after - before
            progress.advance(out)
            return out

    progress.start(f"{s.label} c={level}", len(calls))
    start_counters = await _safe_scrape(client, s)
    started = time.perf_counter()
    try:
        outcomes = list(await asyncio.gather(*(one(c) for c in calls)))
    finally:
        progress.finish()
    wall = time.perf_counter() - started
    end_counters = await _safe_scrape(client, s)
    delta = end_counters - start_counters if end_counters and start_counters else None
    return LevelRun(s.label, level, outcomes, wall, delta)


async def replay(settings: ReplaySettings, calls: list[ReplayCall], progress: Progress) -> ReplayRun:
    """Every level on every endpoint; a failure after the first level keeps the levels already done."""
    timeout = httpx.Timeout(settings.timeout, connect=10.0)
    async with httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(max_connections=None)) as client:
        served = [
            await probe(client, e.label, e.url, settings.is_speculative(e.label)) for e in settings.endpoints
        ]
        check_same_model(served)
        fit_context(calls, served)
        result = ReplayRun(served)
        try:
            for level in settings.concurrency:
                for s in served:
                    if s.label in result.dropped:
                        continue
                    run = await replay_level(client, s, calls, level, progress)
                    result.runs.append(run)
                    if all(o.error and "HTTP " not in o.error for o in run.outcomes):
                        dead = f"endpoint {s.label} ({s.url}) answered no call: {run.outcomes[0].error}"
                        if s.label == settings.baseline_label:
                            raise ReplayError(dead)  # nothing can be compared without the baseline
                        result.dropped[s.label] = dead  # one dead method must not cost the others' rows
        except ReplayError as e:
            result.aborted = str(e)
        result.divergences = await divergences(client, settings, calls, result)
    return result


async def divergences(
    client: httpx.AsyncClient, settings: ReplaySettings, calls: list[ReplayCall], result: ReplayRun
) -> list[Divergence]:
    """Every greedy output that differs from the baseline's, classified by the baseline's own top-2 gap."""
    by_id = {c.call_id: c for c in calls}
    base_label = settings.baseline_label
    base_served = next((s for s in result.served if s.label == base_label), None)
    found: list[Divergence] = []
    if base_served is None:
        return found
    for level in settings.concurrency:
        runs = {r.label: r for r in result.runs if r.concurrency == level}
        if base_label not in runs:
            continue
        base = {o.call_id: o for o in runs[base_label].outcomes if o.ok}
        for label, run in runs.items():
            for o in run.outcomes if label != base_label else []:
                if o.ok and o.call_id in base:
                    call, ref = by_id[o.call_id], base[o.call_id]
                    url, model = base_served.url, base_served.model
                    d = await classify(
                        client, url, model, call, ref, o, settings.rule, settings.baseline_logits
                    )
                    found += [d] if d is not None else []
    return attribute(found, settings.model_free)
