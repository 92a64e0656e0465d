"""What ``--peer package.module:factory`` peers share (benchmarks.peers.user builds them;
benchmarks.peers.langgraph drives a LangGraph one): the store's description and closing it.
Its own module so that neither of those two imports the other at load time."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from benchmarks.peers.base import Durability

Kind = Literal["openarmature", "langgraph"]


@dataclass(frozen=True)
class UserStore:
    spec: str  # "package.module:factory"
    factory: Callable[[Path], Any]
    kind: Kind
    durability: Durability
    package: str
    methods: frozenset[str]  # which of OPTIONAL_METHODS the store has


async def aclose_store(store: Any) -> None:
    """Call the store's ``aclose()`` or ``close()`` if it has one (awaiting a coroutine)."""
    for name in ("aclose", "close"):
        fn = getattr(store, name, None)
        if callable(fn):
            result = fn()
            if inspect.isawaitable(result):
                await result
            return
