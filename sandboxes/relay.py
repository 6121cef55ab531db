"""A TCP relay on the sandbox network's gateway address to the proxy as the host sees it.

The proxy usually listens on the host's loopback, which no container can reach; the relay listens on the
bridge gateway (the one host port the firewall leaves open to the sandbox) and pipes bytes to the proxy.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpRelay:
    def __init__(self, listen_host: str, target_host: str, target_port: int) -> None:
        self.listen_host = listen_host
        self.target = (target_host, target_port)
        self._server: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.port = 0

    def start(self) -> int:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((self.listen_host, 0))
        server.listen(64)
        self._server = server
        self.port = int(server.getsockname()[1])
        threading.Thread(target=self._accept_loop, name=f"relay-{self.port}", daemon=True).start()
        return self.port

    def stop(self) -> None:
        if self._server is not None:
            with contextlib.suppress(OSError):
                self._server.shutdown(socket.SHUT_RDWR)
            self._server.close()
            self._server = None
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.close()

    def _accept_loop(self) -> None:
        server = self._server
        while server is not None:
            try:
                client, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=10)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        with self._lock:
            self._conns.update((client, upstream))
        back = threading.Thread(target=self._pipe, args=(upstream, client), daemon=True)
        back.start()
        self._pipe(client, upstream)
        back.join()
        for sock in (client, upstream):
            with self._lock:
                self._conns.discard(sock)
            sock.close()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
