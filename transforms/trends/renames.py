"""The accept log across a change of series naming: what a person accepted stays accepted.

Series are named again from the dumps at every aggregation that rewrites every run (a new
aggregation version, other settings): a naming rule that changed renames the series of the
dumps whose name it changes (an Inductor graph ``model__forward`` → ``model__0_forward``, a
rank's log ``step at model.py:17#2/torch_trace/trace`` → ``step at model.py:17/torch_trace/rank_1``).
The figures, steps and incidents are computed again from the dumps under the new names, so
their history is the same under the new names. The accept log is what a person wrote: it names
series (a pattern) and incidents (an id, which hashes the program's name), each at one run.

``series_renames(stored, fresh)``: per run, each series a dump had under the old names and has
under the new (only those that changed). ``renamed_accepts(accepts, renames, incidents)``: the
accept log with each accept naming, at its run, what it named there before:

- a pattern that matched one renamed series becomes that series' new id (glob-escaped); one
  that matched several gets each ``/``-separated part that named one old name replaced by the
  new one (``torch-inductor/model__forward/*`` → ``torch-inductor/model__0_forward/*``), kept
  only when it then matches their new names; a pattern that still matches them is left alone;
- an incident id (and each id of ``closed_incidents``) of an incident opened in a run where its
  program was renamed becomes the id the same incident has under the new name.

Pure: frames in, frames out. Accepts of runs no rename touches come back unchanged.
"""

from __future__ import annotations

import fnmatch
import re

import polars as pl

from transforms.trends.incident_walk import incident_id

RENAME_SCHEMA = pl.Schema({"run_id": pl.String, "job": pl.String, "old_series": pl.String, "series": pl.String,
                           "old_program": pl.String, "program": pl.String})


def series_renames(stored: pl.DataFrame, fresh: pl.DataFrame) -> pl.DataFrame:
    """``stored`` and ``fresh``: dump_series rows (path, program, run_id, job, series, series_program)
    of the same dumps under the old and the new names; the pairs that differ (``RENAME_SCHEMA``)."""
    old = stored.select("path", "program", "run_id", "job", pl.col("series").alias("old_series"),
                        pl.col("series_program").alias("old_program"))
    new = fresh.select("path", "program", "series", pl.col("series_program").alias("program_new"))
    both = old.join(new, on=["path", "program"], nulls_equal=True)
    return (both.filter(pl.col("old_series") != pl.col("series"))
            .select("run_id", "job", "old_series", "series", "old_program", pl.col("program_new").alias("program"))
            .unique().sort("run_id", "old_series").cast(dict(RENAME_SCHEMA)))


def renamed_accepts(accepts: pl.DataFrame, renames: pl.DataFrame, incidents: pl.DataFrame) -> pl.DataFrame:
    """``accepts`` (the accept log's rows: series, run_id, incident_id, closed_incidents, ...) naming
    under the new names what they named under the old. ``incidents``: incident_id, job, program,
    opened_run, kind of the incidents as the old names made them."""
    if accepts.is_empty() or renames.is_empty():
        return accepts
    by_run = {run: rows for (run,), rows in renames.partition_by("run_id", as_dict=True).items()}
    ids = _renamed_ids(incidents, renames)
    rows = []
    for a in accepts.to_dicts():
        if a.get("series") and a["run_id"] in by_run:
            a["series"] = _renamed_pattern(a["series"], by_run[a["run_id"]])
        if a.get("incident_id"):
            a["incident_id"] = ids.get(a["incident_id"], a["incident_id"])
        if a.get("closed_incidents") is not None:
            a["closed_incidents"] = sorted(ids.get(i, i) for i in a["closed_incidents"])
        rows.append(a)
    return pl.DataFrame(rows, schema=accepts.schema)


def _escaped(name: str) -> str:
    """``name`` as a pattern that matches only itself."""
    return re.sub(r"([*?\[])", r"[\1]", name)


def _renamed_pattern(pattern: str, renames: pl.DataFrame) -> str:
    pairs = [(o, n) for o, n in renames.select("old_series", "series").iter_rows() if fnmatch.fnmatchcase(o, pattern)]
    if not pairs or all(fnmatch.fnmatchcase(n, pattern) for _, n in pairs):
        return pattern
    if len({n for _, n in pairs}) == 1:
        return _escaped(pairs[0][1])
    parts = pattern.split("/")
    for i, part in enumerate(parts):
        olds = {o.split("/")[i] if i < len(o.split("/")) else None for o, _ in pairs}
        news = {n.split("/")[i] if i < len(n.split("/")) else None for _, n in pairs}
        if olds == {part} and len(news) == 1 and None not in news:
            parts[i] = _escaped(news.pop())
    candidate = "/".join(parts)
    return candidate if all(fnmatch.fnmatchcase(n, candidate) for _, n in pairs) else pattern


def _renamed_ids(incidents: pl.DataFrame, renames: pl.DataFrame) -> dict[str, str]:
    """Old incident id -> the id of the same incident under its program's new name."""
    programs = renames.select(pl.col("run_id").alias("opened_run"), "job", pl.col("old_program").alias("program"),
                              pl.col("program").alias("new_program")).unique()
    moved = incidents.join(programs, on=["opened_run", "job", "program"])
    return {old: incident_id(job, new, opened, kind == "improvement")
            for old, job, new, opened, kind in moved.select("incident_id", "job", "new_program", "opened_run", "kind").iter_rows()}
