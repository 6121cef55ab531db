"""A local S3-compatible server for the tests: moto's server mode on loopback.

It stands in for a real object store (S3, GCS, MinIO), which cannot be installed or reached on this
machine. It speaks the S3 REST API over HTTP, so every client (s3fs in the test process, the proxies in
Ray workers) talks to it exactly as to a real bucket, through ``AWS_ENDPOINT_URL``. Its objects live in
the test process's memory: stopping the server and starting it again on the same port is an outage that
keeps the bucket's contents, as a real store's would."""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from moto.server import ThreadedMotoServer

from tests.support import free_port


@dataclass
class LocalS3:
    port: int = field(default_factory=free_port)
    server: ThreadedMotoServer | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """What a client process needs: dummy credentials, the endpoint, and no long retry loops (the
        uploader does its own retries with backoff; botocore's would only stretch an outage test)."""
        return {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_MAX_ATTEMPTS": "1",
            "AWS_RETRY_MODE": "standard",
        }

    def start(self) -> None:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def new_bucket(self) -> str:
        import s3fs

        name = f"b-{uuid.uuid4().hex[:10]}"
        s3fs.S3FileSystem(skip_instance_cache=True).mkdir(name)
        return name


@contextlib.contextmanager
def local_s3() -> Iterator[LocalS3]:
    """Start the server and point this process's AWS environment at it (restored afterwards)."""
    s3 = LocalS3()
    saved = {k: os.environ.get(k) for k in s3.env()}
    os.environ.update(s3.env())
    s3.start()
    try:
        yield s3
    finally:
        s3.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
