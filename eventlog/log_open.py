"""Opening an EventLog's backend (eventlog.log), and the stream keys it accepts."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TypeGuard

from backends.base import Backend, Durability
from eventlog.errors import InvalidStreamKey
from eventlog.layout import META


def is_server_url(location: object) -> TypeGuard[str]:
    """Whether ``location`` names a log on a PostgreSQL server (``postgresql://`` or
    ``postgres://``), not an LMDB directory (told without importing psycopg)."""
    return isinstance(location, str) and location.split("://", 1)[0] in ("postgresql", "postgres")


def open_backend(
    location: str | os.PathLike[str],
    *,
    tables: Iterable[str],
    durability: Durability | str = "fsync",
    readonly: bool = False,
    map_size_max: int | None = None,
    map_size_initial: int | None = None,
) -> Backend:
    """The backend of a log at ``location``: a ``postgresql://host/db?schema=NAME`` URL
    (``backends.postgres``; the map sizes do not apply) or an LMDB directory."""
    if is_server_url(location):
        from backends.postgres import PostgresBackend  # noqa: PLC0415 - psycopg optional

        return PostgresBackend(
            location, tables=tables, durability=durability, readonly=readonly, marker_table=META
        )
    from backends.lmdb import (  # noqa: PLC0415 - keep lmdb optional
        MAP_SIZE_INITIAL,
        MAP_SIZE_MAX,
        LmdbBackend,
    )

    return LmdbBackend(
        location,
        tables=tables,
        durability=durability,
        readonly=readonly,
        map_size_initial=map_size_initial or MAP_SIZE_INITIAL,
        map_size_max=map_size_max or MAP_SIZE_MAX,
        marker_table=META,
    )


def stream_key_bytes(stream: str, max_key_bytes: int) -> bytes:
    """Validate a stream key and return its UTF-8 bytes."""
    if not isinstance(stream, str):
        raise InvalidStreamKey(f"stream key must be a str, got {type(stream).__name__}")
    if not stream:
        raise InvalidStreamKey("stream key must be a non-empty string, got ''")
    raw = stream.encode("utf-8", "surrogatepass")
    if len(raw) > max_key_bytes:
        raise InvalidStreamKey(
            f"stream key is {len(raw)} bytes of UTF-8, above the backend limit of "
            f"{max_key_bytes}; use a shorter id (a UUID or a hash of the long one)"
        )
    return raw
