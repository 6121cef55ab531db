"""The call record: the one contract every stage shares, from the proxy's Parquet parts to the trainer.

- `schema`: `CallRecord` (one row, one call), the Arrow `SCHEMA` derived from it, and `SCHEMA_VERSION`.
- `dataset`: the published dataset's configs (`calls`, `trajectories`, `sequences`, `sessions`); `dataset_read`
  rebuilds a call's prompt and request from its trajectory, `dataset_delta` reads the previous layout.
- `sequences`: the training sequence (`SEQUENCES_SCHEMA`, `Sequence`), which calls are trained on, and the
  session merge: the export publishes it, the trainer trains on it. `split`: the held-out rule.
- `ids`: how a session is named on the wire (`/s/{id}`) and how an attempt of it is named (`{id}-a{n}`).
- `io`: atomic Parquet parts, and a reader that brings every older schema version to the current one.

This package imports nothing of the project: proxy, factory, sandboxes and trainer all import it.
See docs/schema.md.
"""

from records.dataset import DATASET_CALLS_SCHEMA, SESSIONS_SCHEMA, TRAJECTORIES_SCHEMA
from records.ids import attempt_id, parse_attempt_id, session_prefix, split_session_path
from records.io import conform, parquet_files, read_table, write_part
from records.schema import SCHEMA, SCHEMA_VERSION, CallRecord, schema_version
from records.sequences import SEQUENCES_SCHEMA

__all__ = [
    "DATASET_CALLS_SCHEMA",
    "SCHEMA",
    "SCHEMA_VERSION",
    "SEQUENCES_SCHEMA",
    "SESSIONS_SCHEMA",
    "TRAJECTORIES_SCHEMA",
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
