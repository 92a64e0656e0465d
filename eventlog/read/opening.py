"""Opening a log to read it: read-only, with its chain key, never crashing on a truncated
data file (eventlog.forensics.open_readonly underneath).

Invariants:
- Nothing is written into the log's directory; a writer appending to it carries on.
- A chain key file that cannot be read raises :class:`~eventlog.errors.InvalidOption`, before
  the log is opened.
"""

from __future__ import annotations

import os
from typing import Any

from eventlog.errors import InvalidOption
from eventlog.forensics.opening import Opened, Prober, open_readonly

__all__ = ["Opened", "chain_key_options", "open_log"]


def chain_key_options(chain_key_file: str | os.PathLike[str] | None) -> dict[str, Any]:
    """``{"chain_key": ...}`` read from ``chain_key_file`` (``{}`` without one)."""
    if not chain_key_file:
        return {}
    try:
        with open(chain_key_file, "rb") as f:
            return {"chain_key": f.read()}
    except OSError as e:
        raise InvalidOption(f"cannot read --chain-key-file {str(chain_key_file)!r}: {e}") from e


def open_log(
    path: str | os.PathLike[str],
    *,
    chain_key_file: str | os.PathLike[str] | None = None,
    probe: Prober | bool | None = None,
    **options: Any,
) -> Opened:
    """The log at ``path`` opened read-only (``Opened.log``: a CheckpointLog; ``problems``:
    what was found wrong on the way, such as a truncated data file read from a copy)."""
    return open_readonly(path, probe=probe, **chain_key_options(chain_key_file), **options)
