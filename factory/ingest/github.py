"""A small GitHub REST client (httpx): token auth, Link pagination (httpx's `Response.links`), primary
and secondary rate limits (retries by `tenacity`, each wait taken from the response), ETag conditional
requests. Everything the harvester needs and nothing else."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlencode

import httpx
import tenacity

from factory.errors import FactoryError

log = logging.getLogger(__name__)

API_URL = "https://api.github.com"


class GitHubError(FactoryError, RuntimeError):
    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class NotFound(GitHubError):
    pass


class _Retry(GitHubError):
    """A rate limit or a transient failure: retried after `delay` seconds (raised when retries run out)."""

    def __init__(self, message: str, status: int | None, delay: float):
        super().__init__(message, status)
        self.delay = delay


class EtagCache(Protocol):
    def get(self, url: str) -> tuple[str, str, str | None] | None: ...  # etag, body, link header

    def put(self, url: str, etag: str, body: str, link: str | None) -> None: ...


class MemoryEtagCache:
    def __init__(self) -> None:
        self._d: dict[str, tuple[str, str, str | None]] = {}

    def get(self, url: str) -> tuple[str, str, str | None] | None:
        return self._d.get(url)

    def put(self, url: str, etag: str, body: str, link: str | None) -> None:
        self._d[url] = (etag, body, link)


def _links(header: str | None) -> dict[str, str]:
    """rel → URL of a stored `Link` header, parsed by httpx as for a live response."""
    if not header:
        return {}
    links = httpx.Response(200, headers={"Link": header}).links
    return {str(rel): link["url"] for rel, link in links.items()}


@dataclass
class Page:
    data: Any
    next_url: str | None
    from_cache: bool


@dataclass
class Stats:
    requests: int = 0
    not_modified: int = 0
    rate_limited_waits: int = 0
    slept_s: float = 0.0


class GitHubClient:
    def __init__(
        self,
        token: str | None = None,
        *,
        base_url: str = API_URL,
        cache: EtagCache | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        max_retries: int = 8,
        secondary_backoff_s: float = 60.0,
        max_wait_s: float = 3900.0,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": "dflash-factory",
        }
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            headers=headers, timeout=timeout, follow_redirects=True, transport=transport
        )
        self.cache = cache if cache is not None else MemoryEtagCache()
        self._sleep = sleep
        self._clock = clock
        self.max_retries = max_retries
        self.secondary_backoff_s = secondary_backoff_s
        self.max_wait_s = max_wait_s
        self._reset_at: float | None = None  # primary limit exhausted until then
        self.stats = Stats()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> GitHubClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport ------------------------------------------------------------------------------
    def _wait(self, seconds: float, why: str) -> None:
        seconds = max(0.0, min(seconds, self.max_wait_s))
        log.warning("github: %s; waiting %.0fs", why, seconds)
        self.stats.rate_limited_waits += 1
        self.stats.slept_s += seconds
        self._sleep(seconds)

    def _note_limits(self, r: httpx.Response) -> None:
        remaining, reset = r.headers.get("X-RateLimit-Remaining"), r.headers.get("X-RateLimit-Reset")
        if remaining is not None and reset is not None and remaining.strip() == "0":
            self._reset_at = float(reset)
        elif remaining is not None:
            self._reset_at = None

    def _retry_delay(self, r: httpx.Response, attempt: int) -> float | None:
        """Seconds to wait before retrying ``r``, or None when it is not a rate limit / transient."""
        if r.status_code in (403, 429):
            if "Retry-After" in r.headers:
                try:
                    return float(r.headers["Retry-After"])
                except ValueError:
                    return self.secondary_backoff_s
            if r.headers.get("X-RateLimit-Remaining", "").strip() == "0" and "X-RateLimit-Reset" in r.headers:
                return float(r.headers["X-RateLimit-Reset"]) - self._clock() + 1
            text = r.text.lower()
            if r.status_code == 429 or "rate limit" in text or "abuse" in text:
                return self.secondary_backoff_s * (2**attempt)
            return None
        if r.status_code >= 500:
            return min(2.0**attempt, 60.0)
        return None

    def _before_request(self) -> None:
        if self._reset_at is not None and self._reset_at > self._clock():
            self._wait(self._reset_at - self._clock() + 1, "primary rate limit exhausted")
            self._reset_at = None

    def _attempt(self, url: str, cached: tuple[str, str, str | None] | None, attempt: int) -> Page:
        """One request; raises `_Retry` (with its delay) for what is worth retrying."""
        self._before_request()
        headers = {"If-None-Match": cached[0]} if cached else {}
        try:
            r = self._http.get(url, headers=headers)
        except httpx.TransportError as exc:
            raise _Retry(f"GET {url}: {exc}", None, min(2.0**attempt, 60.0)) from exc
        self.stats.requests += 1
        self._note_limits(r)
        if r.status_code == 304 and cached:
            self.stats.not_modified += 1
            return Page(json.loads(cached[1]), _links(cached[2]).get("next"), True)
        if r.status_code == 200:
            etag = r.headers.get("ETag")
            if etag:
                self.cache.put(url, etag, r.text, r.headers.get("Link"))
            return Page(r.json(), (r.links.get("next") or {}).get("url"), False)
        if r.status_code == 404:
            raise NotFound(f"GET {url}: 404 Not Found", 404)
        message = f"GET {url}: {r.status_code} {r.text[:200]}"
        delay = self._retry_delay(r, attempt)
        if delay is None:
            raise GitHubError(message, r.status_code)
        self._reset_at = None  # this wait already covers an exhausted primary limit
        raise _Retry(message, r.status_code, delay)

    def _retry_wait(self, state: tenacity.RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        delay = exc.delay if isinstance(exc, _Retry) else 0.0
        return max(0.0, min(delay, self.max_wait_s))

    def _before_sleep(self, state: tenacity.RetryCallState) -> None:
        seconds = state.upcoming_sleep
        log.warning("github: %s; waiting %.0fs", state.outcome.exception() if state.outcome else "", seconds)
        self.stats.rate_limited_waits += 1
        self.stats.slept_s += seconds

    def get(self, url_or_path: str, params: dict[str, Any] | None = None) -> Page:
        url = url_or_path if url_or_path.startswith("http") else self.base_url + url_or_path
        if params:
            clean = {k: v for k, v in params.items() if v is not None}
            url = f"{url}{'&' if '?' in url else '?'}{urlencode(clean)}"
        cached = self.cache.get(url)
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(_Retry),
            stop=tenacity.stop_after_attempt(self.max_retries + 1),
            wait=self._retry_wait,
            before_sleep=self._before_sleep,
            sleep=self._sleep,
            reraise=True,  # the last `_Retry` is a GitHubError naming the status
        )
        for attempt in retrying:
            with attempt:
                return self._attempt(url, cached, attempt.retry_state.attempt_number - 1)
        raise AssertionError("unreachable: tenacity returns or raises")

    def paginate(self, path: str, params: dict[str, Any] | None = None) -> Iterator[Any]:
        page = self.get(path, params)
        while True:
            yield from page.data
            if not page.next_url:
                return
            page = self.get(page.next_url)

    # -- endpoints ----------------------------------------------------------------------------
    def repo(self, name: str) -> dict[str, Any]:
        data: dict[str, Any] = self.get(f"/repos/{name}").data
        return data

    def issues(
        self,
        name: str,
        *,
        state: str = "all",
        since: str | None = None,
        labels: list[str] | None = None,
        per_page: int = 100,
    ) -> Iterator[dict[str, Any]]:
        """Issues (never pull requests), most recently updated first."""
        params = {
            "state": state,
            "sort": "updated",
            "direction": "desc",
            "per_page": per_page,
            "since": since,
            "labels": ",".join(labels) if labels else None,
        }
        for item in self.paginate(f"/repos/{name}/issues", params):
            if "pull_request" in item:
                continue
            yield item

    def commit_at(self, name: str, branch: str, until: str) -> str | None:
        """The head of ``branch`` as it was at ``until`` (ISO 8601): the issue's base commit."""
        page = self.get(f"/repos/{name}/commits", {"sha": branch, "until": until, "per_page": 1})
        return page.data[0]["sha"] if page.data else None


def is_bot(user: dict[str, Any] | None) -> bool:
    if not user:
        return True
    login = str(user.get("login") or "")
    return user.get("type") == "Bot" or login.endswith("[bot]") or login.endswith("-bot")
