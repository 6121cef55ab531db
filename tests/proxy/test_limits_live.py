"""Issue 16's defects that need a real server: the proxy as a process, raw sockets as hostile or broken
clients, the scripted upstream (or a hung one), a real full disk. Each was reproduced against the code
before the fix (see docs/BENCHMARKS.md, "Proxy hardening probe")."""

from __future__ import annotations

import json
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.proxy.conftest import fill
from tests.proxy.hung_upstream import hung_upstream
from tests.proxy.live import proxy_server, scripted_upstream
from tests.support import REPO_ROOT

pytestmark = pytest.mark.slow
MSG = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "go"}]}
HANG_GUARD_S = 60  # a hang guard only: these tests check what the server did, not how fast


@pytest.fixture(scope="module")
def upstream():
    with scripted_upstream() as url:
        yield url


def rss_mib(pid: int, field: str = "VmHWM") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise AssertionError(field)


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def read_reply(sock: socket.socket, timeout: float = 10) -> bytes:
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data


def read_until_closed(sock: socket.socket, timeout: float = HANG_GUARD_S) -> tuple[bytes, bool]:
    """(what the server sent, whether the server closed the connection) — False: still open at `timeout`."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        return data, False
    except ConnectionResetError:
        pass
    return data, True


def upstream_requests(upstream: str) -> list:
    """What clients' calls made the proxy send (its own read of the served context at start left out)."""
    seen = httpx.get(f"{upstream}/_scripted/requests", timeout=10).json()
    return [r for r in seen if (r["method"], r["path"]) != ("GET", "/v1/models")]


