"""Does the dataset export scale to the seed system's traffic? Peak memory, speed and bytes per call.

Generates realistic synthetic agent traffic as the proxy stores it (Parquet parts of 500 calls, sessions
interleaved as concurrent sessions are): sessions of 5–60 turns (or exactly ``--turns``), each call
resending the history, built on the real request bodies the agent CLIs sent (tests/fixtures/agents/, so
system prompts and tools are theirs), prompts growing to ``--max-prompt`` tokens; the ids are the Qwen
tokenizer's tokens of the text. Then runs ``factory.publish.export.export`` in a child process and reports
its peak RSS, calls/s and the shards of every config.

Stored bytes are those of `data/calls` + `data/trajectories`, the configs a reader needs for every call's
prompt ids, completion ids and messages; `data/sequences` (training-ready, derived) and `data/sessions` are
reported apart. The baseline ("plain") is the same published call rows with `prompt_token_ids` and
`request_json` whole instead of the trajectory columns, zstd Parquet, rebuilt here with
``records.io.read_batches`` a batch at a time. It keeps the published order (a session's calls together),
which zstd's pages exploit; the proxy's parts (sessions interleaved) are printed too, for comparison.

    python benchmarks/export_scale.py --calls 20000            # mixed sessions of 5–60 turns
    python benchmarks/export_scale.py --calls 3000 --turns 30  # the 30-turn goal: ≤ 0.2× plain
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pyarrow.parquet as pq  # noqa: E402
from export_traffic import generate, make_db, qwen_dir  # noqa: E402  (this folder is sys.path[0])


def run_export(data: Path, out: Path, url: str, tokenizer: str | None) -> None:
    from factory.db import connect, session_factory
    from factory.publish.export import export

    t0 = time.monotonic()
    st = export(session_factory(connect(url)), data, out, tokenizer=tokenizer)
    wall = time.monotonic() - t0
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so it would report the parent's peak
    status = Path("/proc/self/status").read_text()
    peak = int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("VmHWM:"))) / 1024
    ru = resource.getrusage(resource.RUSAGE_SELF)  # CPU seconds: on a shared machine, steadier than wall time
    json.dump(
        {
            "wall_s": wall,
            "cpu_s": ru.ru_utime + ru.ru_stime,
            "peak_rss_mb": peak,
            "calls": st.calls,
            "sessions": st.sessions,
            "trajectories": st.trajectories,
            "sequences": st.sequences,
            "files": st.files,
            "exact_ids_fraction": st.exact_ids_fraction,
        },
        sys.stdout,
    )


# The trajectory columns a plain row replaces with `prompt_token_ids` and `request_json` whole.
WHOLE = {"prompt_len": "prompt_token_ids", "request_params": "request_json"}
TRAJECTORY_ONLY = {
    "trajectory_id",
    "messages_field",
    "messages_prefix",
    "messages_tail",
    "completion_in_trajectory",
    "chat_prefix",
    "chat_tail",
    "tools",
}


def plain_bytes(out: Path, dest: Path, level: int | None = None) -> int:
    """The published call rows with whole prompt ids and request, zstd Parquet (the baseline), written a
    batch at a time as `records.io.read_batches` rebuilds them from `calls` + `trajectories`."""
    import pyarrow as pa

    from records import DATASET_CALLS_SCHEMA
    from records.io import read_batches

    names = [WHOLE.get(c, c) for c in DATASET_CALLS_SCHEMA.names if c not in TRAJECTORY_ONLY]
    writer = None
    for _, table in read_batches(out / "data" / "calls", batch_size=256):
        table = table.select([c for c in names if c in table.column_names])
        table = table.set_column(  # a string, as the proxy stores it
            table.schema.get_field_index("request_json"),
            "request_json",
            table.column("request_json").cast(pa.string()),
        )
        writer = writer or pq.ParquetWriter(dest, table.schema, compression="zstd", compression_level=level)
        writer.write_table(table)
    if writer is not None:
        writer.close()
    return dest.stat().st_size


def config_bytes(files: list[tuple[str, int]]) -> dict[str, list[int]]:
    """Shard sizes per config (`data/<config>/<split>-….parquet`)."""
    by: dict[str, list[int]] = {}
    for f, b in files:
        parts = f.split("/")
        if len(parts) == 3 and parts[0] == "data":
            by.setdefault(parts[1], []).append(b)
    return by


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--turns", type=int, default=None, help="every session this long (default: 5–60)")
    ap.add_argument("--max-prompt", type=int, default=30_000, help="prompt tokens at a session's last turn")
    ap.add_argument("--concurrency", type=int, default=16, help="sessions in flight (interleaved in parts)")
    ap.add_argument("--tokenizer", action="store_true", help="export with the tokenizer (ids searched)")
    ap.add_argument("--shard-mb", type=float, default=500, help="the export's shard_bytes, in MB")
    ap.add_argument("--work", type=Path, default=Path("/tmp/export_scale"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--_export", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a._export:
        run_export(Path(a._export[0]), Path(a._export[1]), a._export[2], qwen_dir() if a.tokenizer else None)
        return
    import shutil

    shutil.rmtree(a.work, ignore_errors=True)
    data, out = a.work / "data", a.work / "dataset"
    t0 = time.monotonic()
    sids = generate(data, a.calls, a.turns, a.max_prompt, a.concurrency, a.seed)
    url = make_db(data, sids)
    gen_s = time.monotonic() - t0
    in_bytes = sum(p.stat().st_size for p in (data / "calls").glob("*.parquet"))
    cmd = [sys.executable, __file__, "--_export", str(data), str(out), url] + (
        ["--tokenizer"] if a.tokenizer else []
    )
    env = {**os.environ, "DFLASH_EXPORT_SHARD_BYTES": str(int(a.shard_mb * 1e6))}
    res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout)
    t0 = time.monotonic()
    plain = plain_bytes(out, a.work / "plain.parquet")  # what a user writes: Arrow's default zstd level
    plain_s = time.monotonic() - t0
    plain_same = plain_bytes(out, a.work / "plain9.parquet", level=9)  # the export's own level, for fairness
    shards = config_bytes(res["files"])
    size = {c: sum(b) for c, b in shards.items()}
    n = res["calls"]
    stored = size.get("calls", 0) + size.get("trajectories", 0)
    print(
        f"calls {n:,} in {len(sids):,} sessions ({f'{a.turns} turns' if a.turns else '5–60 turns'}, "
        f"prompts to {a.max_prompt:,} tokens, {a.concurrency} in flight); generated in {gen_s:.0f} s, "
        f"proxy parts {in_bytes / 1e6:,.1f} MB"
    )
    print(
        f"export: {res['wall_s']:.1f} s, {n / res['wall_s']:,.0f} calls/s, peak RSS {res['peak_rss_mb']:,.0f} MB, "
        f"CPU {res['cpu_s']:.0f} s, tokenizer {'on' if a.tokenizer else 'off'}, exact-ids fraction {res['exact_ids_fraction']}; "
        f"{res['sessions']:,} sessions, {res['trajectories']:,} trajectories, {res['sequences']:,} sequences"
    )
    print(
        f"stored (calls + trajectories): {stored / n:,.0f} B/call ({size.get('calls', 0) / n:,.0f} + "
        f"{size.get('trajectories', 0) / n:,.0f}) vs {plain / n:,.0f} B/call plain zstd Parquet "
        f"-> {stored / plain:.3f}x (baseline rebuilt with read_batches in {plain_s:.0f} s)"
    )
    print(
        f"  against plain at the export's zstd level 9: {plain_same / n:,.0f} B/call -> {stored / plain_same:.3f}x"
    )
    print(
        f"  the proxy's own parts (the same calls, every column, sessions interleaved): {in_bytes / n:,.0f} B/call "
        f"-> stored is {stored / in_bytes:.3f}x"
    )
    print(
        f"also: sequences {size.get('sequences', 0) / n:,.0f} B/call ({size.get('sequences', 0) / plain:.3f}x plain), "
        f"sessions {size.get('sessions', 0) / 1e3:,.1f} kB"
    )
    for config, sizes in sorted(shards.items()):
        print(
            f"shards: {config}: {len(sizes)}, {min(sizes) / 1e6:.1f}–{max(sizes) / 1e6:.1f} MB, "
            f"{sum(sizes) / 1e6:,.1f} MB in all"
        )


if __name__ == "__main__":
    main()
