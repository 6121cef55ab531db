"""The hardening probe of issue 16, as a script: hostile and broken traffic against a real proxy process.

    .venv/bin/python -m tests.proxy.probe [--random 120] [--faults 40] [--kill-streams 64] [--no-disk]

Prints one line per part, the figures docs/BENCHMARKS.md records:
- malformed: requests tried, and handled (a 4xx, or relayed with a 2xx; never a 5xx or a dropped
  connection), and how many of those on a relayed route have their record;
- faults: client disconnects, upstream drops, upstream 5xx, upstream hangs, upstream down — tried, and
  handled as docs/proxy.md says (status and record outcome);
- kill -9: calls completed before `kill -9` under N concurrent streams, and how many are recorded (lost,
  duplicated);
- disk full (needs root for a tmpfs): calls answered, refused, and recorded, after filling and freeing the disk.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import socket
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

from tests.proxy.conftest import fill
from tests.proxy.live import LiveProxy, kill_9_under_load, proxy_server, scripted_upstream
from tests.support import free_port

MSG = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "go"}]}
ROUTES = [
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/responses",
    "/v1/chat/completions",
    "/v1/completions",
]


def raw_request(url: str, head: bytes, body: bytes = b"", timeout: float = 10) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(head + body)
        data = b""
        try:
            while b"\r\n\r\n" not in data or not _complete(data):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return data


def _complete(data: bytes) -> bool:
    head, _, body = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return body.endswith(b"0\r\n\r\n")


def malformed_cases(n_random: int, seed: int = 16) -> list[tuple[str, bytes, list[tuple[bytes, bytes]]]]:
    """(path, body, extra headers): the issue's cases by hand, then `n_random` random ones."""
    import gzip

    deep = b'{"model":"m","max_tokens":5,"messages":' + b"[" * 10_000 + b"]" * 10_000 + b"}"
    bomb = gzip.compress(gzip.compress(bytes(1 << 20), 9) * 1024, 9)
    hand = [
        (
            "/v1/messages",
            b'{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"\\ud83d"}]}',
            [],
        ),
        ("/v1/chat/completions", b'{"model":"m","messages":[{"role":"user","content":"\\udc00x"}]}', []),
        ("/v1/messages", json.dumps({**MSG, "max_tokens": None}).encode(), []),
        ("/v1/messages", deep, []),
        ("/v1/messages", json.dumps(MSG).encode(), [(b"x-note", "café".encode())]),
        ("/v1/messages", json.dumps(MSG).encode(), [(b"user-agent", "claude-cli/2 (é☕)".encode())]),
        ("/v1/messages", json.dumps(MSG).encode(), [(b"user-agent", b"caf\xe9")]),
        ("/v1/messages", bomb, [(b"content-encoding", b"gzip, gzip")]),
        ("/v1/messages", b"\x1f\x8b\x08\x00garbage", [(b"content-encoding", b"gzip")]),
        ("/v1/messages", json.dumps(MSG).encode(), [(b"content-encoding", b"compress")]),
        ("/v1/messages", json.dumps(MSG).encode(), [(b"content-encoding", b"gzip,gzip,gzip,gzip,gzip")]),
        *(
            (p, b, [])
            for p in ROUTES
            for b in (b"", b"null", b"{", b'"s"', b"[]", b"{}", b"\x00" * 64, b"\xff\xfe")
        ),
        ("/v1/messages", json.dumps({**MSG, "stream": "yes"}).encode(), []),
        ("/v1/messages", json.dumps({**MSG, "max_tokens": 0}).encode(), []),
        ("/v1/messages", json.dumps({**MSG, "max_tokens": 2**80}).encode(), []),
        (
            "/v1/messages",
            json.dumps({**MSG, "messages": [{"role": "user", "content": [{"type": "image"}]}]}).encode(),
            [],
        ),
        (
            "/v1/responses",
            json.dumps({"model": "m", "input": [{"type": "function_call_output"}]}).encode(),
            [],
        ),
        (
            "/v1/chat/completions",
            json.dumps({"model": "m", "messages": [{"role": 1}], "tools": [None]}).encode(),
            [],
        ),
    ]
    rng = random.Random(seed)
    scalars = [None, True, 0, -1, 2**64, 1.5, "", "x", "\ud83d", "é", [], {}]
    for _ in range(n_random):
        path = rng.choice(ROUTES)
        kind = rng.random()
        if kind < 0.3:
            body = rng.randbytes(rng.randint(0, 200))
        elif kind < 0.6:
            body = json.dumps(_random_json(rng, scalars, 4)).encode("utf-8", "surrogatepass")
        else:
            doc = {**MSG, "input": "x", "prompt": "x"}
            for _ in range(rng.randint(1, 4)):
                doc[rng.choice([*list(doc), "tools", "system", "stream", "tool_choice"])] = _random_json(
                    rng, scalars, 3
                )
            body = json.dumps(doc).encode("utf-8", "surrogatepass")
        headers = [
            (
                rng.choice([b"user-agent", b"x-api-key", b"content-type", b"session-id", b"x-stainless-os"]),
                bytes(
                    rng.choice([*range(0x20, 0x7F), *range(0x80, 0x100)]) for _ in range(rng.randint(1, 30))
                ).strip()
                or b"x",
            )
            for _ in range(rng.randint(0, 3))
        ]
        hand.append((path, body, headers))
    return hand


