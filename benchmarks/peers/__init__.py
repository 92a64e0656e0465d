"""Benchmark peers: one adapter per checkpointer, each stating its durability.

:func:`all_peers` builds every peer whose package is installed, in the table's order, and names
those that are not (reported as n/a). Adapter modules import their framework at import time, so
a missing package shows up here, never in the middle of a run; nothing is imported until a peer
is built (``ckptlog bench list`` works with no peer package installed).

:func:`user_peer` wraps a user's own store (``--peer package.module:factory``);
:func:`peer_from_origin` rebuilds any peer from its :attr:`Peer.origin` (the ``instances`` scenario
runs each cell in a fresh process).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from benchmarks.peers.base import Peer

# (peer name, module, factory) in report order: ours first, the raw ceiling last.
_SPECS: tuple[tuple[str, str, Callable[[Any], Peer]], ...] = (
    ("ckptlog-process", "ckptlog", lambda m: m.CkptlogPeer("process")),
    ("ckptlog-fsync", "ckptlog", lambda m: m.CkptlogPeer("fsync")),
    ("oa-sqlite-pickle", "openarmature", lambda m: m.OaSqlitePeer("pickle")),
    ("oa-sqlite-json", "openarmature", lambda m: m.OaSqlitePeer("json")),
    ("oa-memory", "openarmature", lambda m: m.OaMemoryPeer()),
    ("lg-sqlite", "langgraph", lambda m: m.LgSqlitePeer()),
    ("lg-lmdb", "langgraph", lambda m: m.LgLmdbPeer()),
    ("techrevati-sqlite", "techrevati", lambda m: m.TechrevatiPeer()),
    ("lmdb-raw-process", "raw", lambda m: m.RawLmdbPeer("process")),
    ("lmdb-raw-fsync", "raw", lambda m: m.RawLmdbPeer("fsync")),
    ("sqlite-rows-process", "rows", lambda m: m.SqliteRowsPeer("process")),
    ("sqlite-rows-fsync", "rows", lambda m: m.SqliteRowsPeer("fsync")),
    ("lmdb-rows-process", "rows", lambda m: m.LmdbRowsPeer("process")),
    ("lmdb-rows-fsync", "rows", lambda m: m.LmdbRowsPeer("fsync")),
    ("jsonl-process", "rows", lambda m: m.JsonlPeer("process")),
    ("jsonl-fsync", "rows", lambda m: m.JsonlPeer("fsync")),
)
PEER_NAMES: tuple[str, ...] = tuple(name for name, _, _ in _SPECS)
FAMILIES: dict[str, str] = {
    "ckptlog": "ckptlog",
    "openarmature": "openarmature",
    "langgraph": "langgraph",
    "techrevati": "techrevati",
    "raw": "lmdb-raw",
    "rows": "rows",
}


def all_peers(names: tuple[str, ...] = PEER_NAMES) -> tuple[list[Peer], dict[str, str]]:
    """The peers named (that can be built) and, for the others, why not (not installed)."""
    peers: list[Peer] = []
    missing: dict[str, str] = {}
    for name, module, factory in _SPECS:
        if name not in names:
            continue
        try:
            mod = importlib.import_module(f"benchmarks.peers.{module}")
            peer = factory(mod)
        except ImportError as e:
            missing[name] = f"not installed ({e.name or e}): pip install -e '.[bench]'"
            continue
        peers.append(peer)
    return peers, missing


def select(tokens: list[str]) -> tuple[str, ...]:
    """Peer names from ``--backend`` tokens: peer names, or families (``openarmature`` ...)."""
    if not tokens:
        return PEER_NAMES
    chosen: list[str] = []
    for token in tokens:
        for part in filter(None, (p.strip() for p in token.split(","))):
            if part in PEER_NAMES:
                hits = [part]
            else:
                hits = [n for n, module, _ in _SPECS if module == part or n.startswith(part + "-")]
            if not hits:
                raise ValueError(
                    f"unknown backend {part!r}; expected a peer name ({', '.join(PEER_NAMES)}) "
                    f"or a family ({', '.join(FAMILIES)})"
                )
            chosen += [h for h in hits if h not in chosen]
    return tuple(n for n in PEER_NAMES if n in chosen)


def user_peer(spec: str) -> Peer:
    """The peer of ``--peer package.module:factory`` (ValueError when it cannot be used)."""
    from benchmarks.peers.user import user_peer as build  # noqa: PLC0415 - lazy

    return build(spec)


def peer_from_origin(key: str) -> Peer:
    """The peer whose :attr:`Peer.origin` is ``key``: a built-in name or a ``--peer`` spec."""
    if key in PEER_NAMES:
        peers, missing = all_peers((key,))
        if not peers:
            raise ValueError(f"peer {key!r} is not available: {missing.get(key)}")
        return peers[0]
    return user_peer(key)
