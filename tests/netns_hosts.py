"""Worker "hosts" for the multi-host PostgreSQL test: network namespaces joined to this one by
veth links (as root with iproute2), or loopback processes otherwise; and a TCP forwarder to
the server. Not a test module.

PostgreSQL listens on 127.0.0.1 only and is not reconfigured: each host reaches it through a
:class:`Forwarder` listening on that host's link address (``10.77.K.1``, the namespace side
being ``10.77.K.2``), or on a loopback port in the fallback mode. The forwarder plays the
server's side of the network: its sockets toward the workers use short TCP keepalives and a
user timeout, as a server with ``tcp_keepalives_*`` set would, so a connection whose worker
vanished behind a cut link is closed, and the server then ends its session (rolling back an
open transaction, releasing the writers' lock). Without that (a server with the kernel's
default keepalive, two hours), a session whose worker vanished mid-transaction keeps the
writers' lock and every other writer of the log waits: ``idle_in_transaction_session_timeout``
does not end it, since in pipeline mode the session waits for the rest of the pipeline
(state ``active``, wait event ``ClientRead``), not idle.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

KEEPALIVE_IDLE_S = 1
KEEPALIVE_INTERVAL_S = 1
KEEPALIVE_COUNT = 2
USER_TIMEOUT_MS = 3000
TCP_USER_TIMEOUT = getattr(socket, "TCP_USER_TIMEOUT", 18)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=20)


@dataclass
class _Pair:
    tag: int
    client: socket.socket
    server: socket.socket
    closed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    may_answer: threading.Event = field(default_factory=threading.Event)
    writing: bool = False  # in a write transaction (seen from the client's side)
    # The link was cut after the client's data up to here: nothing later reaches the server
    # (a chunk read after the one cut at must not: TCP never delivers a later part of the
    # stream without an earlier one, and the server would take it as the rest of the stream).
    severed: bool = False

    def close(self, *, reset: bool = False) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        for s in (self.client, self.server):
            with contextlib.suppress(OSError):
                if reset:  # RST, not FIN: the peer's next read fails at once
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    # Wakes a pump blocked reading it (close alone would not, and the socket
                    # would live on, silent, until that read returned); sends nothing.
                    s.shutdown(socket.SHUT_RD)
                else:
                    s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()


class Forwarder:
    """Relays TCP connections accepted on each host's address to ``target`` (threads).

    ``server_ports`` maps the local port of each connection to the server (the
    ``client_port`` of its session in ``pg_stat_activity``) to its host: how the test finds
    its own workers' sessions, and whose session holds a lock.
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.server_ports: dict[int, int] = {}  # local port toward the server -> host
        self._listeners: list[socket.socket] = []
        self._pairs: list[_Pair] = []
        self._refusing: set[int] = set()
        self._armed: dict[int, tuple[bool, Callable[[], None]]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def listen(self, tag: int, host: str) -> int:
        """Accept connections of host ``tag`` on ``host``; returns the port."""
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((host, 0))
        ls.listen(64)
        ls.settimeout(0.2)
        self._listeners.append(ls)
        th = threading.Thread(target=self._accept, args=(tag, ls), daemon=True)
        th.start()
        self._threads.append(th)
        port: int = ls.getsockname()[1]
        return port

    def _accept(self, tag: int, ls: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                client, _ = ls.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if tag in self._refusing:
                _Pair(tag, client, client).close(reset=True)
                continue
            client.settimeout(None)
            client.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE_S)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_INTERVAL_S)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPALIVE_COUNT)
            client.setsockopt(socket.IPPROTO_TCP, TCP_USER_TIMEOUT, USER_TIMEOUT_MS)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                _Pair(tag, client, client).close(reset=True)
                continue
            server.settimeout(None)
            server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pair = _Pair(tag, client, server)
            pair.may_answer.set()
            with self._lock:
                self.server_ports[server.getsockname()[1]] = tag
                self._pairs = [p for p in self._pairs if not p.closed]
                self._pairs.append(pair)
            for a, b in ((client, server), (server, client)):
                th = threading.Thread(target=self._pump, args=(pair, a, b), daemon=True)
                th.start()

    def arm(self, tag: int, deliver: bool, fire: Callable[[], None]) -> None:
        """At host ``tag``'s next COMMIT of a write transaction, call ``fire`` (which cuts
        the link) with the server's answer held back, so the worker never hears it: with
        ``deliver`` the COMMIT reaches the server first (it commits); without, it is lost
        on the way (the session, holding the writers' lock, waits for more until the dead
        connection is noticed: then the server rolls back). Either way the worker's COMMIT
        is cut off."""
        with self._lock:
            self._armed[tag] = (deliver, fire)

    def disarm(self, tag: int) -> None:
        with self._lock:
            self._armed.pop(tag, None)

    def _fire(self, pair: _Pair, data: bytes) -> None:
        """``data`` holds a write transaction's COMMIT, and host ``pair.tag`` is armed."""
        with self._lock:
            plan = self._armed.pop(pair.tag, None)
        if plan is None:
            pair.server.sendall(data)
            return
        deliver, fire = plan
        pair.may_answer.clear()
        if deliver:
            pair.server.sendall(data)
        pair.severed = True
        fire()  # without deliver the COMMIT is lost: the server's session waits on, in the
        pair.may_answer.set()  # transaction, until the dead connection is noticed

    def _pump(self, pair: _Pair, src: socket.socket, dst: socket.socket) -> None:
        to_server = dst is pair.server
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                if to_server and pair.severed:
                    continue
                if to_server and b"pg_advisory_xact_lock" in data:
                    pair.writing = True  # a write transaction begins: the writers' lock
                if to_server and pair.writing and b"COMMIT\x00" in data:
                    pair.writing = False
                    if pair.tag in self._armed:
                        self._fire(pair, data)
                        continue

                if not to_server:
                    pair.may_answer.wait()
                dst.sendall(data)
        except OSError:
            pass
        pair.close()

    def cut(self, tag: int) -> None:
        """The loopback mode's link cut: host ``tag``'s connections are reset and new ones
        refused until :meth:`restore`."""
        with self._lock:
            self._refusing.add(tag)
            pairs = [p for p in self._pairs if p.tag == tag]
        for p in pairs:
            p.close(reset=True)

    def restore(self, tag: int) -> None:
        with self._lock:
            self._refusing.discard(tag)

    def close(self) -> None:
        self._stop.set()
        for ls in self._listeners:
            with contextlib.suppress(OSError):
                ls.close()
        with self._lock:
            pairs = list(self._pairs)
        for p in pairs:
            p.close()
        for th in self._threads:
            th.join(2.0)


