"""Frame kinds: frozen, tagged, array-like msgspec Structs forming one union.

Evolution rules (docs/frame-format.md): frames are ``array_like``, so fields are only ever
appended at the end, each new field has a default, and no field changes type. A golden-bytes
test (tests/test_codec_golden.py) pins the encoding of every kind.
"""

from __future__ import annotations

from typing import Any

import msgspec


class Event(msgspec.Struct, frozen=True, kw_only=True, array_like=True, tag="ev"):
    """An application event: a name and any structurally encodable data."""

    name: str
    data: Any = None
    at: float = 0.0


# The union of every frame kind; eventlog.checkpoints adds its kinds through FRAME_TYPES.
Frame = Event
