"""What an incident says first: its headline, and how its steps are ranked.

``headline`` leads with what engineers track: a failure's error, then peak and temp
memory, collectives, kernel launches and fallbacks, after optimizations before before;
entry bytes and other figures only after those (``TRACKED``). ``impact`` ranks
incidents against each other (never shown as a number without its explanation,
``IMPACT_TEXT``): failures above all, bytes against the program's memory, counts
weighted by family against their baseline, never a percentage alone. Pure.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from transforms.units import human_delta, human_value, is_bytes_metric

# The figures a headline names first, in this order (a metric's first match).
TRACKED = (
    "memory.peak_live_bytes", "memory.temp_bytes", "kernel.collectives", "kernel.collective.*", "kernel.launches",
    "kernel.fallback", "kernel.fallback.*", "memory.buffer_bytes", "kernel.custom_calls", "kernel.custom_call.*",
    "memory.total_bytes", "memory.report_total_bytes", "fusion.count", "kernel.generated", "onnx.errors", "onnx.step.*",
    "onnx.max_abs_diff", "dynamo.rank_divergence", "dynamo.graph_breaks", "dynamo.recompiles", "dynamo.failures", "dynamo.compile_seconds",
)
# Stages whose figures are what runs: preferred over the same metric before optimizations.
_RUN_STAGES = {None: 0, "after_optimizations": 0, "buffer_assignment": 0, "memory_usage_report": 0, "post_fusion": 0,
               "export": 0, "pre_fusion": 1, "before_optimizations": 2}
_TRACKED = [re.compile(re.escape(p).replace(r"\*", ".*") + "$") for p in TRACKED]

IMPACT_TEXT = ("impact ranks incidents: a failure above any figure; a byte figure by its change against the "
               "program's memory before or after the step, the larger (3 × change / memory); a count by its change "
               "against its baseline, weighted by family (collectives 8, launches and fallbacks 4, other kernels 2, "
               "fusions 1); each metric once")
_FAILURE_IMPACT = 100.0
_WEIGHTS = (
    (re.compile(r"^kernel\.collective"), 8.0),
    (re.compile(r"^kernel\.(launches|fallback)"), 4.0),
    (re.compile(r"^kernel\."), 2.0),
    (re.compile(r"^fusion\."), 1.0),
)


def impact(metric: str, step: str, change: float | None, baseline: float | None, program_bytes: float) -> float:
    if step == "failure":
        return _FAILURE_IMPACT
    change = abs(change or 0.0)
    if is_bytes_metric(metric):
        return 3.0 * change / max(program_bytes, 1.0)
    return _weight(metric) * change / max(abs(baseline or 0.0), 1.0)


@cache  # a few hundred metric names, a year of steps
def _weight(metric: str) -> float:
    return next((weight for pattern, weight in _WEIGHTS if pattern.match(metric)), 0.5)


@cache  # a few hundred metric names, every step of a year
def tracked_rank(metric: str) -> int:
    """Position of ``metric`` in ``TRACKED`` (len(TRACKED) when it is not tracked)."""
    return next((i for i, p in enumerate(_TRACKED) if p.match(metric)), len(_TRACKED))


def headline_order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Steps (incident_steps rows) in the order a headline names them, each metric once:
    failures first (their error leads), then the tracked figures, the stages that run
    before the others, then by impact."""
    ranked = sorted(rows, key=lambda r: (r["step"] != "failure", tracked_rank(r["metric"]),
                                         _RUN_STAGES.get(r.get("stage"), 1), -(r.get("impact") or 0.0),
                                         r["metric"], r.get("series") or ""))
    seen: set[str] = set()
    out = []
    for r in ranked:
        if r["metric"] not in seen:
            seen.add(r["metric"])
            out.append(r)
    return out


def failure_text(row: dict[str, Any]) -> str:
    """What a failure step says: the dump's error first (its first line, without the path the
    detail starts with), or that its dump vanished."""
    if row["metric"] == "dump.vanished":
        return f"{row.get('dump_kind') or 'a'} dump vanished"
    detail = (row.get("detail") or "").split("\n", 1)[0]
    path, sep, error = detail.partition(": ")
    error = error.removeprefix(path + ": ") if sep else detail  # the error names the file again
    if row["metric"] == "dump.lost":  # "figures lost (kernel.*): <path>: line N: ..."
        what, _, why = error.partition("): ")
        return f"{row.get('dump_kind') or 'dump'} damaged, {what.removeprefix('figures lost (')} not read: " \
               f"{why.removeprefix(path + ': ')}".rstrip(": ")
    return f"{row.get('dump_kind') or 'dump'} does not parse: {error}".rstrip(": ")


def step_text(row: dict[str, Any]) -> str:
    """``memory.temp_bytes 104.7 KiB → 299.3 KiB (+194.6 KiB)`` (a failure: ``failure_text``)."""
    m = row["metric"]
    if m.startswith("dump."):
        return failure_text(row)
    if m.startswith("onnx.step.") and row["step"] == "failure":
        return f"ONNX export step {m.removeprefix('onnx.step.')} fails"
    return (f"{m} {human_value(m, row['baseline'])} → {human_value(m, row['value'])}"
            f" ({human_delta(m, row['change'])})")


def headline(job: str, program: str, rows: list[dict[str, Any]], most: int = 2) -> str:
    """``jax-pmap / jit__fun: memory.temp_bytes 104.7 KiB → 299.3 KiB (+194.6 KiB); +3 more``."""
    shown = headline_order(rows)
    parts = [step_text(r) for r in shown[:most]]
    more = len(shown) - len(parts)
    return f"{job} / {program}: " + "; ".join(parts) + (f"; +{more} more" if more > 0 else "")


def closing_text(row: dict[str, Any]) -> str:
    """How a step row (incident_steps) ended, as tables show it: ``fixed 2026-10-04 (reverted)``,
    ``open``; a life a revert gave it again says from which run (``reopened 2026-10-04, open``)."""
    again = f"reopened {row['reopened_run']}, " if row.get("reopened_run") else ""
    if not row.get("closed_run"):
        return again + "open"
    return again + f"{row['closed_how']} {row['closed_run']}" + (" (reverted)" if row.get("reverted") else "")