def test_a_64_mb_header_is_refused_at_the_server(upstream, tmp_path):
    httpx.delete(f"{upstream}/_scripted/requests")
    with proxy_server(upstream, tmp_path / "data", "--client-key", "K1") as proxy:
        before = rss_mib(proxy.proc.pid, "VmRSS")
        sock = connect(proxy.url)
        sock.sendall(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: K1\r\nx-big: ")
        sent = 0
        try:
            while sent < 64 << 20:
                sock.sendall(b"a" * (1 << 20))
                sent += 1 << 20
        except OSError:
            pass  # the server closed the connection early
        reply = read_reply(sock)
        sock.close()
        assert reply.startswith(b"HTTP/1.1 431"), reply[:200]
        assert sent < 16 << 20, sent  # cut off long before the 64 MB arrived
        assert rss_mib(proxy.proc.pid, "VmHWM") - before < 64
        assert httpx.get(f"{proxy.url}/healthz").status_code == 200
    assert upstream_requests(upstream) == []


def test_headers_reach_the_upstream_as_the_client_sent_them(upstream, tmp_path):
    """Defect 4 (a non-ASCII header was a 500) and 11 (the upstream got `User-Agent: python-httpx`)."""
    httpx.delete(f"{upstream}/_scripted/requests")
    body = json.dumps(MSG).encode()
    with proxy_server(upstream, tmp_path / "data") as proxy:
        for extra in (b"", "x-note: café ☕\r\nuser-agent: claude-cli/2 (é)\r\n".encode()):
            sock = connect(proxy.url)
            sock.sendall(
                b"POST /v1/messages HTTP/1.1\r\nhost: x\r\nconnection: close\r\n"
                + extra
                + b"content-length: %d\r\n\r\n" % len(body)
                + body
            )
            reply, closed = read_until_closed(sock)  # the whole reply, then the server's close: no idle wait
            assert closed
            assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
            sock.close()
        rows = proxy.rows()
    bare, noted = upstream_requests(upstream)
    names = {k.lower() for k, _ in bare["headers"]}
    assert not names & {"user-agent", "accept"}, names
    sent = {k.lower(): v.encode("latin-1") for k, v in noted["headers"]}
    assert sent["x-note"] == "café ☕".encode()
    assert sent["user-agent"] == "claude-cli/2 (é)".encode()
    assert sorted(r["user_agent"] or "" for r in rows) == ["", "claude-cli/2 (é)"]


def test_a_body_shorter_than_its_content_length_times_out_with_a_record(upstream, tmp_path):
    with proxy_server(upstream, tmp_path / "data", "--body-timeout-s", "1") as proxy:
        sock = connect(proxy.url)
        sock.sendall(b'POST /s/short/v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{"model"')
        reply, closed = read_until_closed(sock)
        sock.close()
        assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
        assert closed, "the connection stayed open after the 408 (the rest of the body was still awaited)"
        (row,) = proxy.rows(session_id="short")
    assert (row["outcome"], row["status_code"]) == ("rejected", 408)
    assert "not received within 1 s" in row["error"]  # the --body-timeout-s deadline, no other, refused it
    assert row["request_json"] == '{"model"'


def test_a_slowloris_head_and_a_silent_connection_are_cut_off(upstream, tmp_path):
    with proxy_server(
        upstream, tmp_path / "data", "--header-timeout-s", "1", "--idle-timeout-s", "1"
    ) as proxy:
        silent = connect(proxy.url)
        slow = connect(proxy.url)
        slow.sendall(b"POST /v1/messages HTTP/1.1\r\n")
        # A header every 0.25 s, never the blank line that ends the head: only the head deadline (counted
        # from the first byte, not from the last) can end this; the server answers 408 and closes.
        deadline = time.monotonic() + HANG_GUARD_S
        cut = b""
        i = 0
        while not cut:
            assert time.monotonic() < deadline, (
                f"hang guard: a dribbled head was not cut off in {HANG_GUARD_S} s"
            )
            try:
                slow.sendall(b"x-%d: y\r\n" % i)
            except OSError:
                cut = read_reply(slow) or b"(reset)"
                break
            i += 1
            if select.select([slow], [], [], 0.25)[0]:
                cut = read_reply(slow) or b"(closed)"
        assert cut.startswith(b"HTTP/1.1 408"), cut[:200]  # the head deadline's answer, then the close
        reply, closed = read_until_closed(silent)
        assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
        assert closed
        # An idle keep-alive connection is closed after --idle-timeout-s.
        kept = connect(proxy.url)
        kept.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        reply, closed = read_until_closed(kept)
        assert b"200 OK" in reply
        assert b"connection: close" not in reply.lower()  # kept alive after the answer...
        assert closed, "an idle keep-alive connection was never closed"  # ...until it idled out
        for s in (silent, slow, kept):
            s.close()


def test_a_slow_reader_that_hangs_up_is_not_recorded_ok_and_costs_no_memory(upstream, tmp_path):
    """Defect 5 as reproduced: a 4 KiB receive buffer, a stream of tens of MB, nothing read, closed after
    2 s. The proxy stops pulling the upstream, records `client_disconnected` with what was delivered."""
    body = json.dumps({**MSG, "model": "bench-200000", "stream": True}).encode()
    with proxy_server(upstream, tmp_path / "data") as proxy:
        before = rss_mib(proxy.proc.pid, "VmRSS")
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        host, port = proxy.url.removeprefix("http://").split(":")
        sock.connect((host, int(port)))
        sock.sendall(
            b"POST /s/slow/v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % len(body) + body
        )
        time.sleep(2)
        grew = rss_mib(proxy.proc.pid, "VmHWM") - before
        sock.close()
        closed = time.monotonic()
        deadline = closed + 10
        while not proxy.rows(session_id="slow") and time.monotonic() < deadline:
            time.sleep(0.2)
        (row,) = proxy.rows(session_id="slow")
    assert row["outcome"] == "client_disconnected"
    assert "bytes of the response had been delivered" in row["error"]
    delivered = int(row["error"].split("; ")[1].split()[0])
    assert delivered < 4 << 20
    assert grew < 64, grew


def test_sigterm_cuts_a_hung_stream_at_the_deadline_and_records_it(tmp_path):
    """Defect 10: a hung upstream kept the proxy alive after SIGTERM until the client gave up."""
    with hung_upstream() as up, proxy_server(up, tmp_path / "data", "--shutdown-timeout-s", "1") as proxy:
        with httpx.stream(
            "POST", f"{proxy.url}/s/hung/v1/messages", json={**MSG, "stream": True}, timeout=30
        ) as r:
            it = r.iter_bytes()
            first = next(it)
            assert b"message_start" in first
            t0 = time.monotonic()
            proxy.proc.send_signal(signal.SIGTERM)
            rest = b"".join(it)  # the hung upstream never ends it: only the proxy's cut can
        cut_after = time.monotonic() - t0
        try:
            proxy.proc.wait(timeout=HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"hang guard: the proxy did not exit within {HANG_GUARD_S} s of SIGTERM")
    assert b"event: error" in rest
    assert b"shutting down" in rest
    assert cut_after > 0.8, cut_after  # not before the 1 s deadline: the call had its time to finish
    assert proxy.proc.returncode in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once shut down
    (row,) = proxy.rows(session_id="hung")
    assert row["outcome"] == "timeout"
    assert "shutdown deadline" in row["error"]


def test_a_full_disk_is_a_503_with_a_reason_and_no_acknowledged_call_is_lost(upstream, small_disk):
    """Defect 1 end to end: the data dir on a 3 MiB tmpfs filled to the brim, 100 KB calls; then space
    freed; then SIGTERM. Every call that got its answer is in Parquet, and none that did not."""
    data = small_disk / "data"
    big = "x" * 100_000
    answered: list[int] = []
    refused: list[int] = []

    def call(i: int, stream: bool) -> None:
        body = {**MSG, "messages": [{"role": "user", "content": big}], "stream": stream}
        try:
            r = httpx.post(f"{proxy.url}/s/full-{i}/v1/messages", json=body, timeout=30)
        except httpx.HTTPError:
            refused.append(i)
            return
        complete = (
            r.status_code == 200
            and (not stream or b"message_stop" in r.content)
            and b"event: error" not in r.content
        )
        (answered if complete else refused).append(i)

    with proxy_server(upstream, data, "--min-free-bytes", "0") as proxy:
        for i in range(3):
            call(i, stream=i % 2 == 1)
        fill(small_disk)
        for i in range(3, 11):
            call(i, stream=i % 2 == 1)
        health = httpx.get(f"{proxy.url}/healthz")
        assert health.status_code == 503
        assert "disk full" in health.json()["recording"]["reason"]
        r = httpx.post(f"{proxy.url}/v1/messages", json=MSG, timeout=30)
        assert r.status_code == 503
        assert "disk full" in r.json()["error"]["message"]
        (small_disk / "filler").unlink()
        deadline = time.monotonic() + 10
        while httpx.get(f"{proxy.url}/healthz").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        for i in range(11, 19):
            call(i, stream=i % 2 == 1)
        proxy.proc.send_signal(signal.SIGTERM)
        proxy.proc.wait(timeout=30)
        recorded = {int(r["session_id"].split("-")[1]) for r in proxy.rows() if r["session_id"]}
    assert set(range(3)) | set(range(11, 19)) <= set(answered)
    assert set(range(3, 11)) <= set(refused)
    assert set(answered) <= recorded  # nothing acknowledged is lost


def test_empty_or_environment_client_keys_never_leave_auth_off(upstream, tmp_path, monkeypatch):
    """Defect 3: `DFLASH_PROXY_CLIENT_KEY=K1` was ignored and `--client-key ""` accepted requests without a key."""
    args = [sys.executable, "-m", "proxy", "serve", "--upstream", upstream, "--data-dir", str(tmp_path)]
    empty = subprocess.run([*args, "--client-key", ""], cwd=REPO_ROOT, capture_output=True, text=True)
    assert empty.returncode == 2
    assert "--client-key (from command line)" in empty.stderr
    assert "empty client key" in empty.stderr
    for name, value in (("DFLASH_PROXY_CLIENT_KEY", "K1"), ("DFLASH_PROXY_CLIENT_KEYS", '["K1", "K2"]')):
        with monkeypatch.context() as env:
            env.setenv(name, value)
            with proxy_server(upstream, tmp_path / name) as proxy:
                denied = httpx.post(f"{proxy.url}/v1/messages", json=MSG, timeout=30)
                ok = httpx.post(
                    f"{proxy.url}/v1/messages", json=MSG, headers={"authorization": "bearer K1"}, timeout=30
                )
        assert (denied.status_code, ok.status_code) == (401, 200), name
