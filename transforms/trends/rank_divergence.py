"""A job's rank logs side by side: the ranks that compiled a program differently from the others.

tlparse's multi-rank report compares a torch.distributed job's ranks on what each compiled: compile
ids, graph breaks, recompiles and collective schedules (ranks whose collective schedules differ hang,
or exchange the wrong tensors). Here the same comparison is made on each rank log's ``rank_profile``
items (``diff_item_rows.compile_rows``: per program, one normalised text per dimension), so it holds
across nights: the items of a content are kept for ever, and the same logs written by another
process give the same texts.

``compare(logs, profiles)``: ``logs``, the rank logs of a set of runs, one row per (path, program)
as their metrics rows name them (path, run_id, job, stage ``rank_<n>``, program); ``profiles``, their
``rank_profile`` items (path, key, detail, and ``excerpt_lines``/``excerpt`` when known). Per run,
job and program (as its series names it, as the items key it: ``diff_item_rows.series_program``), the ranks are every rank log of the job in the
run (a rank whose log lacks the program compiled none of it). Ranks that agree on every dimension
form a group; the largest is the majority (a tie: the group of the lowest rank); every other rank
*differs*. Out:

- ``figures`` (path, program, metric, value): ``dynamo.rank_divergence``, the ranks that differ from
  the majority, on every program of every rank log of a job with two ranks or more (0: all agree),
  so the incident rule opens a regression when it steps 0 → N;
- ``divergences``: one row per differing rank and dimension (``DIVERGENCE_SCHEMA``), with a line of
  text naming the rank, what differs and what the majority has, and both sides' log lines.

Pure: frames in, frames out.
"""

from __future__ import annotations

import polars as pl

from transforms.trends.diff_item_rows import RANK_DIMENSIONS, series_program
from transforms.trends.incident_rule import figures_stand
from transforms.trends.series import normalize_program

METRIC = "dynamo.rank_divergence"
_TEXT = 300  # of a dimension's text shown in a divergence's line
FIGURE_SCHEMA = pl.Schema({"path": pl.String, "program": pl.String, "metric": pl.String, "value": pl.Float64})
DIVERGENCE_SCHEMA = pl.Schema({
    "run_id": pl.String, "job": pl.String, "program": pl.String, "rank": pl.Int32, "dimension": pl.String,
    "description": pl.String, "path": pl.String, "majority_path": pl.String, "majority_ranks": pl.List(pl.Int32),
    "lines": pl.String, "majority_lines": pl.String, "excerpt": pl.String, "majority_excerpt": pl.String,
})  # fmt: skip


def rank_of(stage: str | None) -> int | None:
    """``rank_3`` -> 3; None for any other stage."""
    if stage is None or not stage.startswith("rank_") or not stage[5:].isdigit():
        return None
    return int(stage[5:])


def ranks_text(ranks: list[int]) -> str:
    """``rank 0``, ``ranks 0, 2``."""
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def rank_logs(series: pl.DataFrame, dumps: pl.DataFrame) -> pl.DataFrame:
    """The rank logs among ``series`` (dump_series rows) whose figures stand (``dumps``: path, status,
    lost_metrics, dump_id, parser_version), one row per (path, program) with the dump's columns the
    items are keyed by (``diffs.items_keys``)."""
    logs = series.filter((pl.col("kind") == "torch_trace") & pl.col("stage").str.starts_with("rank_"))
    standing = dumps.filter(figures_stand(dumps)).select("path", "dump_id", "parser_version", "status")
    return logs.select("path", "run_id", "job", "kind", "stage", "program").join(standing, on="path").unique(
        ["path", "program"], maintain_order=True)


def compare(logs: pl.DataFrame, profiles: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(figures, divergences) of ``logs`` from their ``profiles`` (see the module docstring)."""
    figures, divergences = [], []
    logs = logs.with_columns(pl.col("stage").map_elements(rank_of, return_dtype=pl.Int32).alias("_rank")).filter(
        pl.col("_rank").is_not_null())
    texts: dict[str, dict[tuple[str, str], dict]] = {}
    for row in profiles.iter_rows(named=True):
        program, _, dimension = row["key"].rpartition(" | ")
        texts.setdefault(row["path"], {})[(program, dimension)] = row
    for (run_id, job), rows in logs.group_by("run_id", "job", maintain_order=True):
        paths = rows.select("path", "_rank").unique().sort("_rank")
        rank_paths = dict(zip(paths.get_column("_rank").to_list(), paths.get_column("path").to_list()))
        if len(rank_paths) < 2 or len(rank_paths) != paths.height:  # one rank, or two logs of one rank: no sides
            continue
        named = rows.with_columns(series_program(pl.col("program")).alias("_prog"))
        for (prog,), of_program in named.group_by("_prog", maintain_order=True):
            profile = {r: tuple((texts.get(p, {}).get((prog, d)) or {}).get("detail") or "" for d in RANK_DIMENSIONS)
                       for r, p in rank_paths.items()}
            majority = _majority(profile)
            differing = [r for r in rank_paths if r not in majority]
            figures += [(path, program, METRIC, float(len(differing)))
                        for path, program in of_program.select("path", "program").iter_rows()]
            first = majority[0]
            for r in differing:
                for i, dimension in enumerate(RANK_DIMENSIONS):
                    if profile[r][i] == profile[first][i]:
                        continue
                    mine = texts.get(rank_paths[r], {}).get((prog, dimension)) or {}
                    theirs = texts.get(rank_paths[first], {}).get((prog, dimension)) or {}
                    line = (f"rank {r} differs from {ranks_text(majority)} in its {dimension}: "
                            f"{_cut(profile[r][i]) or 'none'} ({ranks_text(majority)}: {_cut(profile[first][i]) or 'none'})")
                    divergences.append((run_id, job, prog, r, dimension, line, rank_paths[r], rank_paths[first], majority,
                                        mine.get("excerpt_lines"), theirs.get("excerpt_lines"), mine.get("excerpt"),
                                        theirs.get("excerpt")))
    return (pl.DataFrame(figures, schema=FIGURE_SCHEMA, orient="row"),
            pl.DataFrame(divergences, schema=DIVERGENCE_SCHEMA, orient="row"))


def _majority(profile: dict[int, tuple[str, ...]]) -> list[int]:
    """The ranks of the largest group that agree on every dimension (a tie: the lowest rank's)."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for rank in sorted(profile):
        groups.setdefault(profile[rank], []).append(rank)
    return max(groups.values(), key=lambda ranks: (len(ranks), -ranks[0]))


def _cut(text: str) -> str:
    return text if len(text) <= _TEXT else text[: _TEXT - 1] + "…"


__all__ = ["DIVERGENCE_SCHEMA", "FIGURE_SCHEMA", "METRIC", "compare", "rank_logs", "rank_of", "ranks_text"]
