"""The XLA sibling check (``transforms.xla_siblings``) on a run's staged dumps: the one place the
nightly and ``dumpscope check`` apply it, so both say the same of the same files.

``told_by_siblings(staged, warehouse)`` returns the staged results the check makes ``partial``,
by path, as copies: a staged summary belongs to its content, which may be whole under another
path (the warehouse records the downgrade on this path's dumps row only). Figures come from
each staged summary. With ``warehouse`` (the nightly), two more sources, read from the
published file: a content the night did not parse (``held``: its summary carries no metrics)
takes the metrics the warehouse holds for that content, and the files of the same compiles
that the warehouse already holds in the same runs (loaded by an earlier night, when one file
of a compile is rewritten alone) are evidence too. ``check_outcomes`` applies it to the
nightly's outcomes in place.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Sequence

from flows.ingest.staging import Outcome, StagedResult
from flows.warehouse import store as wh
from flows.warehouse.reads import registered, strings
from transforms import xla_siblings
from transforms.layout import BucketObject
from transforms.xla_siblings import SiblingDump


def check_outcomes(outcomes: list[Outcome], warehouse: Path | None) -> int:
    """Replace the staged result of each outcome the check tells short; returns how many."""
    told = told_by_siblings([(o.obj, o.staged) for o in outcomes if o.staged is not None], warehouse)
    for o in outcomes:
        o.staged = told.get(o.obj.path, o.staged)
    return len(told)


def told_by_siblings(staged: Sequence[tuple[BucketObject, StagedResult]],
                     warehouse: Path | None = None) -> dict[str, StagedResult]:
    """Path -> the staged result made ``partial`` with its reason (see the module docstring)."""
    tonight = [(obj, result) for obj, result in staged if result.summary.get("kind") in xla_siblings.KINDS
               and xla_siblings.compile_of(obj.path) is not None]
    if not tonight:
        return {}
    loaded: list[SiblingDump] = []
    figures: dict[str, dict[str, float]] = {}
    if warehouse is not None and Path(warehouse).exists():
        loaded, figures = _from_warehouse(Path(warehouse), tonight)
    dumps = [_sibling(obj.path, result, figures) for obj, result in tonight] + loaded
    mine = {obj.path: result for obj, result in tonight}
    return {path: replace(mine[path], summary=xla_siblings.downgraded(mine[path].summary, why))
            for path, why in xla_siblings.short_dumps(dumps).items() if path in mine}


def _sibling(path: str, result: StagedResult, figures: dict[str, dict[str, float]]) -> SiblingDump:
    s = result.summary
    metrics = figures.get(result.sha256, {}) if s.get("held") else s.get("metrics") or {}
    return SiblingDump(path, s["kind"], s.get("stage"), s["status"], metrics)


def _from_warehouse(warehouse: Path, tonight: list[tuple[BucketObject, StagedResult]]
                    ) -> tuple[list[SiblingDump], dict[str, dict[str, float]]]:
    """(the XLA side files of tonight's compiles the warehouse holds in tonight's runs under other
    paths, the figures of every content needed by sha256): two queries, whatever the history."""
    keys = {xla_siblings.compile_of(obj.path) for obj, _ in tonight}
    paths = {obj.path for obj, _ in tonight}
    runs = sorted({obj.run_id for obj, _ in tonight})
    with wh.connect_readonly(warehouse) as con:
        with registered(con, _sibling_runs=strings("run_id", runs)):
            rows = con.execute(
                "SELECT path, kind, stage, status, dump_id FROM dumps WHERE run_id IN (SELECT run_id FROM _sibling_runs) "
                "AND kind IN (SELECT unnest(?)) AND dump_id IS NOT NULL", [sorted(xla_siblings.KINDS)]).fetchall()
        rows = [r for r in rows if r[0] not in paths and xla_siblings.compile_of(r[0]) in keys]
        shas = sorted({r[4] for r in rows} | {result.sha256 for _, result in tonight if result.summary.get("held")})
        figures: dict[str, dict[str, float]] = {}
        if shas:
            # One content's metrics are the same under every path: any one will do.
            with registered(con, _sibling_shas=strings("dump_id", shas)):
                found = con.execute(
                    "SELECT dump_id, metric, any_value(value) FROM metrics WHERE dump_id IN (SELECT dump_id FROM "
                    "_sibling_shas) AND metric IN (SELECT unnest(?)) GROUP BY ALL", [list(xla_siblings.METRICS)]
                ).fetchall()
            for sha, metric, value in found:
                if value is not None:
                    figures.setdefault(sha, {})[metric] = value
    loaded = [SiblingDump(path, kind, stage, status, figures.get(sha, {})) for path, kind, stage, status, sha in rows]
    return loaded, figures
