"""Where call records come from: the proxy's calls/, the factory's exported dataset (its own split kept)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from records.io import calls_dir, parquet_files
from tests.trainer.dflash.tiny import tiny_target, write_calls
from trainer.data.build import build


def test_the_exported_dataset_keeps_its_split_and_skips_the_sessions_config(tmp_path: Path) -> None:
    target = tiny_target(layers=4)
    calls = tmp_path / "data" / "dataset" / "data" / "calls"
    calls.mkdir(parents=True)
    write_calls(target, calls / "train-00000-of-00001.parquet", sessions=3, calls=1, new_tokens=6, seed=1)
    held = pq.read_table(
        write_calls(target, tmp_path / "x.parquet", sessions=2, calls=1, new_tokens=6, seed=2)
    )
    held = held.set_column(held.schema.get_field_index("session_id"), "session_id", pa.array(["h0", "h1"]))
    held = held.set_column(held.schema.get_field_index("repo"), "repo", pa.array(["held/a", "held/b"]))
    held = held.rename_columns(
        ["lang" if c == "language" else c for c in held.column_names]
    )  # the export's name
    pq.write_table(held, calls / "test-00000-of-00001.parquet")
    sessions = tmp_path / "data" / "dataset" / "data" / "sessions"
    sessions.mkdir()
    pq.write_table(
        pa.table({"session_id": ["s0"], "patch": ["diff"]}), sessions / "train-00000-of-00001.parquet"
    )

    assert calls_dir(tmp_path / "data") == calls  # DATA_DIR -> its export's calls config
    assert len(parquet_files(tmp_path / "data")) == 2
    res = build(target, tmp_path / "data", max_len=512, eval_fraction=0.5)
    assert sorted(s.session_id or "" for s in res.eval) == [
        "h0",
        "h1",
    ]  # the export's test split, not a new hash
    assert len(res.train) == 3
    assert res.report["records"]["kept"] == 5


def test_the_proxy_calls_dir_is_found_under_data_dir(tmp_path: Path) -> None:
    target = tiny_target(layers=4)
    (tmp_path / "calls" / "2026-01-01").mkdir(parents=True)
    write_calls(
        target, tmp_path / "calls" / "2026-01-01" / "part-0.parquet", sessions=2, calls=1, new_tokens=4
    )
    (tmp_path / "calls" / ".part-1.parquet.tmp").write_bytes(b"half written")
    assert [p.name for p in parquet_files(tmp_path)] == ["part-0.parquet"]
