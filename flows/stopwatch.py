"""The one stopwatch: a night's seconds (and, read at each mark, its gauges) kept by name.

``lap(name)`` times a block; ``mark(name)`` adds the seconds since the previous mark to ``name``,
for steps written one after another in one function (the load's and the aggregation's stages).
May import the standard library only.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator


class Stopwatch:
    """A night's seconds, kept in its summary: each lap's under its name, and the total since start.

    ``lap(name)`` times a block; ``mark(name)`` adds the seconds since the previous mark (or the
    start, or ``restart``) under ``name``, for steps written one after another in one function.
    ``gauges`` (a dict to fill, a reading): read at each mark, under the mark's name (the
    load's peak memory and bytes written after each of its stages)."""

    def __init__(self, seconds: dict[str, float],
                 gauges: Iterable[tuple[dict[str, float], Callable[[], float]]] = ()):
        self.seconds, self.started, self.gauges = seconds, time.perf_counter(), list(gauges)
        self.marked = self.started

    @contextlib.contextmanager
    def lap(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        yield
        self.seconds[name] = time.perf_counter() - started

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = self.seconds.get(name, 0.0) + now - self.marked
        for into, read in self.gauges:
            into[name] = read()
        self.marked = now

    def restart(self) -> None:
        """The next mark counts from now (what ran since is another's: the aggregation's own laps)."""
        self.marked = time.perf_counter()

    def stop(self) -> None:
        self.seconds["total"] = time.perf_counter() - self.started