@dataclass
class Host:
    index: int
    address: str  # where its worker reaches the forwarder
    port: int
    netns: str | None = None  # None: a loopback process
    veth: str | None = None  # the link's end in this (the server's) namespace

    def command(self, argv: Sequence[str]) -> list[str]:
        if self.netns is None:
            return list(argv)
        return ["ip", "netns", "exec", self.netns, *argv]


class Hosts:
    """``n`` hosts: namespaces with veth links when they can be made, else loopback."""

    def __init__(self, n: int, forwarder: Forwarder, *, loopback: bool = False) -> None:
        self.forwarder = forwarder
        self.hosts: list[Host] = []
        self._namespaces: list[str] = []
        self._links: list[str] = []
        self.why_loopback = ""
        tag = f"{os.getpid() % 0xFFFFF:05x}"
        try:
            octet2 = self._free_octet(n, loopback)
            for k in range(n):
                self.hosts.append(self._make_netns(tag, k, octet2))
            # A process can run there (entering a namespace can fail where creating one did not).
            _ip("netns", "exec", self._namespaces[0], sys.executable, "-c", "pass")
            self.mode = "netns"
        except (OSError, subprocess.SubprocessError, RuntimeError) as e:
            self.why_loopback = f"{type(e).__name__}: {' '.join(str(e).split())}"
            self._remove_netns()
            self.hosts = [Host(k, "127.0.0.1", forwarder.listen(k, "127.0.0.1")) for k in range(n)]
            self.mode = "loopback"

    @staticmethod
    def _free_octet(n: int, loopback: bool) -> int:
        if loopback:
            raise RuntimeError("loopback hosts asked for (CKPTLOG_HOSTS_MODE=loopback)")
        if os.geteuid() != 0 or shutil.which("ip") is None:
            raise RuntimeError("network namespaces need root and iproute2")
        used = subprocess.run(
            ["ip", "-4", "-o", "addr"], check=True, capture_output=True, text=True, timeout=20
        ).stdout
        for octet2 in range(77, 100):
            if not any(f" 10.{octet2}.{k}." in used for k in range(n)):
                return octet2
        raise RuntimeError("no free 10.x.K.0/30 range for the links")

    def _make_netns(self, tag: str, k: int, octet2: int) -> Host:
        ns, here, there = f"ckh{tag}n{k}", f"ckh{tag}h{k}", f"ckh{tag}w{k}"
        _ip("netns", "add", ns)
        self._namespaces.append(ns)
        _ip("link", "add", here, "type", "veth", "peer", "name", there)
        self._links.append(here)
        _ip("link", "set", there, "netns", ns)
        _ip("addr", "add", f"10.{octet2}.{k}.1/30", "dev", here)
        _ip("link", "set", here, "up")
        _ip("-n", ns, "addr", "add", f"10.{octet2}.{k}.2/30", "dev", there)
        _ip("-n", ns, "link", "set", there, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        address = f"10.{octet2}.{k}.1"
        return Host(k, address, self.forwarder.listen(k, address), ns, here)

    def cut(self, k: int) -> None:
        host = self.hosts[k]
        if host.veth is not None:
            _ip("link", "set", host.veth, "down")
        else:
            self.forwarder.cut(k)

    def restore(self, k: int) -> None:
        host = self.hosts[k]
        if host.veth is not None:
            _ip("link", "set", host.veth, "up")
        else:
            self.forwarder.restore(k)

    def _remove_netns(self) -> None:
        for ns in self._namespaces:  # deleting a namespace deletes its end of the link
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                _ip("netns", "del", ns)
        for link in self._links:  # gone with its peer, unless the move into the namespace failed
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                _ip("link", "del", link)
        self._namespaces.clear()
        self._links.clear()

    def close(self) -> None:
        self._remove_netns()

    def leftovers(self) -> list[str]:
        """Namespaces or links of these hosts still present (after :meth:`close`: none)."""
        if self.mode != "netns":
            return []
        names = ""
        for args in (["-o", "link"], ["netns", "list"]):
            names += subprocess.run(
                ["ip", *args], check=True, capture_output=True, text=True, timeout=20
            ).stdout
        return [h for host in self.hosts for h in (host.netns, host.veth) if h and h in names]
