"""What a figure may be: the values a figure of each kind can mean (``Bounds``), declared once
per metric name pattern (``FIGURE_BOUNDS``: docs/metrics.md, "What a figure may be"), and why a
value cannot be stored as a metric (``figure_problem``). A parser checks each value where it
knows what it means; the driver (``transforms.parse``) checks every metric once more.
"""

from __future__ import annotations

import fnmatch
import math
import sys
from dataclasses import dataclass
from functools import lru_cache

@dataclass(frozen=True, slots=True)
class Bounds:
    """The values a figure of one kind can mean: a finite number from ``low`` to ``high``
    (``high_text`` says it in words), whole when ``whole``. A value outside is no measurement
    of any compiler: a damaged or hostile dump."""

    high: float
    high_text: str
    low: float = 0
    whole: bool = True

    def problem(self, value: object) -> str | None:
        """Why ``value`` cannot be such a figure, as the end of a sentence naming it (None: it can)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"is {_shown(value)}, not a number"
        if isinstance(value, float) and not math.isfinite(value):
            return f"is {'NaN' if math.isnan(value) else value}, not a finite number"
        if value < self.low:
            return f"is {_number(value)}, " + ("negative" if self.low == 0 else f"below {self.low:g}")
        if value > self.high:
            return f"is {_number(value)}, above {self.high_text}"
        if self.whole and isinstance(value, float) and not value.is_integer():
            return f"is {value:g}, not a whole number"
        return None


def _number(value: int | float) -> str:
    if isinstance(value, int) and value.bit_length() > 14_000:  # str() refuses past 4,300 digits
        return f"a whole number of {value.bit_length():,} bits"
    return f"{value:.6g}" if isinstance(value, float) else f"{value:,}"


def _shown(value: object) -> str:
    if isinstance(value, str):
        return f"the text {value[:40]!r}"
    return "null" if value is None else f"a {type(value).__name__}"


WEEK = 7 * 24 * 3600
SECONDS = Bounds(WEEK, f"a week ({WEEK:,} s)", whole=False)  # one compile, or a log's sum of them
BYTES = Bounds(2**63 - 1, "2^63 - 1 (what a signed 64-bit size holds)")
COUNT = Bounds(2**31 - 1, "2^31 - 1 (what a 32-bit count holds)")
ELEMENTS = Bounds(2**53, "2^53 (the whole numbers a double holds exactly)")  # a model's parameters
FLAG = Bounds(1, "1 (passed: 1, failed: 0)")
DIFFERENCE = Bounds(sys.float_info.max, "the largest double", whole=False)

# Metric name patterns -> their bounds, the first match wins (docs/metrics.md, "What a figure may
# be"): the one place a figure's range is declared. Everything not named is a count.
FIGURE_BOUNDS: tuple[tuple[str, Bounds], ...] = (
    ("onnx.step.*", FLAG),
    ("onnx.max_abs_diff", DIFFERENCE),
    ("onnx.max_rel_diff", DIFFERENCE),
    ("onnx.parameters", ELEMENTS),
    ("dynamo.compile_seconds", SECONDS),
    ("inductor.compile_seconds", SECONDS),
    ("memory.*_bytes", BYTES),
    ("*", COUNT),
)


@lru_cache(maxsize=4096)
def bounds_of(metric: str) -> Bounds:
    return next(b for pattern, b in FIGURE_BOUNDS if fnmatch.fnmatchcase(metric, pattern))


def figure_problem(metric: str, value: object) -> str | None:
    """Why ``value`` cannot be stored as ``metric`` (None: it can)."""
    return bounds_of(metric).problem(value)
