"""Writing call records atomically, finding them, and reading any schema version as the current one."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from records.atomic import atomic_path
from records.dataset_delta import DELTA_COLUMNS, CallDeltaDecoder, expand, window_of
from records.dataset_read import IN_TRAJECTORY, TrajectoryCursor, trajectory_files, whole
from records.schema import SCHEMA, schema_version
from records.storage import calls_store, is_url, parquet_keys

# Column names older writers used, and their current names.
LEGACY_NAMES = {"language": "lang"}


def write_part(
    rows: Iterable[Mapping[str, Any]] | pa.Table, directory: Path, name: str, schema: pa.Schema = SCHEMA
) -> Path:
    """Write `rows` as `directory/name`, atomically: a hidden temp file, fsync, rename, fsync the folder.

    pyarrow.dataset ignores names starting with "." — readers never see a half-written part."""
    directory.mkdir(parents=True, exist_ok=True)
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(list(rows), schema=schema)
    final = directory / name
    with atomic_path(final) as tmp:
        pq.write_table(table, tmp, compression="zstd")
    return final


# Beside the call records: rows `python -m trainer regenerate` wrote (records.schema `regenerated_from`).
REGENERATED_DIR = "regenerated"


def regenerated_dir(path: str | Path) -> Path | None:
    """`path/regenerated/` when it holds re-sampled rows (a local data folder only), else None."""
    if is_url(path):
        return None
    p = Path(path) / REGENERATED_DIR
    return p if p.is_dir() and any(p.glob("*.parquet")) else None


def calls_dir(path: str | Path) -> Path:
    """Where the call records under `path` are: an exported dataset's `calls` config
    (`[dataset/]data/calls/`), the proxy's `calls/`, or `path` itself (a file or a directory)."""
    p = Path(path)
    for sub in ("dataset/data/calls", "data/calls", "calls"):
        if (p / sub).is_dir():
            return p / sub
    return p


def parquet_files(path: str | Path, *, required: bool = True) -> list[Path]:
    """Every Parquet file of the call records under `path` (see `calls_dir`); hidden and `_` names skipped,
    and so is `path/regenerated/` (re-sampled rows are read apart: `regenerated_dir`)."""
    p = calls_dir(path)
    if p.is_file():
        return [p]
    files = (
        sorted(
            f
            for f in p.rglob("*.parquet")
            if not any(part.startswith((".", "_")) for part in f.relative_to(p).parts)
            and f.relative_to(p).parts[0] != REGENERATED_DIR  # read apart, by records.io.regenerated_dir
        )
        if p.is_dir()
        else []
    )
    if not files and required:
        raise FileNotFoundError(f"no Parquet call records under {path}")
    return files


def conform(table: pa.Table | pa.RecordBatch, version: int | None = None) -> pa.Table:
    """Bring a table of any schema version to the current column names (older names renamed).

    Version 1 and 2 call records have the same columns, version 3 adds `max_tokens_capped` and 4
    `regenerated_from` (absent from older parts: readers take only the columns a file has); datasets and samples written by older
    code used `language` for `lang`."""
    t = table if isinstance(table, pa.Table) else pa.Table.from_batches([table])
    del version  # every version so far differs only by the renames below
    names = [LEGACY_NAMES.get(n, n) for n in t.column_names]
    if len(set(names)) != len(names):  # both spellings present: keep the current one
        keep = [i for i, n in enumerate(t.column_names) if n not in LEGACY_NAMES]
        return t.select(keep)
    return t.rename_columns(names)


def read_batches(
    path: str | Path, columns: Sequence[str] | None = None, batch_size: int = 1024
) -> Iterator[tuple[Path, pa.Table]]:
    """(file, table) batches of the call records under `path`, conformed; only `columns` that exist.

    A published `calls` config stores each call's prompt ids and request as offsets into its trajectory
    (records/dataset.py; the layout before it, as deltas against earlier rows: records/dataset_delta.py):
    `prompt_token_ids` and `request_json` are rebuilt here whole, file by file in stored order.
    `path` may be a storage URL (``s3://bucket/run``, records/storage.py): its parts are read in place."""
    cursor: tuple[str, TrajectoryCursor] | None = None
    for f, pf in _files(path):
        schema = pf.schema_arrow
        version = schema_version(schema)
        names = schema.names
        wanted = None
        if columns is not None:
            current = {LEGACY_NAMES.get(n, n): n for n in names}
            wanted = [current[c] for c in columns if c in current]
            wanted += [n for n in names if LEGACY_NAMES.get(n) in columns and n not in wanted]
        asked = columns is None or "prompt_token_ids" in columns or "request_json" in columns
        layout = DELTA_COLUMNS if "delta_ref" in names else IN_TRAJECTORY if "trajectory_id" in names else ()
        layout = layout if asked else ()
        helpers: list[str] = list(layout) if layout and columns is None else []
        if layout and wanted is not None:
            rebuilt = ("call_id", *layout, "prompt_token_ids", "request_json")
            helpers = [c for c in rebuilt if c not in columns]  # type: ignore[operator]
            wanted += [c for c in ("call_id", *layout) if c not in wanted]
        decoder = CallDeltaDecoder(window_of(schema)) if layout == DELTA_COLUMNS else None
        if layout == IN_TRAJECTORY:
            files = trajectory_files(f)
            if cursor is None or cursor[0] != str(files):
                cursor = (str(files), TrajectoryCursor(files))
        # ParquetFile reads one row group at a time: the dataset scanner's read-ahead held >1 GB of
        # decoded batches behind a slow consumer (a 200,000-call export read back, docs/BENCHMARKS.md)
        for batch in pf.iter_batches(batch_size=batch_size, columns=wanted):
            table = conform(batch, version)
            if decoder is not None:
                table = expand(table, decoder).drop_columns(helpers)
            elif layout and cursor is not None:
                table = whole(table, cursor[1]).drop_columns(helpers)
            yield f, table


def _files(path: str | Path) -> Iterator[tuple[Path, pq.ParquetFile]]:
    if not is_url(path):
        for f in parquet_files(path):
            yield f, pq.ParquetFile(str(f))
        return
    store = calls_store(str(path))
    keys = list(parquet_keys(store))
    if not keys:
        raise FileNotFoundError(f"no Parquet call records under {path}")
    for key in keys:  # the file's name (a split hint) is kept; its folder is the store's
        yield Path(store.path(key)), pq.ParquetFile(store.fs.open(store.path(key), "rb"))


def read_table(path: str | Path, columns: Sequence[str] | None = None) -> pa.Table:
    """All call records under `path` as one conformed table (small data: tests, samples, reports)."""
    tables = [t for _, t in read_batches(path, columns)]
    return pa.concat_tables(tables, promote_options="default") if tables else SCHEMA.empty_table()
