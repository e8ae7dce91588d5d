"""``dumpscope check DIR``: what a change would do to the warehouse's figures, before it lands.

``DIR`` holds one night's jobs as a pull request's CI job wrote them (``DIR/<job>/**``, like one
run directory of the bucket, with an optional ``DIR/run.json``). It is judged as the nightly's
next run by the nightly's own listing, staging, row builders, series naming and verdict
(``flows.verdict.candidate``), through a read-only connection: nothing is written to the
warehouse, beside it or in DIR. The answer and its formats: ``transforms.check_report``.

``check_dir`` raises ``CheckError`` (a ``CommandError``, exit 1) when the warehouse does not
exist or is no DuckDB file; ``BadDirectory`` (``flows.verdict.candidate``, exit 2) when DIR is
not a directory, holds no job directory with files, or holds a job's files rather than job
directories; ``NoSuchRun`` (``flows.warehouse.reads``, exit 2) when ``against`` names no run.
"""

from __future__ import annotations

from pathlib import Path

import typer

from flows.commands import preflight
from flows.commands.shared import open_to_read
from flows.errors import FAILING, CommandError  # FAILING: --fail-on new found a regression or failure to open
from flows.ingest.bucket_access import parse_storage_options
from flows.resources import MemoryBudget, parse_memory
from flows.verdict import candidate
from flows.verdict.candidate import BadDirectory
from flows.verdict.settings import load_settings
from flows.warehouse.fetch import fetched, is_url
from flows.warehouse.reads import NoSuchRun
from transforms.check_report import FORMATS, CheckResult, render
from transforms.parse import DEFAULT_LIMITS, ParseLimits
from transforms.trends.rules import Settings

__all__ = ["FORMATS", "BadDirectory", "CheckError", "CheckResult", "NoSuchRun", "check_dir", "main", "render"]


class CheckError(CommandError):
    """No warehouse (or not a DuckDB file): one line for people (exit 1)."""


def check_dir(directory: Path, warehouse: Path, *, against: str | None = None, settings: Settings | None = None,
              limits: ParseLimits = DEFAULT_LIMITS, budget: MemoryBudget | None = None,
              foreign: bool = False) -> CheckResult:
    """What DIR would do as the run after ``against`` (default: the latest); ``foreign``: a snapshot
    fetched from elsewhere (read with no file access). The history is read a group of the
    candidate's jobs at a time, each of at most ``budget.incidents_batch_rows`` stored figures."""
    settings = settings if settings is not None else load_settings(None)
    budget = budget or MemoryBudget(parse_memory(settings.memory_limit))
    objects, not_read = candidate.list_directory(directory)  # DIR's shape is checked before the warehouse is opened
    con = open_to_read(warehouse, CheckError, budget=budget, foreign=foreign)
    try:
        return candidate.judge_directory(con, directory, objects, not_read, against=against, settings=settings,
                                         limits=limits, batch_rows=budget.incidents_batch_rows)
    finally:
        con.close()


def main(*, directory: Path, against: str | None, warehouse: str, fmt: str, fail_on: str | None,
         settings: Path | None, memory_limit: str | None, storage_option: list[str] = ()) -> int:
    """Print what DIR would open in ``fmt``; the exit status is 4 when ``fail_on`` finds some.
    ``warehouse``: a path, or the URL of a published snapshot (fetched with ``storage_option``)."""
    try:
        storage_options = parse_storage_options(list(storage_option))
    except ValueError as exc:
        raise CommandError(str(exc), exit_code=preflight.BAD_ARGUMENT) from None
    conf, budget = preflight.settings_and_budget(settings, memory_limit)
    if is_url(warehouse):  # a published snapshot: downloaded within the settings' bounds, read as foreign
        max_bytes = preflight.size_setting(conf.check_max_download, "[check] max_download", settings)
        with fetched(warehouse, storage_options, max_bytes=max_bytes, seconds=conf.check_download_seconds) as local:
            result = check_dir(directory, local, against=against, settings=conf, budget=budget, foreign=True)
    else:
        result = check_dir(directory, Path(warehouse.removeprefix("file://")), against=against, settings=conf,
                           budget=budget)
    typer.echo(render(result, str(directory), fmt))
    if fail_on and result.failing:
        typer.echo(f"{len(result.failing)} new incident(s) (regressions or failures)", err=True)
        return FAILING
    return 0
