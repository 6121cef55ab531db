"""A local HTTP server speaking the slice of GitHub's REST API the harvester uses.

Shapes follow docs.github.com: `GET /repos/{o}/{r}`, `GET /repos/{o}/{r}/issues` (pull requests
included, as GitHub does, with a `pull_request` key), `GET /repos/{o}/{r}/commits?sha=&until=`;
`Link` pagination; `X-RateLimit-*` headers; `ETag` / `If-None-Match` → 304 (not counted against
the limit); and scripted failures (403 secondary limit with `Retry-After`, 429, 403 with the
primary limit exhausted)."""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse


@dataclass
class FakeRepo:
    full_name: str
    default_branch: str = "main"
    issues: list[dict[str, Any]] = field(default_factory=list)
    commits: list[tuple[str, str]] = field(default_factory=list)  # (sha, ISO date), newest first
    # Issue → fix (timeline events per issue; pull requests, their files; a commit's files) and repo facts.
    timelines: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    pulls: dict[int, dict[str, Any]] = field(default_factory=dict)
    pull_files: dict[int, list[str]] = field(default_factory=dict)
    commit_files: dict[str, list[str]] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)  # archived, fork, has_issues, parent


def issue(
    number: int,
    *,
    title: str = "",
    body: str = "x" * 120,
    login: str = "alice",
    user_type: str = "User",
    labels: tuple[str, ...] = (),
    state: str = "open",
    created: str = "2024-01-01T00:00:00Z",
    updated: str | None = None,
    pr: bool = False,
) -> dict[str, Any]:
    d: dict[str, Any] = {
        "number": number,
        "title": title or f"Issue {number}",
        "body": body,
        "user": {"login": login, "type": user_type},
        "labels": [{"name": lb} for lb in labels],
        "state": state,
        "created_at": created,
        "updated_at": updated or created,
        "html_url": f"https://github.com/x/y/issues/{number}",
    }
    if pr:
        d["pull_request"] = {"url": "..."}
    return d


