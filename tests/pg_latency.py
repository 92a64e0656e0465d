"""A TCP relay in front of the PostgreSQL server that delays everything the server sends by a
fixed time: a server that far away. A call that takes one round trip then takes about the
delay, two take twice it, whatever the machine's load adds on top (tests of round trips).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit


class LatencyRelay:
    """``with LatencyRelay(url, delay_s) as relay``: ``relay.url(url)`` reaches the server of
    ``url`` through the relay."""

    def __init__(self, server_url: str, delay_s: float) -> None:
        parts = urlsplit(server_url)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self.delay_s = delay_s
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.closed = threading.Event()
        self.socks: list[socket.socket] = []

    def url(self, url: str) -> str:
        parts = urlsplit(url)
        user = f"{parts.username}@" if parts.username else ""
        return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{self.port}"))

    def __enter__(self) -> LatencyRelay:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closed.set()
        self.listener.close()
        for s in self.socks:
            with contextlib.suppress(OSError):
                s.close()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.socks += [client, server]
            threading.Thread(target=self._copy, args=(client, server), daemon=True).start()
            threading.Thread(target=self._delayed, args=(server, client), daemon=True).start()

    @staticmethod
    def _chunks(src: socket.socket) -> Iterator[bytes]:
        while True:
            try:
                data = src.recv(1 << 16)
            except OSError:
                return
            if not data:
                return
            yield data

    def _copy(self, src: socket.socket, dst: socket.socket) -> None:
        for data in self._chunks(src):
            try:
                dst.sendall(data)
            except OSError:
                break
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def _delayed(self, src: socket.socket, dst: socket.socket) -> None:
        queue: list[tuple[float, int, bytes | None]] = []
        cond = threading.Condition()
        n = 0

        def send() -> None:
            while True:
                with cond:
                    while not queue:
                        cond.wait()
                    due, _, data = queue[0]
                    wait = due - time.monotonic()
                    if wait > 0:
                        cond.wait(wait)
                        continue
                    heapq.heappop(queue)
                if data is None:
                    with contextlib.suppress(OSError):
                        dst.shutdown(socket.SHUT_WR)
                    return
                try:
                    dst.sendall(data)
                except OSError:
                    return

        threading.Thread(target=send, daemon=True).start()
        for data in itertools.chain(self._chunks(src), [None]):
            with cond:
                n += 1
                heapq.heappush(queue, (time.monotonic() + self.delay_s, n, data))
                cond.notify()
