"""Planning: sessions = issue × language × agent.

Every issue gets English sessions; Korean ones exist only where a translation was accepted, so the
languages come out (close to) 50/50. Weights below 1 keep that fraction of the combinations, chosen
by a seeded hash, so a plan is deterministic under its seed and re-planning only adds what is new.
The claim order (`priority`) goes round the issues: first one session of every issue (issues in a
seeded shuffle), then a second of every issue, and so on; the k-th issue of the shuffle starts at the
k-th (language, agent) combination. So a run stopped after a few sessions already spans many issues
and repositories (a held-out split by repository needs two) and covers every agent and both languages. `require_fix` plans only issues whose fix (pull request or commit) the harvester recorded."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field

from pydantic import BaseModel, Field, field_validator
from rich.table import Table
from sqlalchemy import func, select
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from factory.db import Issue, Repo, Session, Translation
from records.agents import AGENT_NAMES

AGENTS = AGENT_NAMES
LANGS = ("en", "ko")
_ROUND = 2**48  # one round of the claim order: an issue's rank (48 bits) + round × _ROUND fits a BigInteger


@dataclass(frozen=True)
class PlanConfig:
    agents: dict[str, float] = field(default_factory=lambda: dict.fromkeys(AGENTS, 1.0))
    langs: dict[str, float] = field(default_factory=lambda: dict.fromkeys(LANGS, 1.0))
    seed: int = 0
    require_fix: bool = False  # only issues with a recorded fix (factory/ingest/fixlink.py)

    def __post_init__(self) -> None:
        unknown = set(self.agents) - set(AGENTS)
        if unknown:
            raise ValueError(f"unknown agent(s) {sorted(unknown)}; choose from {', '.join(AGENTS)}")
        if set(self.langs) - set(LANGS):
            raise ValueError(
                f"unknown language(s) {sorted(set(self.langs) - set(LANGS))}; choose from en, ko"
            )
        if any(not 0 <= w <= 1 for w in (*self.agents.values(), *self.langs.values())):
            raise ValueError("weights are fractions in [0, 1]")


def parse_mix(text: str, allowed: tuple[str, ...]) -> dict[str, float]:
    """``"claude-code,codex"`` or ``"claude-code=1,opencode=0.5"`` → weights."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, w = part.partition("=")
        if name not in allowed:
            raise ValueError(f"unknown {name!r}; choose from {', '.join(allowed)}")
        out[name] = float(w) if w else 1.0
    if not out:
        raise ValueError("empty selection")
    return out


class PlanOptions(BaseModel):
    """What to plan; `plan` and `harvest` build their options from these fields."""

    agents: str = Field(
        default="claude-code,codex,opencode",
        description="Agents and weights: claude-code,codex=1,opencode=0.5.",
    )
    langs: str = Field(default="en,ko", description="Languages and weights: en,ko.")
    seed: int = Field(default=0, description="Seed of the plan's sampling and order.")
    require_fix: bool = Field(
        default=False,
        description="Plan only issues with a known fix (the pull request or commit that closed them, "
        "recorded by the GitHub harvest); the bundled sample has none.",
    )

    @field_validator("agents")
    @classmethod
    def _agents(cls, v: str) -> str:
        parse_mix(v, AGENTS)
        return v

    @field_validator("langs")
    @classmethod
    def _langs(cls, v: str) -> str:
        parse_mix(v, LANGS)
        return v

    def plan_config(self) -> PlanConfig:
        return PlanConfig(
            agents=parse_mix(self.agents, AGENTS),
            langs=parse_mix(self.langs, LANGS),
            seed=self.seed,
            require_fix=self.require_fix,
        )


def session_id(repo: str, number: int, lang: str, agent: str) -> str:
    return hashlib.sha256(f"{repo.lower()}#{number}:{lang}:{agent}".encode()).hexdigest()[:24]


def _unit(seed: int, *parts: object) -> float:
    h = hashlib.sha256(":".join(map(str, (seed, *parts))).encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64


def _issue_rank(seed: int, key: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{key}".encode()).digest()[:6], "big")  # 48 bits


@dataclass
class PlanSummary:
    added: int = 0
    total: int = 0
    by_cell: Counter[tuple[str, str]] = field(default_factory=Counter)  # (lang, agent) -> sessions
    issues: int = 0
    translated: int = 0
    without_fix: int = 0  # issues left out by `require_fix`


def plan(sessions: sessionmaker[OrmSession], cfg: PlanConfig, *, dry_run: bool = False) -> PlanSummary:
    agents = [a for a in AGENTS if cfg.agents.get(a, 0) > 0]
    langs = [lang for lang in LANGS if cfg.langs.get(lang, 0) > 0]
    combos = [(lang, a) for lang in langs for a in agents]
    summary = PlanSummary()
    with sessions.begin() as s:
        ko_ok = set(
            s.scalars(
                select(Translation.issue_id).where(Translation.status == "ok", Translation.lang == "ko")
            )
        )
        existing = set(s.scalars(select(Session.id)))
        rows = s.execute(
            select(Issue.id, Issue.number, Repo.name, Issue.fix).join(Repo).order_by(Issue.id)
        ).all()
        summary.issues, summary.translated = len(rows), len(ko_ok)
        new: list[Session] = []
        kept = [r for r in rows if not cfg.require_fix or r.fix]  # NULL, or JSON null: no fix named
        summary.without_fix = len(rows) - len(kept)
        keyed = [(f"{r.name.lower()}#{r.number}", r) for r in kept]
        keyed.sort(key=lambda kr: (_issue_rank(cfg.seed, kr[0]), kr[1].id))
        for index, (key, (issue_id, number, repo, _fix)) in enumerate(keyed):
            rank, offset = _issue_rank(cfg.seed, key), index % max(1, len(combos))
            for i, (lang, agent) in enumerate(combos):
                if lang == "ko" and issue_id not in ko_ok:
                    continue
                if _unit(cfg.seed, key, lang, agent) >= cfg.langs[lang] * cfg.agents[agent]:
                    continue
                sid = session_id(repo, number, lang, agent)
                if sid in existing:
                    continue
                slot = (i - offset) % len(combos)
                new.append(
                    Session(id=sid, issue_id=issue_id, lang=lang, agent=agent, priority=slot * _ROUND + rank)
                )
                existing.add(sid)
        summary.added = len(new)
        if dry_run:
            for n in new:
                summary.by_cell[(n.lang, n.agent)] += 1
            summary.total = len(existing)
            return summary
        s.add_all(new)
        s.flush()
        cells = s.execute(
            select(Session.lang, Session.agent, func.count()).group_by(Session.lang, Session.agent)
        )
        for cell_lang, cell_agent, count in cells:
            summary.by_cell[(cell_lang, cell_agent)] = count
        summary.total = sum(summary.by_cell.values())
    return summary


def summary_table(summary: PlanSummary, title: str) -> Table:
    """The plan's size by language and agent."""
    langs = sorted({lang for lang, _ in summary.by_cell}) or ["en"]
    t = Table(title=title)
    t.add_column("language")
    for a in AGENTS:
        t.add_column(a, justify="right")
    t.add_column("total", justify="right")
    for lang in langs:
        row = [summary.by_cell.get((lang, a), 0) for a in AGENTS]
        t.add_row(lang, *map(str, row), str(sum(row)))
    cols = [sum(summary.by_cell.get((lang, a), 0) for lang in langs) for a in AGENTS]
    t.add_row("total", *map(str, cols), str(sum(cols)))
    return t