def _random_json(rng: random.Random, scalars: list, depth: int):  # type: ignore[no-untyped-def]
    if depth == 0 or rng.random() < 0.4:
        return rng.choice(scalars)
    if rng.random() < 0.5:
        return [_random_json(rng, scalars, depth - 1) for _ in range(rng.randint(0, 3))]
    return {
        rng.choice(["role", "content", "type", "text", "x"]): _random_json(rng, scalars, depth - 1)
        for _ in range(3)
    }


def probe_malformed(proxy: LiveProxy, n_random: int) -> str:
    """Handled: a 4xx, a 2xx, or the upstream's own 5xx relayed as it came (the record says so); never a
    5xx of the proxy's or a dropped connection."""
    cases = malformed_cases(n_random)
    statuses: dict[str, int] = {}
    for i, (path, body, headers) in enumerate(cases):
        head = f"POST /s/bad-{i}{path} HTTP/1.1\r\nhost: x\r\ncontent-length: {len(body)}\r\n".encode()
        head += b"".join(k + b": " + v + b"\r\n" for k, v in headers) + b"\r\n"
        reply = raw_request(proxy.url, head, body)
        statuses[f"bad-{i}"] = int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/1.1 ") else 0
    healthy = httpx.get(f"{proxy.url}/healthz").status_code == 200
    rows = {r["session_id"]: r for r in proxy.rows()}
    relayed_5xx = {
        sid
        for sid, st in statuses.items()
        if st >= 500 and sid in rows and (rows[sid]["error"] or "").startswith(f"upstream answered {st}")
    }
    handled = {sid for sid, st in statuses.items() if 200 <= st < 500} | relayed_5xx
    return (
        f"malformed: {len(cases)} tried, {len(handled)} handled (4xx, or relayed: {len(relayed_5xx)} of them "
        f"the upstream's own 5xx), {len(handled & set(rows))} of them recorded; proxy healthy after: {healthy}"
    )


