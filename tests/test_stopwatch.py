"""The one stopwatch of a night's stages (flows/stopwatch.py): laps, marks that add up, gauges read at each mark."""

from __future__ import annotations

import itertools

from flows import stopwatch
from flows.stopwatch import Stopwatch


def test_marks_add_the_seconds_since_the_last_mark_and_read_the_gauges(monkeypatch):
    ticks = itertools.count(0.0, 1.5)  # each reading of the clock 1.5 s after the last
    monkeypatch.setattr(stopwatch.time, "perf_counter", lambda: next(ticks))
    seconds, peaks, reads = {}, {}, iter([100.0, 120.0, 90.0])
    clock = Stopwatch(seconds, gauges=[(peaks, lambda: next(reads))])  # started at 0.0, marked from 0.0
    clock.mark("load")        # 1.5
    clock.mark("write")       # 3.0
    clock.restart()           # 4.5: what ran since is another's
    clock.mark("write")       # 6.0: the second write adds 1.5
    with clock.lap("site"):   # 7.5 .. 9.0
        pass
    clock.stop()              # 10.5
    assert seconds == {"load": 1.5, "write": 3.0, "site": 1.5, "total": 10.5}
    assert peaks == {"load": 100.0, "write": 90.0}
