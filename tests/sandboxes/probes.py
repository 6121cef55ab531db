"""Network probes run inside a sandbox with its own python3 (the image has no curl)."""

from __future__ import annotations

import json

from sandboxes.sandbox import Sandbox

_CONNECT = """
import json, socket, sys
host, port = sys.argv[1], int(sys.argv[2])
try:
    socket.create_connection((host, port), timeout=3).close()
    print(json.dumps({"ok": True}))
except OSError as exc:
    print(json.dumps({"ok": False, "error": repr(exc)}))
"""

_RESOLVE = """
import json, socket, sys
try:
    print(json.dumps({"ok": True, "addrs": sorted({a[4][0] for a in socket.getaddrinfo(sys.argv[1], 80)})}))
except OSError as exc:
    print(json.dumps({"ok": False, "error": repr(exc)}))
"""

_HTTP_GET = """
import json, sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=5) as r:
        print(json.dumps({"ok": True, "status": r.status, "body": r.read().decode()}))
except Exception as exc:
    print(json.dumps({"ok": False, "error": repr(exc)}))
"""


def _run(box: Sandbox, script: str, *args: str) -> dict[str, object]:
    res = box.exec(["python3", "-c", script, *args], timeout=30)
    assert res.exit_code == 0, res.stderr.decode()
    return dict(json.loads(res.stdout.decode().strip().splitlines()[-1]))


def connect(box: Sandbox, host: str, port: int) -> dict[str, object]:
    return _run(box, _CONNECT, host, str(port))


def resolve(box: Sandbox, name: str) -> dict[str, object]:
    return _run(box, _RESOLVE, name)


def http_get(box: Sandbox, url: str) -> dict[str, object]:
    return _run(box, _HTTP_GET, url)