def probe_faults(upstream: str, data: Path, n: int) -> str:
    """Each fault n times; handled = the documented status and outcome."""
    stream = {**MSG, "stream": True}
    results: Counter[str] = Counter()
    tried: Counter[str] = Counter()
    with proxy_server(upstream, data / "faults", "--read-timeout-s", "1") as proxy:
        expected: dict[str, tuple[str, str]] = {}
        for i in range(n):
            for kind in ("disconnect", "drop", "5xx", "hang"):
                sid = f"{kind}-{i}"
                tried[kind] += 1
                url = f"{proxy.url}/s/{sid}/v1/messages"
                if kind == "disconnect":
                    with httpx.stream("POST", url, json={**stream, "model": "bench-100000"}, timeout=30) as r:
                        next(r.iter_bytes())
                    expected[sid] = ("client_disconnected", "")
                elif kind == "drop":
                    r = httpx.post(url, json={**stream, "model": "drop-after-3"}, timeout=30)
                    expected[sid] = ("upstream_error", "ok" if b"event: error" in r.content else "")
                elif kind == "5xx":
                    r = httpx.post(url, json={**MSG, "model": f"status-{500 + i % 4}"}, timeout=30)
                    expected[sid] = ("upstream_error", "ok" if r.status_code >= 500 else "")
                else:
                    r = httpx.post(url, json={**MSG, "model": "slow-3000"}, timeout=30)
                    expected[sid] = ("timeout", "ok" if r.status_code == 504 else "")
        time.sleep(1)
        rows = {r["session_id"]: r for r in proxy.rows()}
    for sid, (outcome, answer) in expected.items():
        row = rows.get(sid)
        if (
            row is not None
            and row["outcome"] == outcome
            and (answer == "ok" or outcome == "client_disconnected")
        ):
            results[sid.split("-")[0]] += 1
    dead = f"http://127.0.0.1:{free_port()}"
    with proxy_server(dead, data / "down") as proxy:
        for i in range(n):
            tried["down"] += 1
            r = httpx.post(f"{proxy.url}/s/down-{i}/v1/messages", json=MSG, timeout=30)
            results["down"] += r.status_code == 502
        down_rows = [r for r in proxy.rows() if r["outcome"] == "upstream_error"]
    results["down"] = min(results["down"], len(down_rows))
    parts = ", ".join(f"{k} {results[k]}/{tried[k]}" for k in tried)
    return f"faults: {sum(tried.values())} tried, {sum(results.values())} handled ({parts})"


def probe_kill9(upstream: str, data: Path, streams: int, until: int) -> str:
    request = ("/v1/chat/completions", MSG)
    completed, ids = kill_9_under_load(
        upstream, data / "kill", request, streams, until, timeout_s=30, stream_end=b"[DONE]"
    )
    lost = set(completed) - set(ids)
    dup = sum(n - 1 for n in Counter(ids).values() if n > 1)
    return f"kill -9 under {streams} streams: {len(completed)} completed, {len(completed) - len(lost)} recorded, {len(lost)} lost, {dup} duplicated"


def probe_disk_full(upstream: str) -> str:
    mnt = Path(tempfile.mkdtemp(prefix="probe-disk-"))
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True
    ).returncode:
        return "disk full: skipped (cannot mount a tmpfs: not root)"
    answered, refused = [], []
    try:
        with proxy_server(upstream, mnt / "data", "--min-free-bytes", "0") as proxy:

            def call(i: int) -> None:
                body = {**MSG, "messages": [{"role": "user", "content": "x" * 100_000}], "stream": i % 2 == 1}
                try:
                    r = httpx.post(f"{proxy.url}/s/full-{i}/v1/messages", json=body, timeout=30)
                except httpx.HTTPError:
                    refused.append(i)
                    return
                ok = r.status_code == 200 and b"event: error" not in r.content
                (answered if ok else refused).append(i)

            for i in range(3):
                call(i)
            fill(mnt)
            for i in range(3, 11):
                call(i)
            (mnt / "filler").unlink()
            deadline = time.monotonic() + 10
            while httpx.get(f"{proxy.url}/healthz").status_code != 200 and time.monotonic() < deadline:
                time.sleep(0.1)
            for i in range(11, 19):
                call(i)
            proxy.proc.send_signal(signal.SIGTERM)
            proxy.proc.wait(timeout=30)
            recorded = {int(r["session_id"].split("-")[1]) for r in proxy.rows()}
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
    return (
        f"disk full: {len(answered) + len(refused)} calls, {len(answered)} answered, {len(refused)} refused "
        f"(503 or error event); {len(set(answered) & recorded)}/{len(answered)} answered calls recorded"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--random", type=int, default=120)
    ap.add_argument("--faults", type=int, default=40, help="times each fault is tried")
    ap.add_argument("--kill-streams", type=int, default=64)
    ap.add_argument("--kill-after", type=int, default=1000, help="completed calls before kill -9")
    ap.add_argument("--no-disk", action="store_true")
    a = ap.parse_args()
    data = Path(tempfile.mkdtemp(prefix="probe-"))
    with scripted_upstream() as upstream:
        with proxy_server(upstream, data / "malformed") as proxy:
            print(probe_malformed(proxy, a.random), flush=True)
        print(probe_faults(upstream, data, a.faults), flush=True)
        print(probe_kill9(upstream, data, a.kill_streams, a.kill_after), flush=True)
        if not a.no_disk:
            print(probe_disk_full(upstream), flush=True)


if __name__ == "__main__":
    main()
