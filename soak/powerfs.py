"""A power-loss simulator: a FUSE file system that forgets what was never synced (issue 28).

``python -m soak.powerfs MOUNTPOINT SOCKET`` serves, in memory, a file system on which every
write stays volatile until its file is fsynced (``fsync``/``fdatasync``, or a write through an
``O_SYNC``/``O_DSYNC`` descriptor), and every name (create, mkdir, link, rename, unlink, rmdir)
stays volatile until its directory is fsynced. On a ``cut`` command (on the control socket) it
drops every volatile change, as a power cut does, and keeps optionally (``torn``) a random
subset of each file's unsynced writes, in any combination (a disk may persist a later write and
not an earlier one) and one of them torn at a 512-byte sector boundary, as LazyFS does for
Jepsen. Two name models:

- ``posix`` (the default): a name is durable only after an fsync of its directory (fsync(2));
- ``ordered``: any fsync or directory fsync commits every name of the file system (what ext4
  and XFS journals usually do).

The simulator is for durability, never for speed: every operation is a round trip to this
Python process. :class:`PowerFS` mounts it (root and ``/dev/fuse`` needed; it raises, never
skips, without them) and sends it commands. Every operation, and each command, runs under one
lock, so a cut never lands inside an operation; the kernel waits for an operation already sent
to the daemon before it lets a SIGKILLed process die, so after ``waitpid`` every write of a
killed writer is either here or was never made.
"""

from __future__ import annotations

import errno
import json
import os
import random
import socket
import socketserver
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

SECTOR = 512
_SYNC_FLAGS = os.O_SYNC | os.O_DSYNC


class Node:
    """A file or directory. A file's ``synced`` bytes are what a power cut leaves; ``pending``
    lists the operations since (``("w", offset, bytes, durable)`` or ``("t", size, durable)``)."""

    __slots__ = ("data", "durable", "entries", "ino", "is_dir", "mode", "mtime", "nlink", "pending")

    def __init__(self, ino: int, is_dir: bool, mode: int) -> None:
        self.ino = ino
        self.is_dir = is_dir
        self.mode = mode
        self.mtime = time.time()
        self.nlink = 0
        self.data = bytearray()
        self.durable: Any = {} if is_dir else bytearray()  # entries, or the synced bytes
        self.entries: dict[str, Node] = {}
        self.pending: list[tuple[Any, ...]] = []


def _apply(buf: bytearray, op: tuple[Any, ...]) -> None:
    if op[0] == "w":
        off, data = op[1], op[2]
        end = off + len(data)
        if len(buf) < off:
            buf.extend(bytes(off - len(buf)))
        buf[off:end] = data
    else:
        size = op[1]
        if size < len(buf):
            del buf[size:]
        else:
            buf.extend(bytes(size - len(buf)))


