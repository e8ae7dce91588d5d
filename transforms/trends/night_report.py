"""The night's regression summary in Markdown, ready to paste into an issue or a chat.

Regressions come first, grouped by job and program, each group with the structural
diff that explains it (what appeared, vanished or grew since the previous run);
then the events that are not regressions (new and vanished series, missing jobs,
failed dumps). Pure: takes the derived frames of ``flows.aggregate``.
"""

from __future__ import annotations

import polars as pl

from transforms.units import human_delta, human_ratio, human_value

MAX_DIFF_LINES = 12


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 or word.endswith('s') else 's'}"


def latest_run(rollups: pl.DataFrame) -> str | None:
    if rollups.is_empty():
        return None
    return rollups.sort("started_at", "run_id").get_column("run_id")[-1]


def regression_markdown(run_id: str | None, regressions: pl.DataFrame, diffs: pl.DataFrame, events: pl.DataFrame,
                        rollups: pl.DataFrame, runs: pl.DataFrame) -> str:
    """Markdown for one run (the latest when ``run_id`` is None)."""
    run_id = run_id or latest_run(rollups)
    if run_id is None:
        return "# Dumpscope\n\nNo runs in the warehouse yet.\n"
    run = runs.filter(pl.col("run_id") == run_id)
    commit = run.get_column("commit")[0] if run.height else None
    reg = regressions.filter(pl.col("run_id") == run_id)
    ev = events.filter(pl.col("run_id") == run_id)
    roll = rollups.filter(pl.col("run_id") == run_id)
    dif = diffs.filter(pl.col("run_id") == run_id)

    lines = [f"# Dumpscope: run {run_id}" + (f" (commit `{commit}`)" if commit else ""), ""]
    groups = reg.group_by("job", "program", maintain_order=True).agg(pl.len())
    changed = int(roll.get_column("changed_series").sum()) if roll.height else 0
    counts = {e: ev.filter(pl.col("event") == e).height for e in ("new_series", "vanished", "job_missing", "failed_dump", "partial_dump")}
    lines.append(
        f"**{_plural(reg.height, 'regression')}** in {_plural(groups.height, 'program')}"
        f" · {_plural(changed, 'series')} changed · {counts['new_series']} new · {counts['vanished']} vanished"
        f" · {_plural(counts['job_missing'], 'job')} missing · {counts['failed_dump']} failed / {counts['partial_dump']} partial dumps"
    )
    lines.append("")
    if reg.height:
        lines += ["## Regressions", ""]
        for job, program, _ in groups.iter_rows():
            lines += _program_section(job, program, reg, dif)
    else:
        lines += ["No regressions.", ""]
    other = ev.filter(pl.col("event") != "first_run")
    if other.height:
        lines += ["## Not regressions", ""]
        for row in other.iter_rows(named=True):
            what = row["series"] or row["job"]
            lines.append(f"- {row['event'].replace('_', ' ')}: `{what}`" + (f": {row['detail']}" if row["detail"] else ""))
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _program_section(job: str, program: str, reg: pl.DataFrame, dif: pl.DataFrame) -> list[str]:
    rows = reg.filter((pl.col("job") == job) & (pl.col("program") == program))
    out = [f"### {job} / {program}", "", "| metric | series | baseline | now | change | rule | since |", "|---|---|---|---|---|---|---|"]
    for r in rows.iter_rows(named=True):
        where = r["series"].split("/", 2)[2]
        out.append(
            f"| `{r['metric']}` | {where} | {human_value(r['metric'], r['baseline'])} | {human_value(r['metric'], r['value'])}"
            f" | {human_delta(r['metric'], r['change'])} ({human_ratio(r['change_ratio'])}) | {r['rule']} | {r['regressed_since']} |"
        )
    out.append("")
    why = dif.filter((pl.col("job") == job) & (pl.col("program") == program))
    if why.height:
        prev = why.get_column("previous_run_id")[0]
        out.append(f"What changed since {prev}:")
        out.append("")
        # The same change seen by two files of one compile (pre/post fusion IR) reads once.
        described = why.get_column("description").unique(maintain_order=True)
        out += [f"- {d}" for d in described.head(MAX_DIFF_LINES)]
        if described.len() > MAX_DIFF_LINES:
            run = why.get_column("run_id")[0]
            out.append(f"- … and {described.len() - MAX_DIFF_LINES} more: `dumpscope diff {prev} {run} --series '{job}/{program}/*'`")
        out.append("")
    return out
