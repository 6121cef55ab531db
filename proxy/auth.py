"""The client key: which headers carry it, and the check (before the proxy reads a body or opens upstream)."""

from __future__ import annotations

import hmac
from collections.abc import Iterable

KEY_HEADERS = (b"authorization", b"x-api-key", b"api-key")


def offered_keys(headers: Iterable[tuple[bytes, bytes]]) -> list[bytes]:
    """The keys a request presents: `Authorization: Bearer K` (scheme in any case), `x-api-key`, `api-key`."""
    found = []
    for name, value in headers:
        name = name.lower()
        if name == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() == b"bearer" and token.strip():
                found.append(token.strip())
        elif name in KEY_HEADERS:
            found.append(value.strip())
    return found


class ClientKeys:
    """Accepts any request when no key is configured; otherwise one of the keys must be presented."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._keys = [k.encode() for k in keys]
        if any(not k.strip() for k in self._keys):
            raise ValueError("an empty client key would accept requests that present no key")

    @property
    def required(self) -> bool:
        return bool(self._keys)

    def allows(self, headers: Iterable[tuple[bytes, bytes]]) -> bool:
        if not self._keys:
            return True
        offered = offered_keys(headers)
        # Every comparison runs, in constant time, so timing does not tell how much of a key matched.
        return any([hmac.compare_digest(o, k) for o in offered for k in self._keys])
