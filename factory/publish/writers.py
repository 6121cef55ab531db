"""The export's open shard writers, and how a finished session's rows reach them."""

from __future__ import annotations

from pathlib import Path

from factory.publish.regenerated import Sources
from factory.publish.shards import ShardWriter
from factory.publish.stats import SCHEMAS, ExportStats
from factory.publish.trajectories import SessionTrajectories
from records.sequences import Sequence


class Writers:
    """One ShardWriter per (config, split), opened on first use; closed together."""

    def __init__(self, root: Path, max_bytes: int, max_rows: int | None) -> None:
        self.root, self.max_bytes, self.max_rows = root, max_bytes, max_rows
        self.open: dict[tuple[str, str], ShardWriter] = {}

    def __call__(self, config: str, split: str) -> ShardWriter:
        if (config, split) not in self.open:
            self.open[(config, split)] = ShardWriter(
                self.root / "data" / config,
                split,
                SCHEMAS[config],
                max_bytes=self.max_bytes,
                max_rows=self.max_rows,
            )
        return self.open[(config, split)]

    def emit(self, session: SessionTrajectories, split: str, stats: ExportStats, sources: Sources) -> None:
        """A finished session's trajectories, calls and sequences (noted in `sources` for re-samples)."""
        for out in session.close(split):
            if out.trajectory is not None:
                self("trajectories", split).add(out.trajectory)
                stats.trajectories += 1
            for row in out.calls:
                self("calls", split).add(row)
            for seq in out.sequences:
                self.sequence(seq, stats)
                sources.note(seq, session.prompt_hashes)

    def sequence(self, seq: Sequence, stats: ExportStats) -> None:
        stats.sequences += 1
        stats.supervised_tokens += seq.supervised
        stats.sequences_by_source[seq.source] += 1
        self("sequences", seq.split).add(seq.row())

    def close(self) -> list[tuple[str, int]]:
        paths = [p for w in self.open.values() for p in w.close()]
        return sorted((p.relative_to(self.root).as_posix(), p.stat().st_size) for p in paths)
