"""Replay held-out recorded agent calls against serving endpoints: MAL and speedup where the drafter is
served (docs/serving.md).

    python -m trainer replay --data DATASET --endpoint base=http://h:8000 --endpoint dflash=http://h:8001
"""

from trainer.replay.calls import ReplayCall, ReplayError, load_calls
from trainer.replay.cli import replay_command, run_replay
from trainer.replay.counters import SpecCounters, parse
from trainer.replay.settings import ReplaySettings

__all__ = [
    "ReplayCall",
    "ReplayError",
    "ReplaySettings",
    "SpecCounters",
    "load_calls",
    "parse",
    "replay_command",
    "run_replay",
]
