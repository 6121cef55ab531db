"""The held-out split: one rule for every stage. The export's `test` split, the trainer's eval side, the
replay's held-out calls and the calls regeneration leaves alone all come from `plan`.

A stable fraction of repositories is held out, so no repository is on both sides (near-duplicate code
stays off the judged side); when the hash leaves one side empty while there are two or more repositories,
the repository hashing lowest is held out (or the highest kept). With fewer than two repositories, whole
sessions are held out instead: the ⌈f·n⌉ hashing lowest, never all. With a single session nothing is held
out (`by` = none); the trainer then asks again with its sequences as the units. The hash is SHA-256 of the
lower-cased key (a repository's owner/name, a session id) read as a fraction of 2⁶⁴.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

TRAIN, TEST = "train", "test"


def fraction(key: str) -> float:
    """Where `key` falls in [0, 1): the same on every machine, run and stage."""
    return int.from_bytes(hashlib.sha256(key.lower().encode()).digest()[:8], "big") / 2**64


@dataclass(frozen=True)
class Unit:
    """What is held out whole (a session; for the trainer's last resort, a sequence), its repository, and
    its calls: a unit with none never decides whether a side is empty."""

    key: str
    repo: str | None = None
    calls: int = 1


@dataclass
class Plan:
    by: str  # repository | session | none
    sides: dict[str, str] = field(default_factory=dict)  # unit key -> train | test
    note: str = ""

    def side(self, key: str) -> str:
        return self.sides.get(key, TRAIN)

    @property
    def held_out(self) -> set[str]:
        return {k for k, v in self.sides.items() if v == TEST}


def plan(units: Sequence[Unit], held_out: float) -> Plan:
    """Each unit's side at `held_out` (the fraction of repositories, or of sessions, held out)."""
    everything_trains = {u.key: TRAIN for u in units}
    if held_out <= 0:
        return Plan("none", everything_trains, "no held-out split was asked for (held_out = 0)")
    counted = [u for u in units if u.calls > 0]
    repos = sorted({u.repo or u.key for u in counted}, key=fraction)
    if len(repos) >= 2:
        test = {r for r in repos if fraction(r) < held_out} or {repos[0]}
        if len(test) == len(repos):
            test.discard(repos[-1])
        return Plan("repository", {u.key: TEST if (u.repo or u.key) in test else TRAIN for u in units})
    keys = sorted({u.key for u in counted}, key=fraction)
    if len(keys) < 2:
        return Plan("none", everything_trains, f"{len(keys)} unit with calls: nothing could be held out")
    k = min(len(keys) - 1, max(1, round(held_out * len(keys) + 0.5)))
    test = set(keys[:k])
    note = (
        f"fewer than two repositories: whole sessions held out ({k} of {len(keys)}), so the repository "
        "appears in both splits"
    )
    return Plan("session", {u.key: TEST if u.key in test else TRAIN for u in units}, note)
