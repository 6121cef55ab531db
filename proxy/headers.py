"""Which headers cross the proxy, in each direction, as raw bytes."""

from __future__ import annotations

from pydantic import SecretStr

from proxy.auth import KEY_HEADERS

HOP_BY_HOP = {
    b"connection",
    b"keep-alive",
    b"proxy-authenticate",
    b"proxy-authorization",
    b"te",
    b"trailer",
    b"trailers",
    b"transfer-encoding",
    b"upgrade",
    b"host",
    b"content-length",
}
_NOT_UP = HOP_BY_HOP | set(KEY_HEADERS) | {b"x-dflash-tag"}
_REWRITE_DROP = {b"content-encoding", b"accept-encoding"}

Headers = list[tuple[bytes, bytes]]


def upstream_headers(client: Headers, *, rewrites: bool, anthropic: bool, key: SecretStr | None) -> Headers:
    """The client's headers for the upstream: no hop-by-hop ones, none of its keys, ours instead.

    Nothing is added that the client did not send (no client library's User-Agent), except: identity
    encoding when the client asked for none or the proxy must read the reply, and the upstream key."""
    drop = _NOT_UP | _REWRITE_DROP if rewrites else _NOT_UP
    out = [(k, utf8(v)) for k, v in ((k.lower(), v) for k, v in client) if k not in drop]
    if rewrites or not any(k == b"accept-encoding" for k, _ in out):
        out.append((b"accept-encoding", b"identity"))
    if key is not None:
        secret = key.get_secret_value().encode()
        out.append((b"authorization", b"Bearer " + secret))
        if anthropic:
            out.append((b"x-api-key", secret))
    return out


def utf8(value: bytes) -> bytes:
    """A header value as UTF-8 bytes: unchanged when it is UTF-8 (ASCII included); otherwise its Latin-1
    reading, in UTF-8. The aiohttp client writes header values as UTF-8 text, so this is the one reading
    of arbitrary bytes it can carry."""
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return value.decode("latin-1").encode("utf-8")
    return value


def response_headers(upstream: Headers, *, rewrites: bool) -> Headers:
    """The upstream's headers for the client (hop-by-hop dropped; its encoding too when the body changed)."""
    drop = HOP_BY_HOP | {b"content-encoding"} if rewrites else HOP_BY_HOP
    return [(k, v) for k, v in upstream if k.lower() not in drop]