class PowerLossFS:
    """The file system's state and operations (fusepy ``Operations`` protocol)."""

    use_ns = True
    flag_nullpath_ok = True

    def __init__(self, names: str = "posix") -> None:
        self.mutex = threading.Lock()  # (not "lock": fusepy would take it for the lock op)
        self.names = names
        self._ino = 1
        self.root = Node(1, True, stat.S_IFDIR | 0o755)
        self.root.nlink = 2
        self.handles: dict[int, tuple[Node, int]] = {}
        self._fh = 0
        self.stats: dict[str, int] = {"cuts": 0, "fsyncs": 0, "dir_fsyncs": 0}

    # -- fusepy dispatch: one operation at a time, commands included ----------------------
    def __call__(self, op: str, *args: Any) -> Any:
        fn = getattr(self, op, None)
        if fn is None:
            raise _err(errno.ENOSYS)
        with self.mutex:
            return fn(*args)

    # -- helpers ------------------------------------------------------------------------
    def _new(self, is_dir: bool, mode: int) -> Node:
        self._ino += 1
        return Node(self._ino, is_dir, mode)

    def _resolve(self, path: str) -> Node:
        node = self.root
        for part in path.strip("/").split("/"):
            if not part:
                continue
            if not node.is_dir:
                raise _err(errno.ENOTDIR)
            child = node.entries.get(part)
            if child is None:
                raise _err(errno.ENOENT)
            node = child
        return node

    def _parent(self, path: str) -> tuple[Node, str]:
        head, _, name = path.rstrip("/").rpartition("/")
        parent = self._resolve(head or "/")
        if not parent.is_dir:
            raise _err(errno.ENOTDIR)
        return parent, name

    def _node(self, path: str | None, fh: int | None) -> Node:
        if fh is not None and fh in self.handles:
            return self.handles[fh][0]
        if path is None:
            raise _err(errno.EBADF)
        return self._resolve(path)

    def _handle(self, node: Node, flags: int) -> int:
        self._fh += 1
        self.handles[self._fh] = (node, flags)
        return self._fh

    def _sync_file(self, node: Node) -> None:
        for op in node.pending:
            _apply(node.durable, op)
        node.pending.clear()

    def _commit_names(self, node: Node) -> None:
        node.durable = dict(node.entries)
        for child in node.entries.values():
            if child.is_dir:
                self._commit_names(child)

    # -- operations ---------------------------------------------------------------------
    def getattr(self, path: str | None, fh: int | None = None) -> dict[str, Any]:
        node = self._node(path, fh)
        ns = int(node.mtime * 1e9)
        size = 4096 if node.is_dir else len(node.data)
        return {
            "st_mode": node.mode,
            "st_ino": node.ino,
            "st_nlink": node.nlink,
            "st_size": size,
            "st_blocks": (size + 511) // 512,
            "st_uid": 0,
            "st_gid": 0,
            "st_atime": ns,
            "st_mtime": ns,
            "st_ctime": ns,
        }

    def access(self, path: str, amode: int) -> int:
        self._resolve(path)
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        return {
            "f_bsize": 4096,
            "f_frsize": 4096,
            "f_blocks": 1 << 24,
            "f_bfree": 1 << 23,
            "f_bavail": 1 << 23,
            "f_files": 1 << 20,
            "f_ffree": 1 << 19,
            "f_favail": 1 << 19,
            "f_namemax": 255,
        }

    def readdir(self, path: str, fh: int | None) -> list[str]:
        return [".", "..", *self._resolve(path).entries]

    def opendir(self, path: str) -> int:
        self._resolve(path)
        return 0

    def releasedir(self, path: str | None, fh: int) -> int:
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        parent, name = self._parent(path)
        if name in parent.entries:
            raise _err(errno.EEXIST)
        node = self._new(True, stat.S_IFDIR | (mode & 0o7777))
        node.nlink = 2
        parent.entries[name] = node
        return 0

    def rmdir(self, path: str) -> int:
        parent, name = self._parent(path)
        node = parent.entries.get(name)
        if node is None:
            raise _err(errno.ENOENT)
        if not node.is_dir:
            raise _err(errno.ENOTDIR)
        if node.entries:
            raise _err(errno.ENOTEMPTY)
        del parent.entries[name]
        node.nlink = 0
        return 0

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        parent, name = self._parent(path)
        node = parent.entries.get(name)
        if node is None:
            node = self._new(False, stat.S_IFREG | (mode & 0o7777))
            node.nlink = 1
            parent.entries[name] = node
        return self._handle(node, os.O_RDWR)

    def open(self, path: str, flags: int) -> int:
        node = self._resolve(path)
        if node.is_dir:
            raise _err(errno.EISDIR)
        return self._handle(node, flags)

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        return bytes(self._node(path, fh).data[offset : offset + size])

    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        node, flags = self.handles[fh] if fh in self.handles else (self._node(path, None), 0)
        op = ("w", offset, bytes(data), bool(flags & _SYNC_FLAGS))
        _apply(node.data, op)
        node.pending.append(op)
        node.mtime = time.time()
        return len(data)

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        node = self._node(path, fh)
        op = ("t", length, False)
        _apply(node.data, op)
        node.pending.append(op)
        return 0

    def fsync(self, path: str | None, datasync: int, fh: int | None) -> int:
        self.stats["fsyncs"] += 1
        self._sync_file(self._node(path, fh))
        if self.names == "ordered":
            self._commit_names(self.root)
        return 0

    def fsyncdir(self, path: str | None, datasync: int, fh: int | None) -> int:
        self.stats["dir_fsyncs"] += 1
        if self.names == "ordered":
            self._commit_names(self.root)
        else:
            node = self._resolve(path or "/")
            node.durable = dict(node.entries)
        return 0

    def flush(self, path: str | None, fh: int) -> int:
        return 0

    def release(self, path: str | None, fh: int) -> int:
        self.handles.pop(fh, None)
        return 0

    def unlink(self, path: str) -> int:
        parent, name = self._parent(path)
        node = parent.entries.get(name)
        if node is None:
            raise _err(errno.ENOENT)
        if node.is_dir:
            raise _err(errno.EISDIR)
        del parent.entries[name]
        node.nlink -= 1
        return 0

    def link(self, target: str, source: str) -> int:
        node = self._resolve(source)
        if node.is_dir:
            raise _err(errno.EPERM)
        parent, name = self._parent(target)
        if name in parent.entries:
            raise _err(errno.EEXIST)
        parent.entries[name] = node
        node.nlink += 1
        return 0

    def rename(self, old: str, new: str) -> int:
        op, oname = self._parent(old)
        node = op.entries.get(oname)
        if node is None:
            raise _err(errno.ENOENT)
        np, nname = self._parent(new)
        victim = np.entries.get(nname)
        if victim is node:
            return 0
        if victim is not None:
            if victim.is_dir and (not node.is_dir or victim.entries):
                raise _err(errno.ENOTEMPTY if victim.is_dir else errno.EISDIR)
            if not victim.is_dir and node.is_dir:
                raise _err(errno.ENOTDIR)
            victim.nlink = 0 if victim.is_dir else victim.nlink - 1
        del op.entries[oname]
        np.entries[nname] = node
        return 0

    def chmod(self, path: str, mode: int) -> int:
        node = self._resolve(path)
        node.mode = (node.mode & ~0o7777) | (mode & 0o7777)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        return 0

    def utimens(self, path: str, times: Any = None) -> int:
        return 0

    # -- the power cut ------------------------------------------------------------------
    def cut(self, seed: int, torn: bool) -> dict[str, int]:
        """Forget every unsynced write and name (keeping, when ``torn``, a random subset of
        the writes, one torn); return what was dropped."""
        rng = random.Random(seed)
        out = {"files": 0, "ops_dropped": 0, "ops_kept": 0, "torn": 0, "names_undone": 0}
        files: dict[int, Node] = {}

        def restore(d: Node) -> None:
            names_before = {(k, id(v)) for k, v in d.entries.items()}
            d.entries = dict(d.durable)
            out["names_undone"] += len(names_before ^ {(k, id(v)) for k, v in d.entries.items()})
            for child in d.entries.values():
                if child.is_dir:
                    restore(child)
                else:
                    files[id(child)] = child

        restore(self.root)
        for node in files.values():
            out["files"] += 1
            data = bytearray(node.durable)
            writes = [i for i, op in enumerate(node.pending) if op[0] == "w" and not op[-1]]
            tear = rng.choice(writes) if torn and writes else -1
            for i, op in enumerate(node.pending):
                if op[-1] or (torn and rng.random() < 0.5):
                    kept = op
                    if i == tear and len(op[2]) > SECTOR:
                        keep = rng.randrange(1, (len(op[2]) + SECTOR - 1) // SECTOR) * SECTOR
                        kept = ("w", op[1], op[2][:keep], False)
                        out["torn"] += 1
                    _apply(data, kept)
                    out["ops_kept"] += 1
                else:
                    out["ops_dropped"] += 1
            node.data = data
            node.durable = bytearray(data)
            node.pending = []
        # Link counts from the names that survived; every open descriptor died with the power.
        counts: dict[int, int] = {}

        def count(d: Node) -> None:
            for child in d.entries.values():
                counts[id(child)] = counts.get(id(child), 0) + 1
                if child.is_dir:
                    count(child)

        count(self.root)
        for node in files.values():
            node.nlink = counts.get(id(node), 0)
        self.handles.clear()
        self.stats["cuts"] += 1
        return out

    def command(self, line: str) -> dict[str, Any]:
        cmd = json.loads(line)
        with self.mutex:
            if cmd["op"] == "cut":
                return self.cut(int(cmd["seed"]), bool(cmd["torn"]))
            if cmd["op"] == "names":
                if cmd["model"] not in ("posix", "ordered"):
                    raise ValueError(f"unknown name model {cmd['model']!r}")
                self.names = cmd["model"]
                return {"names": self.names}
            if cmd["op"] == "stats":
                return dict(self.stats)
        raise ValueError(f"unknown command {cmd!r}")


def _err(code: int) -> OSError:
    from fuse import FuseOSError  # noqa: PLC0415 - only the daemon imports fusepy

    err: OSError = FuseOSError(code)
    return err


def serve(mountpoint: str, sock_path: str, names: str) -> None:
    """The daemon: mount ``mountpoint`` (foreground) and answer commands on ``sock_path``."""
    from fuse import FUSE  # noqa: PLC0415

    fs = PowerLossFS(names)

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            for raw in self.rfile:
                try:
                    reply: dict[str, Any] = {"ok": True, **fs.command(raw.decode())}
                except Exception as e:  # noqa: BLE001 - reported to the client, never swallowed
                    reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
                self.wfile.write(json.dumps(reply).encode() + b"\n")
                self.wfile.flush()

    if os.path.exists(sock_path):
        os.unlink(sock_path)
    server = socketserver.ThreadingUnixStreamServer(sock_path, Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    FUSE(
        fs,
        mountpoint,
        foreground=True,
        nothreads=True,
        use_ino=True,
        hard_remove=True,
        no_remote_lock=True,  # fcntl and flock locks kept by the kernel, as on a local disk
        big_writes=True,
        max_write=131072,
        attr_timeout=0,
        entry_timeout=0,
        negative_timeout=0,
        fsname="ckptlog-powerfs",
    )
    server.shutdown()


class PowerFS:
    """``with PowerFS(mountpoint) as fs:`` mounts the simulator; ``fs.cut(seed, torn)``.

    Needs root and ``/dev/fuse`` (and libfuse 2: Debian's ``fuse`` package, which CI
    installs); raises :class:`RuntimeError` saying what is missing otherwise.
    """

    def __init__(self, mountpoint: str | os.PathLike[str], names: str = "posix") -> None:
        self.mountpoint = Path(mountpoint)
        self.names = names
        self.sock_path = str(self.mountpoint) + ".ctl"
        self.proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._reader: Any = None
        self.log_path = Path(str(self.mountpoint) + ".log")

    def __enter__(self) -> PowerFS:
        if not os.path.exists("/dev/fuse"):
            raise RuntimeError("the power-loss simulator needs /dev/fuse (the FUSE kernel module)")
        if os.geteuid() != 0:
            raise RuntimeError("the power-loss simulator mounts a FUSE file system: run as root")
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self.log_path = Path(str(self.mountpoint) + ".log")  # never a pipe: it could fill up
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-W", "ignore::DeprecationWarning", "-m", "soak.powerfs",
                 str(self.mountpoint), self.sock_path, self.names],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while not os.path.ismount(self.mountpoint) or not os.path.exists(self.sock_path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError(
                    "the power-loss simulator did not mount "
                    f"{str(self.mountpoint)!r}: {self.daemon_output()[-2000:]}"
                )
            time.sleep(0.05)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(self.sock_path)
        self._reader = self._sock.makefile("rb")
        return self

    def _send(self, **cmd: Any) -> dict[str, Any]:
        assert self._sock is not None, "PowerFS used outside its with block"
        self._sock.sendall(json.dumps(cmd).encode() + b"\n")
        reply: dict[str, Any] = json.loads(self._reader.readline())
        if not reply.pop("ok"):
            raise RuntimeError(f"power-loss simulator: {reply['error']}")
        return reply

    def cut(self, seed: int, *, torn: bool) -> dict[str, int]:
        """Cut the power (every process writing here must be dead: kill and wait first)."""
        return self._send(op="cut", seed=seed, torn=torn)

    def set_names(self, model: str) -> None:
        self._send(op="names", model=model)

    def stats(self) -> dict[str, int]:
        return self._send(op="stats")

    def __exit__(self, *exc: object) -> None:
        if self._sock is not None:
            self._reader.close()
            self._sock.close()
            self._sock = None
        if self.proc is not None:
            subprocess.run(["umount", "-l", str(self.mountpoint)], capture_output=True, check=False)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def daemon_output(self) -> str:
        """What the daemon printed (fusepy reports an operation that raised here)."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "posix")
