"""Values as a lazily expanded tree, for a face that shows big values a piece at a time.

Invariants:
- Every answer is bounded: containers list at most ``CONTAINER_ITEMS`` items per request and
  stop ``TREE_DEPTH`` levels down (``t: "more"``: ask for that path to expand it); strings are
  cut at ``STRING_CHARS``; integers are exact whatever their size (sent as text).
"""

from __future__ import annotations

import itertools
from typing import Any, Final

import msgspec

from eventlog.errors import InvalidArgument
from eventlog.forensics.export import json_safe
from eventlog.streams import plain

__all__ = [
    "CONTAINER_ITEMS",
    "STRING_CHARS",
    "TREE_DEPTH",
    "json_bytes",
    "package_version",
    "subvalue",
    "tree",
]

CONTAINER_ITEMS: Final = 100  # items of a dict or list the state tree sends per request
TREE_DEPTH: Final = 4  # levels of the state tree sent at once (deeper: fetched on click)
STRING_CHARS: Final = 4000  # characters of a string value sent

_json = msgspec.json.Encoder()


def json_bytes(obj: Any) -> bytes:
    """JSON of ``obj`` with every Struct as an object keyed by field name (the command line's
    ``--json`` and the viewer's answers); a mapping with keys JSON cannot hold gets them as
    their ``repr``."""
    value = plain(obj)
    try:
        return _json.encode(value)
    except (TypeError, ValueError):
        return _json.encode(json_safe(value))


def package_version() -> str:
    """ckptlog's installed version (``(not installed)`` in a checkout without metadata)."""
    import importlib.metadata  # noqa: PLC0415 - only when asked

    try:
        return importlib.metadata.version("ckptlog")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


def tree(value: Any, depth: int = TREE_DEPTH, offset: int = 0) -> dict[str, Any]:
    """``value`` as a typed node for the page's collapsible tree: containers list at most
    ``CONTAINER_ITEMS`` items from ``offset`` (``n`` is their size) and stop ``depth`` levels
    down (``t: "more"``: fetch that path to expand it); strings are cut at ``STRING_CHARS``."""
    if isinstance(value, msgspec.Struct):
        value = plain(value)
    if isinstance(value, dict):
        if depth <= 0:
            return {"t": "more", "kind": "dict", "n": len(value)}
        items = itertools.islice(value.items(), offset, offset + CONTAINER_ITEMS)
        return {
            "t": "dict",
            "n": len(value),
            "offset": offset,
            "items": [[k if isinstance(k, str) else repr(k), tree(v, depth - 1)] for k, v in items],
        }
    if isinstance(value, (list, tuple)):
        if depth <= 0:
            return {"t": "more", "kind": "list", "n": len(value)}
        part = value[offset : offset + CONTAINER_ITEMS]
        return {
            "t": "list",
            "n": len(value),
            "offset": offset,
            "items": [tree(v, depth - 1) for v in part],
        }
    if isinstance(value, str):
        return {"t": "str", "v": value[:STRING_CHARS], "n": len(value)}
    if isinstance(value, bytes):
        return {"t": "bytes", "v": value[: STRING_CHARS // 2].hex(), "n": len(value)}
    if isinstance(value, bool) or value is None:
        return {"t": "lit", "v": value}
    if isinstance(value, int):
        return {"t": "num", "v": str(value)}  # exact, whatever its size
    if isinstance(value, float):
        return {"t": "num", "v": repr(value)}
    return {"t": "str", "v": repr(value)[:STRING_CHARS], "n": len(repr(value))}


def subvalue(value: Any, path: list[Any]) -> Any:
    """The part of ``value`` at ``path`` (keys of dicts as the tree shows them, list indices)."""
    for key in path:
        if isinstance(value, msgspec.Struct):
            value = plain(value)
        if isinstance(value, dict):
            match = [v for k, v in value.items() if (k if isinstance(k, str) else repr(k)) == key]
            if not match:
                raise InvalidArgument(f"no key {key!r} at that path of the value; reload the tree")
            value = match[0]
        elif isinstance(value, (list, tuple)) and isinstance(key, int) and 0 <= key < len(value):
            value = value[key]
        else:
            raise InvalidArgument(
                f"path element {key!r} does not exist in the value; reload the tree"
            )
    return value
