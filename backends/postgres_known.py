"""What a PostgreSQL writer process knows of the rows its own write transactions wrote and read
(``backends.postgres._Known``), kept apart from :mod:`backends.postgres` for its size."""

from __future__ import annotations

from collections import OrderedDict

# What a process keeps of the rows its write transactions wrote and read (_Known): rows, and
# the largest value kept (a bigger one is read again when needed).
KNOWN_ROWS_MAX = 65_536
KNOWN_VALUE_BYTES_MAX = 1 << 20
KNOWN_BYTES_MAX = 64 << 20  # the values kept, in all


class Known:
    """What this process's own write transactions wrote and read, as they committed: a
    guess at what the server holds, never trusted. A transaction that runs on it
    (``backends.postgres._PgWrite.assuming``) answers a read from it and queues an assertion
    that the server holds exactly that (:class:`backends.postgres_batch.Batch`), checked after
    the writers' lock in the same round trip as the writes and the COMMIT: one that fails
    aborts the transaction, which runs again reading for real
    (``backends.postgres._StaleAssumption``)."""

    __slots__ = ("appended", "last", "opaque", "rows", "size")

    def __init__(self) -> None:
        # (table, key) -> value (None: absent), least recently used first
        self.rows: OrderedDict[tuple[str, bytes], bytes | None] = OrderedDict()
        self.size = 0  # bytes of the values in rows
        # rows that exist with a value too big to keep: read, never assumed (absent or not)
        self.opaque: OrderedDict[tuple[str, bytes], None] = OrderedDict()
        # table -> (its greatest key, that row's value when known); None: the table is empty
        self.last: dict[str, tuple[bytes, bytes | None] | None] = {}
        self.appended: set[str] = set()  # tables rows were appended to: their rows not kept

    def clear(self) -> None:
        self.rows.clear()
        self.opaque.clear()
        self.size = 0
        self.last.clear()

    def get(self, table: str, key: bytes) -> tuple[bool, bytes | None]:
        """``(known, value)``."""
        k = (table, key)
        try:
            value = self.rows[k]
        except KeyError:
            return False, None
        self.rows.move_to_end(k)
        return True, value

    def merge(self, rows: dict[tuple[str, bytes], bytes | None], dropped: list[str]) -> None:
        appended = self.appended
        known = self.rows
        for t in dropped:
            for k in [k for k in known if k[0] == t]:
                self._drop(k)
            for k in [k for k in self.opaque if k[0] == t]:
                del self.opaque[k]
        opaque = self.opaque
        size = self.size
        for k, v in rows.items():
            if k[0] in appended:
                continue
            old = known.pop(k, None)  # as _drop, inline: once per row of every commit
            if old is not None:
                size -= len(old)
            if v is not None:
                if len(v) > KNOWN_VALUE_BYTES_MAX:
                    opaque[k] = None
                    continue
                size += len(v)
            if opaque:
                opaque.pop(k, None)
            known[k] = v
        self.size = size
        while len(known) > KNOWN_ROWS_MAX or self.size > KNOWN_BYTES_MAX:
            _, v = known.popitem(last=False)
            if v is not None:
                self.size -= len(v)
        while len(self.opaque) > KNOWN_ROWS_MAX:
            self.opaque.popitem(last=False)

    def _drop(self, k: tuple[str, bytes]) -> None:
        v = self.rows.pop(k, None)
        if v is not None:
            self.size -= len(v)
