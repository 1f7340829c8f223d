"""Nested `with` blocks, each holding a value (a memo) for as long as it is open.

`synth_demo.render_once` keeps the items it rendered for the length of a block: the innermost
open block's value is the one in use, a block opened inside another keeps its own and drops it
at its end, and blocks opened in different threads may close in any order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

T = TypeVar("T")


class NestedBlocks(Generic[T]):
    """The open blocks' values, newest last; `make()` gives each new block its value."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._open: list[T] = []
        self._lock = threading.Lock()

    @contextmanager
    def block(self) -> Iterator[T]:
        """A block whose value is the innermost until it ends (or a newer block opens)."""
        value = self._make()
        with self._lock:
            self._open.append(value)
        try:
            yield value
        finally:
            with self._lock:
                del self._open[next(i for i, v in enumerate(self._open) if v is value)]

    def innermost(self) -> T | None:
        """The newest open block's value; None outside every block."""
        with self._lock:
            return self._open[-1] if self._open else None
