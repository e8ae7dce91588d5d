"""How figures read: bytes in KiB/MiB/GiB, counts as integers, changes as signed %.

Shared by the Markdown summaries, the CLI and the site, so a figure reads the same
everywhere.
"""

from __future__ import annotations

import math

_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def is_bytes_metric(metric: str) -> bool:
    return metric.endswith("_bytes") or metric.endswith(".bytes")


def human_bytes(n: float | None) -> str:
    if n is None or not math.isfinite(n):
        return "–"
    sign = "-" if n < 0 else ""
    n = abs(float(n))
    for unit in _BINARY:
        if n < 1024 or unit == _BINARY[-1]:
            return f"{sign}{n:.0f} {unit}" if unit == "B" else f"{sign}{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def human_value(metric: str, v: float | None) -> str:
    """A metric's value as people read it (bytes binary-scaled, counts as integers)."""
    if v is None or not math.isfinite(v):
        return "–"
    if is_bytes_metric(metric):
        return human_bytes(v)
    if float(v).is_integer():
        return f"{int(v):,}"
    return f"{v:.3g}"


def human_delta(metric: str, delta: float | None) -> str:
    if delta is None or not math.isfinite(delta):
        return "–"
    sign = "+" if delta > 0 else ""
    return sign + human_value(metric, delta)


def human_ratio(change_ratio: float | None) -> str:
    """A relative change (0.25 → '+25.0 %')."""
    if change_ratio is None or not math.isfinite(change_ratio):
        return "–"
    return f"{change_ratio * 100:+.1f} %"
