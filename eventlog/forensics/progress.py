"""The one progress bar of the project (forensic calls, the CLI, the demo): rich's, drawn on a
terminal only, so pipes and logs get no control characters."""

from __future__ import annotations

import sys
import time
from typing import IO, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)

__all__ = ["ProgressBar", "isatty"]


class ProgressBar:
    """``progress(done, total)`` drawn by rich on a terminal (``stream``, stderr by default);
    on anything else (a pipe, a log file) it draws nothing at all. Redrawn at most every
    ``interval`` seconds, and always for the last step, so a caller may report every frame."""

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
        self.console = Console(
            file=stream if stream is not None else sys.stderr,
            highlight=False,
            markup=False,
            emoji=False,
            soft_wrap=True,
        )
        self.enabled = self.console.is_terminal and not self.console.is_dumb_terminal
        self.interval = interval
        self._last = 0.0
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if self._progress is not None and done < total and now - self._last < self.interval:
            return
        self._last = now
        if self._progress is None:
            self._progress = Progress(
                TextColumn(f"{self.label:<8}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(self.unit),
                TaskProgressColumn(),
                TimeRemainingColumn(),
                console=self.console,
                auto_refresh=False,
            )
            self._progress.start()
            self._task = self._progress.add_task(self.label, total=total)
        assert self._task is not None
        self._progress.update(self._task, completed=done, total=total, refresh=True)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False
