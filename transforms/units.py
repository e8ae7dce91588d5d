"""How figures read: bytes in KiB/MiB/GiB, counts as integers, changes as signed %.

Shared by the Markdown summaries, the CLI and the site, so a figure reads the same
everywhere. A value no figure can be (NaN, an infinity, 1e308: a warehouse written before
figures were checked, ``transforms.records.FIGURE_BOUNDS``, may hold one) reads as what it
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
