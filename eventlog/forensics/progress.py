"""A progress bar for long forensic calls on a terminal."""

from __future__ import annotations

import sys
import time
from typing import IO, Any

# -- progress ----------------------------------------------------------------------------------


class ProgressBar:
    """A one-line bar redrawn in place on a terminal (``stream``, stderr by default);
    silent when the stream is not a TTY, so pipes and logs get no control characters."""

    def __init__(
        self,
        label: str,
        *,
        unit: str = "frames",
        stream: IO[str] | None = None,
        interval: float = 0.1,
    ) -> None:
        self.label = label
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = isatty(self.stream)
        self.interval = interval
        self._last = 0.0
        self._drawn = False
        self._started = time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if done < total and now - self._last < self.interval:
            return
        self._last = now
        width = 30
        filled = width * done // total if total else width
        rate = done / (now - self._started) if now > self._started else 0.0
        pct = 100 * done // total if total else 100
        self.stream.write(
            f"\r{self.label:<8} [{'#' * filled}{'.' * (width - filled)}] "
            f"{done:,}/{total:,} {self.unit} {pct:3d}%  {rate:,.0f}/s"
        )
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self.enabled and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False


def isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False
