"""Where a run's files land: a local folder or an object store, named by one URL.

``Store.from_url("s3://bucket/prefix")`` (or ``gs://…``, ``memory://…``, ``file:///…``, a plain path) is
a thin layer over fsspec's filesystems, so credentials and endpoints come from the usual environment
(``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_ENDPOINT_URL`` for S3 and S3-compatible stores,
``GOOGLE_APPLICATION_CREDENTIALS`` for GCS) and ``s3fs``/``gcsfs`` are needed only for those schemes.

Keys are paths relative to the URL (``calls/part-….parquet``). An upload is atomic-ish: on an object
store one PUT (or a completed multipart upload) makes the object appear whole or not at all; on a local
folder the file is written under a hidden temporary name, fsync'd and renamed. Either way the upload is
confirmed by reading back the stored size, and readers skip hidden (``.``/``_``) names."""

from __future__ import annotations

import builtins
import os
import posixpath
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import fsspec
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from records.atomic import fsync_path
from records.errors import RecordsError

# Where call records may sit under a URL, most specific first (the same rule as records.io.calls_dir).
CALLS_SUBDIRS = ("dataset/data/calls", "data/calls", "calls")


class StorageError(RecordsError, RuntimeError):
    """An upload or read did not complete (network, credentials, a size that does not match)."""


def is_url(path: str | os.PathLike[str]) -> bool:
    """True for ``scheme://…`` other than ``file://`` (a plain or file:// path is a local folder)."""
    s = str(path)
    return "://" in s and not s.startswith("file://")


def _hidden(rel: str) -> bool:
    return any(part.startswith((".", "_")) for part in rel.split("/") if part)


class Store:
    """One storage URL: list, upload, download and read files under it."""

    def __init__(self, fs: fsspec.AbstractFileSystem, root: str, url: str) -> None:
        self.fs, self.root, self.url = fs, root.rstrip("/"), url.rstrip("/")

    @classmethod
    def from_url(cls, url: str | os.PathLike[str], **storage_options: Any) -> Store:
        """A store for `url`; `storage_options` go to the fsspec filesystem (else the environment's)."""
        text = str(url)
        if not text:
            raise ValueError("empty storage URL")
        if text.startswith("s3://"):
            # Listings must see parts other processes just uploaded: no cached directory listings; and a
            # new client per store, so an endpoint or credentials changed in the environment take effect.
            storage_options.setdefault("use_listings_cache", False)
            storage_options.setdefault("skip_instance_cache", True)
        try:
            fs, root = url_to_fs(text, **storage_options)
        except (ImportError, ValueError) as exc:
            raise StorageError(f"cannot open storage URL {text!r}: {exc}") from exc
        return cls(fs, root, text)

    @property
    def local(self) -> bool:
        return isinstance(self.fs, LocalFileSystem)

    def path(self, key: str = "") -> str:
        """The filesystem path of `key` (a path relative to the URL)."""
        key = key.strip("/")
        return posixpath.join(self.root, key) if key else self.root

    def url_of(self, key: str) -> str:
        return f"{self.url}/{key.strip('/')}" if key else self.url

    def child(self, key: str) -> Store:
        """The store rooted at `key` under this one."""
        return Store(self.fs, self.path(key), self.url_of(key))

    # -- listing and reading ------------------------------------------------------------------
    def list(self, prefix: str = "", suffix: str = "") -> list[str]:
        """Keys under `prefix` ending with `suffix`, sorted; hidden (``.``/``_``) names skipped."""
        base = self.path(prefix)
        try:
            found = self.fs.find(base)
        except FileNotFoundError:
            return []
        keys = []
        for p in found:
            rel = posixpath.relpath(p.rstrip("/"), self.root) if p.rstrip("/") != self.root else ""
            if rel and rel.endswith(suffix) and not _hidden(rel):
                keys.append(rel)
        return sorted(keys)

    def exists(self, key: str) -> bool:
        return bool(self.fs.exists(self.path(key)))

    def is_dir(self, key: str = "") -> bool:
        """A folder, or (on an object store) a prefix with at least one object under it."""
        p = self.path(key)
        if self.local:
            return Path(p).is_dir()
        try:
            return bool(self.fs.find(p, maxdepth=None, withdirs=False)) and not self.fs.isfile(p)
        except FileNotFoundError:
            return False

    def size(self, key: str) -> int:
        return int(self.fs.size(self.path(key)))

    def open(self, key: str, mode: str = "rb") -> IO[bytes]:
        return self.fs.open(self.path(key), mode)  # type: ignore[no-any-return]

    def read_bytes(self, key: str) -> bytes:
        return bytes(self.fs.cat_file(self.path(key)))

    def download(self, key: str, local: Path) -> Path:
        local.parent.mkdir(parents=True, exist_ok=True)
        self.fs.get_file(self.path(key), str(local))
        return local

    # -- writing ------------------------------------------------------------------------------
    def upload(self, local: Path, key: str) -> int:
        """Copy the local file to `key`, atomically as seen by readers; returns the size confirmed.

        Raises StorageError when the stored size differs (the caller keeps its local copy)."""
        size = local.stat().st_size
        dest = self.path(key)
        if self.local:
            parent = Path(dest).parent
            parent.mkdir(parents=True, exist_ok=True)
            tmp = parent / f".{Path(dest).name}.{uuid.uuid4().hex[:8]}.tmp"
            try:
                with local.open("rb") as src, tmp.open("wb") as out:
                    while chunk := src.read(1 << 20):
                        out.write(chunk)
                    out.flush()
                    os.fsync(out.fileno())
                tmp.replace(dest)
            finally:
                tmp.unlink(missing_ok=True)
            fsync_path(parent)
        else:
            self.fs.put_file(str(local), dest)
        stored = self.size(key)
        if stored != size:
            raise StorageError(f"{self.url_of(key)}: stored {stored} bytes, expected {size}")
        return stored

    def write_bytes(self, key: str, data: bytes) -> None:
        """Write a small file (a transcript, a log) through the same atomic upload."""
        tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"dflash-store-{uuid.uuid4().hex}"
        try:
            tmp.write_bytes(data)
            self.upload(tmp, key)
        finally:
            tmp.unlink(missing_ok=True)

    def mirror(self, local_dir: Path, suffix: str = ".parquet") -> builtins.list[Path]:
        """Copy every file under this store ending with `suffix` into `local_dir` (same relative names),
        skipping those already there with the same size: a local cache for readers that need files."""
        got: builtins.list[Path] = []  # `list` is also this class's method
        for key in self.list(suffix=suffix):
            dest = local_dir / key
            if not (dest.exists() and dest.stat().st_size == self.size(key)):
                tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:8]}.tmp")
                self.download(key, tmp)
                tmp.replace(dest)
            got.append(dest)
        return got

    def delete(self, key: str) -> None:
        self.fs.rm_file(self.path(key))


def calls_store(url: str | os.PathLike[str], **storage_options: Any) -> Store:
    """The store holding the call records under `url`: an exported dataset's `calls` config, a run's
    `calls/`, or `url` itself (the rule of records.io.calls_dir, for URLs)."""
    store = Store.from_url(url, **storage_options)
    for sub in CALLS_SUBDIRS:
        if store.is_dir(sub):
            return store.child(sub)
    return store


def parquet_keys(store: Store) -> Iterator[str]:
    yield from store.list(suffix=".parquet")
