"""A fan-out's instances decoded on access: what ``load`` puts in a big head's record.

:class:`LazyInstances` stands for the tuple of ``FanOutInstanceProgress`` a record's
``FanOutProgress.instances`` would hold, and behaves as that tuple: ``len``, indexing (negative
too), slicing (a tuple), iteration, ``in``, ``index``, ``count``, ``==`` / ``!=`` / ordering
with a tuple or another :class:`LazyInstances` (both directions), ``hash`` (the tuple's),
``+`` and ``*`` (tuples), ``repr`` (the tuple's) and pickling (it pickles as the tuple). Values
come from ``read(start, stop)``, a list of the instances ``start..stop-1``, fetched a chunk of
``chunk`` rows at a time; the last few chunks read by indexing are kept, iteration keeps none,
so memory stays within a few chunks whatever the length. msgspec encodes it through
``eventlog.codec.enc_hook`` (as the tuple); an encoder without that hook needs ``tuple(x)``.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, overload

from eventlog.records import FanOutInstanceProgress

KEEP_CHUNKS: Final = 4  # chunks kept for indexing (least recently read dropped first)


class LazyInstances(Sequence[FanOutInstanceProgress]):
    """The instances of one fan-out, decoded a chunk at a time on access (module docstring)."""

    __slots__ = ("_cache", "_chunk", "_kept", "_lock", "_n", "_read")

    def __init__(
        self, n: int, chunk: int, read: Callable[[int, int], list[FanOutInstanceProgress]]
    ) -> None:
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, got {chunk}")
        self._n = n
        self._chunk = chunk
        self._read = read
        self._cache: dict[int, list[FanOutInstanceProgress]] = {}
        self._lock = threading.Lock()  # the cache's order, for threads sharing the record
        self._kept: tuple[FanOutInstanceProgress, ...] | None = None

    def __len__(self) -> int:
        return self._n

    def _fetch(self, c: int) -> list[FanOutInstanceProgress]:
        start = c * self._chunk
        got = self._read(start, min(self._n, start + self._chunk))
        if len(got) != min(self._n, start + self._chunk) - start:
            raise AssertionError(f"chunk {c} read {len(got)} instances")  # a reader bug
        return got

    def _chunk_at(self, c: int) -> list[FanOutInstanceProgress]:
        cache = self._cache
        with self._lock:
            hit = cache.pop(c, None)
            if hit is not None:
                cache[c] = hit  # most recently used last
                return hit
        hit = self._fetch(c)  # outside the lock: a read may take a while
        with self._lock:
            while len(cache) >= KEEP_CHUNKS:
                del cache[next(iter(cache))]
            cache[c] = hit
        return hit

    @overload
    def __getitem__(self, i: int) -> FanOutInstanceProgress: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[FanOutInstanceProgress, ...]: ...

    def __getitem__(
        self, i: int | slice
    ) -> FanOutInstanceProgress | tuple[FanOutInstanceProgress, ...]:
        if isinstance(i, slice):
            r = range(self._n)[i]
            if r.step != 1 or not r:
                return tuple(self[j] for j in r)
            return tuple(self._run(r.start, r.stop))
        try:
            j = operator.index(i)
        except TypeError:
            raise TypeError(
                f"tuple indices must be integers or slices, not {type(i).__name__}"
            ) from None
        if j < 0:
            j += self._n
        if not 0 <= j < self._n:
            raise IndexError("tuple index out of range")
        c, k = divmod(j, self._chunk)
        return self._chunk_at(c)[k]

    def _run(self, start: int, stop: int) -> Iterator[FanOutInstanceProgress]:
        """Instances ``start..stop-1`` (ascending), chunk by chunk, caching nothing new."""
        ch = self._chunk
        for c in range(start // ch, (stop - 1) // ch + 1):
            got = self._cache.get(c)
            if got is None:
                got = self._fetch(c)
            lo = max(start - c * ch, 0)
            hi = min(stop - c * ch, len(got))
            yield from (got if lo == 0 and hi == len(got) else got[lo:hi])

    def __iter__(self) -> Iterator[FanOutInstanceProgress]:
        if self._kept is not None:
            yield from self._kept
        elif self._n:
            yield from self._run(0, self._n)

    def materialize(self, keep: bool = False) -> tuple[FanOutInstanceProgress, ...]:
        """The tuple this stands for (every instance decoded). ``keep``: hold on to it and
        return the same tuple from now on (what a save of the loaded record does, so saving
        it again finds the tuple it checked before)."""
        kept = self._kept
        if kept is not None:
            return kept
        out = tuple(self)
        if keep:
            self._kept = out
        return out

    # -- the tuple's protocol -------------------------------------------------------------------

    def _other(self, other: object) -> tuple[Any, ...] | None:
        if isinstance(other, LazyInstances):
            return other.materialize()
        if isinstance(other, tuple):
            return other
        return None

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True
        if not isinstance(other, (tuple, LazyInstances)):
            return NotImplemented
        if len(other) != self._n:
            return False
        ch = self._chunk
        for c in range(0, self._n, ch):
            mine = list(self._run(c, min(self._n, c + ch)))
            theirs = other[c : c + ch]
            if mine != list(theirs):
                return False
        return True

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __lt__(self, other: object) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self.materialize() < o

    def __le__(self, other: object) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self.materialize() <= o

    def __gt__(self, other: object) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self.materialize() > o

    def __ge__(self, other: object) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self.materialize() >= o

    def __hash__(self) -> int:
        return hash(self.materialize())

    def __add__(self, other: object) -> tuple[Any, ...]:
        o = self._other(other)
        return NotImplemented if o is None else self.materialize() + o

    def __radd__(self, other: object) -> tuple[Any, ...]:
        o = self._other(other)
        return NotImplemented if o is None else o + self.materialize()

    def __mul__(self, n: int) -> tuple[FanOutInstanceProgress, ...]:
        return self.materialize() * n

    __rmul__ = __mul__

    def __repr__(self) -> str:
        return repr(self.materialize())

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple, (self.materialize(),))
