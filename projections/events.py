"""What the JSON-in-Event folds (apflow, techrevati) share: reading their fields as plain data.

Invariants:
- Never raises on a malformed value: a JSON text that does not decode is shown as
  ``{"undecodable": ..., "bytes": n}``; a missing field reads as ``None``.
"""

from __future__ import annotations

import json
from typing import Any


def json_value(data: Any) -> Any:
    """A JSON text stored as bytes, decoded (anything else as it is)."""
    if isinstance(data, (bytes, bytearray)):
        try:
            return json.loads(bytes(data).decode("utf-8", "surrogatepass"))
        except (ValueError, UnicodeDecodeError) as e:
            return {"undecodable": f"{type(e).__name__}: {e}", "bytes": len(data)}
    return data


def field_of(data: Any, name: str) -> Any:
    return data.get(name) if isinstance(data, dict) else None