class FakeGitHub:
    def __init__(self, limit: int = 5000) -> None:
        self.repos: dict[str, FakeRepo] = {}
        self.limit = limit
        self.remaining = limit
        self.reset_at = 2_000_000_000
        self.requests: list[dict[str, Any]] = []  # path, query, headers, status
        self.failures: list[tuple[int, dict[str, str], str]] = []  # served before anything else
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def do_GET(self) -> None:
                fake._handle(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> FakeGitHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add(self, repo: FakeRepo) -> FakeRepo:
        self.repos[repo.full_name.lower()] = repo
        return repo

    # -- request handling -------------------------------------------------------------------------
    def _send(
        self, h: BaseHTTPRequestHandler, status: int, body: Any, headers: dict[str, str] | None = None
    ) -> None:
        raw = b"" if status == 304 else json.dumps(body).encode()
        h.send_response(status)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Type", "application/json; charset=utf-8")
        h.send_header("Content-Length", str(len(raw)))
        h.end_headers()
        h.wfile.write(raw)

    def _limits(self) -> dict[str, str]:
        return {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(self.remaining),
            "X-RateLimit-Reset": str(self.reset_at),
            "X-RateLimit-Used": str(self.limit - self.remaining),
        }

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        u = urlparse(h.path)
        q = {k: v[-1] for k, v in parse_qs(u.query).items()}
        with self._lock:
            rec = {"path": u.path, "query": q, "headers": dict(h.headers.items())}
            self.requests.append(rec)
            if self.failures:
                status, headers, msg = self.failures.pop(0)
                rec["status"] = status
                self._send(h, status, {"message": msg}, headers)
                return
            status, body, headers = self._route(u.path, q, h.headers.get("If-None-Match"))
            if status != 304:
                self.remaining = max(0, self.remaining - 1)
            headers.update(self._limits())
            rec["status"] = status
        self._send(h, status, body, headers)

    def _route(self, path: str, q: dict[str, str], inm: str | None) -> tuple[int, Any, dict[str, str]]:
        parts = path.strip("/").split("/")
        if len(parts) < 3 or parts[0] != "repos":
            return 404, {"message": "Not Found"}, {}
        repo = self.repos.get(f"{parts[1]}/{parts[2]}".lower())
        if repo is None:
            return 404, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}, {}
        if len(parts) == 3:
            body: Any = {"full_name": repo.full_name, "default_branch": repo.default_branch, "private": False}
            return self._etagged({**body, **repo.facts}, inm, {})
        fix = self._fix_route(repo, parts, q, path, inm)
        if fix is not None:
            return fix
        if parts[3] == "issues":
            items = list(repo.issues)
            state = q.get("state", "open")
            if state != "all":
                items = [i for i in items if i["state"] == state]
            if "since" in q:
                items = [i for i in items if i["updated_at"] >= q["since"]]
            if q.get("labels"):
                want = q["labels"].split(",")
                items = [i for i in items if all(w in {lb["name"] for lb in i["labels"]} for w in want)]
            key = "updated_at" if q.get("sort") == "updated" else "created_at"
            items.sort(key=lambda i: (i[key], i["number"]), reverse=q.get("direction", "desc") == "desc")
            return self._paged(path, q, items, inm)
        if parts[3] == "commits":
            commits = repo.commits
            if "until" in q:
                commits = [c for c in commits if c[1] <= q["until"]]
            items = [{"sha": sha, "commit": {"committer": {"date": d}}} for sha, d in commits]
            return self._paged(path, q, items, inm)
        return 404, {"message": "Not Found"}, {}

    def _fix_route(
        self, repo: FakeRepo, parts: list[str], q: dict[str, str], path: str, inm: str | None
    ) -> tuple[int, Any, dict[str, str]] | None:
        """issues/{n}/timeline, pulls/{n}, pulls/{n}/files, commits/{sha} (None: not one of these)."""
        tail = parts[3:]
        if len(tail) == 3 and tail[0] == "issues" and tail[2] == "timeline":
            return self._paged(path, q, repo.timelines.get(int(tail[1]), []), inm)
        if tail[0] == "pulls" and len(tail) >= 2 and int(tail[1]) in repo.pulls:
            n = int(tail[1])
            if len(tail) == 2:
                return self._etagged(repo.pulls[n], inm, {})
            if tail[2:] == ["files"]:
                return self._paged(path, q, [{"filename": f} for f in repo.pull_files.get(n, [])], inm)
        if len(tail) == 2 and tail[0] == "commits" and tail[1] in repo.commit_files:
            body = {"sha": tail[1], "html_url": f"https://github.com/{repo.full_name}/commit/{tail[1]}"}
            return self._etagged(
                {**body, "files": [{"filename": f} for f in repo.commit_files[tail[1]]]}, inm, {}
            )
        return None

    def _paged(
        self, path: str, q: dict[str, str], items: list[Any], inm: str | None
    ) -> tuple[int, Any, dict[str, str]]:
        per = int(q.get("per_page", 30))
        page = int(q.get("page", 1))
        last = max(1, -(-len(items) // per))
        chunk = items[(page - 1) * per : page * per]
        links = []
        base = f"{self.url}{path}"
        for rel, p in (("next", page + 1), ("last", last)) if page < last else ():
            links.append(f'<{base}?{urlencode({**q, "page": p})}>; rel="{rel}"')
        if page > 1:
            links.append(f'<{base}?{urlencode({**q, "page": 1})}>; rel="first"')
        headers = {"Link": ", ".join(links)} if links else {}
        return self._etagged(chunk, inm, headers)

    def _etagged(
        self, body: Any, inm: str | None, headers: dict[str, str]
    ) -> tuple[int, Any, dict[str, str]]:
        etag = 'W/"' + hashlib.sha1(json.dumps(body, sort_keys=True).encode()).hexdigest() + '"'
        headers["ETag"] = etag
        if inm == etag:
            return 304, None, headers
        return 200, body, headers
