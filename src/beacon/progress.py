"""The one progress display: a tqdm bar on a terminal, a plain log line otherwise.

A tqdm bar redraws itself with carriage returns; written to a file or a pipe (`beacon demo >
demo.log 2>&1`, a job scheduler's log) every redraw stays in the log, and one stage leaves a
single line of hundreds of kilobytes. So `Progress` asks whether stderr is a terminal: if it
is, it shows tqdm's bar (rate, ETA, postfix); if not, it logs one line
``name: n/total unit (rate/s, eta ...) key=value`` through `logging` at most every
`LOG_EVERY_S` seconds, and a last one when it closes. Every progress display of Beacon goes
through this module; no other module imports tqdm (a test checks).

`quiet_library_bars` does the same for the bars other libraries draw (transformers' weight
loading, Hugging Face downloads): off a terminal it turns them off through the environment
variables those libraries read; the command line calls it before anything imports them.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from time import monotonic
from types import TracebackType
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

LOG_EVERY_S = 5.0
"""Seconds between two progress lines off a terminal."""

T = TypeVar("T")

_LIBRARY_BAR_SWITCHES = (
    "TQDM_DISABLE",
    "HF_HUB_DISABLE_PROGRESS_BARS",
    "HF_DATASETS_DISABLE_PROGRESS_BARS",
)


def on_terminal() -> bool:
    """Whether stderr (where progress goes) is an interactive terminal."""
    return sys.stderr.isatty()


def quiet_library_bars() -> None:
    """Off a terminal, turn off the tqdm bars of third-party libraries (a setting the user made
    in the environment stands): `TQDM_DISABLE` for any tqdm, `HF_HUB_DISABLE_PROGRESS_BARS` for
    transformers and huggingface_hub, `HF_DATASETS_DISABLE_PROGRESS_BARS` for datasets."""
    if on_terminal():
        return
    for name in _LIBRARY_BAR_SWITCHES:
        os.environ.setdefault(name, "1")


class Progress:
    """Progress of one job of `total` units (None: unknown), from `initial`.

    `enabled=False` shows nothing (`--no-progress`). Not thread-safe: callers from several
    threads hold a lock around `update`, as they would for a tqdm bar.
    """

    def __init__(
        self,
        desc: str,
        total: int | None = None,
        unit: str = "it",
        initial: int = 0,
        enabled: bool = True,
    ) -> None:
        self.desc, self.total, self.unit = desc, total, unit
        self.n = self._start_n = initial
        self._postfix: dict[str, str] = {}
        self._bar: Any = None
        self._lines = enabled and not on_terminal()
        self._start = self._last_line = monotonic()
        if enabled and not self._lines:
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, dynamic_ncols=True)

    def update(self, n: int = 1) -> None:
        """Count `n` more units done."""
        self.n += n
        if self._bar is not None:
            self._bar.update(n)
        elif self._lines and monotonic() - self._last_line >= LOG_EVERY_S:
            self._log_line()

    def set_postfix(self, values: Mapping[str, Any]) -> None:
        """Values shown after the counts (loss, running accuracy), from the next redraw or
        line on."""
        self._postfix = {key: str(value) for key, value in values.items()}
        if self._bar is not None:
            self._bar.set_postfix(self._postfix, refresh=False)

    def close(self) -> None:
        """End the bar, or log the final line."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self._lines:
            self._log_line()
            self._lines = False

    def line(self) -> str:
        """``desc: n/total unit (rate unit/s, eta ...) key=value ...``, the off-terminal line."""
        elapsed = monotonic() - self._start
        rate = (self.n - self._start_n) / elapsed if elapsed > 0 else 0.0
        counts = f"{self.n}/{self.total}" if self.total is not None else str(self.n)
        timing = f"{rate:.2f} {self.unit}/s"
        if self.total is not None and self.n < self.total and rate > 0:
            timing += f", eta {_duration((self.total - self.n) / rate)}"
        else:
            timing += f", {_duration(elapsed)}"
        extra = "".join(f" {key}={value}" for key, value in self._postfix.items())
        return f"{self.desc}: {counts} {self.unit} ({timing}){extra}"

    def _log_line(self) -> None:
        self._last_line = monotonic()
        logger.info("%s", self.line())

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def track(
    items: Iterable[T],
    desc: str,
    total: int | None = None,
    unit: str = "it",
    enabled: bool = True,
) -> Iterator[T]:
    """`items`, counted one unit each on a `Progress` (tqdm's ``tqdm(iterable)``)."""
    with Progress(desc, total=total, unit=unit, enabled=enabled) as progress:
        for item in items:
            yield item
            progress.update()


def _duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``2 h 07 min``."""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
