"""The settings an aggregation runs with, and the stamps that say what the derived tables were
computed with: ``load_settings`` reads the settings file (``dumpscope.toml``); ``aggregate_stamp``
and ``accepts_stamp`` are kept in ``schema_info`` by each aggregation (``flows.verdict.aggregate``),
and ``needs_aggregate`` compares a published warehouse's with today's (a night with nothing new
re-aggregates when they differ).
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl

from flows.warehouse.reads import frame_of
from flows.warehouse.store import connect_readonly
from transforms.trends.rules import Settings, parse_settings

DEFAULT_SETTINGS = Path("dumpscope.toml")
# Bump when the aggregation's output changes for the same input: warehouses
# aggregated by an older version are re-aggregated by the next night, new dumps or not.
AGGREGATE_VERSION = 14  # 2: incidents; figures of partial and failed dumps left out of trends; 3: items per content;
# 4: diffs carry both dumps' paths, excerpts, their rank and rescale marks; 5: an accepted pattern restarts the baselines
# of the series it matches (it restarted none: trends matched the pattern as a series id), and no trend row of 0 before a
# count first appears (only a full re-aggregation wrote them, so they depended on how runs were aggregated); 6: every step
# is its own incident (stacked steps, improvements apart, lost), trends are facts (no rolling baseline); 7: a TORCH_TRACE
# log has a series per program, rules for the dynamo.*/inductor.* figures (compile seconds judged on a median of runs);
# 8: identity from what a dump says about itself (an Inductor graph keeps its AOT index, model__0_forward; a same_name
# event once per run and job) and diff items without process-specific values (transforms.volatile);
# 9: a failure the first night a program is seen, a revert reopens what the change it undoes had closed (issue 44)
# 10: a median of runs does not sample again a dump whose bytes an earlier run held (a copied night)
# 11: dynamo.rank_divergence of rank logs (written with each run's figures) and each compile's items (issue 46)
# 12: a TORCH_TRACE log's series diffs its own program's compiles, not every program's (diffs.diff_pairs)
# 13: ranks that differ the first night a job is seen open a regression that night (dynamo.rank_divergence from 0)
# 14: a TORCH_TRACE log's series diffs its own program's graph breaks, recompiles and failed compiles (ITEMS_VERSION 5)


def load_settings(path: Path | None) -> Settings:
    """The settings file (``path``, else ./dumpscope.toml when present, else defaults)."""
    if path is None:
        if not DEFAULT_SETTINGS.exists():
            return Settings()
        path = DEFAULT_SETTINGS
    return parse_settings(Path(path).read_text(encoding="utf-8"), source=str(path))


def aggregate_stamp(settings: Settings) -> str:
    """What the derived tables were computed with (kept in schema_info): the aggregation
    version and the settings. A change of either rewrites every run."""
    return f"v{AGGREGATE_VERSION} {settings!r}"


def accepts_stamp(accepts: pl.DataFrame) -> str:
    """The accept log the derived tables were computed with: its size and last entry. New
    entries rewrite the runs from the earliest one they name (``history.first_dirty_run``)."""
    return "" if accepts.is_empty() else f"{accepts.height} {accepts.get_column('accepted_at').max().isoformat()}"


def needs_aggregate(warehouse: Path, settings: Settings) -> bool:
    """True when the published warehouse's derived tables are missing or were computed
    by another aggregation version, other settings or another accept log."""
    if not Path(warehouse).exists():
        return False
    con = connect_readonly(warehouse)
    try:
        state = dict(con.execute("SELECT key, value FROM schema_info "
                                 "WHERE key IN ('aggregated_with', 'aggregated_accepts')").fetchall())
        accepts = frame_of(con, "SELECT accepted_at FROM accepts")
    except duckdb.Error:
        return True
    finally:
        con.close()
    return state.get("aggregated_with") != aggregate_stamp(settings) or state.get("aggregated_accepts") != accepts_stamp(accepts)
