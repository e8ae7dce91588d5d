"""How figures read: bytes in KiB/MiB/GiB, counts as integers, changes as signed %.

Shared by the Markdown summaries, the CLI and the site, so a figure reads the same
everywhere. A figure alone takes the unit that fits it (``human_value``); a table or a chart
of several takes one unit for all its bytes (``byte_unit``, ``value_in``): a reader compares
"546 KiB" with "1331 KiB", not "0.5332 MiB" with "1.3 MiB". A value no figure can be (NaN, an infinity, 1e308: a warehouse written before
figures were checked, ``transforms.figure_bounds.FIGURE_BOUNDS``, may hold one) reads as what it
is ("NaN", "inf", "1e+308"), never as a blank and never as 309 digits.
"""

from __future__ import annotations

import math

_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
_WHOLE_DIGITS = 1e15  # whole numbers below this read in full (1,234,567); above, in scientific notation


def is_bytes_metric(metric: str) -> bool:
    return metric.endswith("_bytes") or metric.endswith(".bytes")


def _odd(v: float) -> str:
    """A value that no unit scales: NaN, an infinity, or a magnitude past every unit."""
    return "NaN" if math.isnan(v) else f"{v:.3g}"


def human_bytes(n: float | None) -> str:
    if n is None:
        return "–"
    if not math.isfinite(n) or abs(n) >= 1024 ** len(_BINARY):
        return _odd(float(n)) + ("" if math.isnan(n) else " B")
    sign = "-" if n < 0 else ""
    n = abs(float(n))
    for unit in _BINARY:
        if n < 1024 or unit == _BINARY[-1]:
            return f"{sign}{n:.0f} {unit}" if unit == "B" else f"{sign}{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def human_value(metric: str, v: float | None) -> str:
    """A metric's value as people read it (bytes binary-scaled, counts as integers)."""
    if v is None:
        return "–"
    if is_bytes_metric(metric):
        return human_bytes(v)
    if not math.isfinite(v):
        return _odd(v)
    if float(v).is_integer() and abs(v) < _WHOLE_DIGITS:
        return f"{int(v):,}"
    return f"{v:.3g}"


def byte_unit(largest: float | None) -> tuple[str, int]:
    """The one unit of a table or chart of byte figures whose largest magnitude is ``largest``:
    the smallest in which it has at most four digits before the point (7 MiB reads "7168 KiB",
    so 546 KiB beside it stays "546 KiB"; past 9999 GiB the largest unit)."""
    if largest is None or not math.isfinite(largest):
        return "B", 1
    for power, unit in enumerate(_BINARY):
        if abs(largest) < 10_000 * 1024 ** power or unit == _BINARY[-1]:
            return unit, 1024 ** power
    raise AssertionError("unreachable")


def number_in_unit(x: float) -> str:
    """A figure already divided by its unit: four significant digits, a whole number without
    ".0" (``charts._points`` writes a chart's labels the same way)."""
    if not math.isfinite(x):
        return _odd(x)
    if abs(x) >= 1000:
        return f"{x:.0f}"
    return f"{x:.4g}"


def value_in(metric: str, v: float | None, unit: tuple[str, int]) -> str:
    """``human_value``, but a byte figure in ``unit`` (``byte_unit``: its table's or chart's)."""
    if v is None or not is_bytes_metric(metric) or not math.isfinite(v):
        return human_value(metric, v)  # a value no unit scales reads as human_bytes says it
    return f"{number_in_unit(v / unit[1])} {unit[0]}"


def delta_in(metric: str, delta: float | None, unit: tuple[str, int]) -> str:
    """``human_delta`` in ``unit``."""
    if delta is None or not is_bytes_metric(metric):
        return human_delta(metric, delta)
    return ("+" if delta > 0 else "") + value_in(metric, delta, unit)


def table_unit(figures) -> tuple[str, int]:
    """The byte unit of a table: ``byte_unit`` of the largest of its byte figures, ``figures``
    being (metric, value) pairs (the other metrics' values do not count)."""
    sizes = [abs(v) for m, v in figures if v is not None and is_bytes_metric(m) and math.isfinite(v)]
    return byte_unit(max(sizes, default=0.0))


def human_delta(metric: str, delta: float | None) -> str:
    if delta is None:
        return "–"
    sign = "+" if delta > 0 else ""
    return sign + human_value(metric, delta)


def human_ratio(change_ratio: float | None) -> str:
    """A relative change (0.25 → '+25.0 %'); none between values no figure can be."""
    if change_ratio is None or not math.isfinite(change_ratio):
        return "–"
    return f"{change_ratio * 100:+.1f} %"
