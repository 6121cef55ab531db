"""The call record: the one contract every stage shares, from the proxy's Parquet parts to the trainer.

- `schema`: `CallRecord` (one row, one call), the Arrow `SCHEMA` derived from it, and `SCHEMA_VERSION`.
- `dataset`: the published dataset's `calls` and `sessions` configs (a call record joined with its session).
- `ids`: how a session is named on the wire (`/s/{id}`) and how an attempt of it is named (`{id}-a{n}`).
- `io`: atomic Parquet parts, and a reader that brings every older schema version to the current one.

This package imports nothing of the project: proxy, factory, sandboxes and trainer all import it.
See docs/schema.md.
"""

from records.dataset import DATASET_CALLS_SCHEMA, SESSIONS_SCHEMA
from records.ids import attempt_id, parse_attempt_id, session_prefix, split_session_path
from records.io import conform, parquet_files, read_table, write_part
from records.schema import SCHEMA, SCHEMA_VERSION, CallRecord, schema_version

__all__ = [
    "DATASET_CALLS_SCHEMA",
    "SCHEMA",
    "SCHEMA_VERSION",
    "SESSIONS_SCHEMA",
    "CallRecord",
    "attempt_id",
    "conform",
    "parquet_files",
    "parse_attempt_id",
    "read_table",
    "schema_version",
    "session_prefix",
    "split_session_path",
    "write_part",
]
