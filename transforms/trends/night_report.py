"""The night's summary in Markdown, ready for a chat, an issue or a pull-request comment.

One story, in the order a person reads it: the counts ("2 new, 1 still open, 1 fixed,
0 improvements"), then each new incident with its headline, commit range and cause,
then what was fixed, what is still open (with its age), and the improvements. Input is
the ``incidents_at(run)`` rows (``flows.verdict``), so every count here is the count
the CLI, the notifications and the site show. Names come from dumps and paths: each
reaches the text through ``transforms.escape``.
"""

from __future__ import annotations

import polars as pl

from transforms.escape import code, md_text, shell_word, url_path

SECTIONS = (("new", "New"), ("fixed", "Fixed"), ("accepted", "Accepted"), ("open", "Still open"),
            ("improvement", "Improvements"))


def counts(at: pl.DataFrame) -> dict[str, int]:
    """new, open (opened earlier, still open), fixed, accepted, improvements: at one run."""
    by = dict(at.group_by("status").len().iter_rows()) if at.height else {}
    return {"new": by.get("new", 0), "open": by.get("open", 0), "fixed": by.get("fixed", 0),
            "accepted": by.get("accepted", 0), "improvements": by.get("improvement", 0)}


def counts_line(c: dict[str, int]) -> str:
    return (f"**{c['new']} new**, {c['open']} still open, {c['fixed']} fixed, "
            f"{c['improvements']} improvement{'s' if c['improvements'] != 1 else ''}"
            + (f", {c['accepted']} accepted" if c["accepted"] else ""))


def commit_link(commit: str | None, template: str | None) -> str:
    if not commit:
        return "?"
    # run.json's commit is any string: percent-encoded in the link, as the site does it
    return f"[{code(commit)}]({template.format(commit=url_path(commit))})" if template else code(commit)


def commit_range(row: dict, template: str | None = None, compare: str | None = None) -> str:
    """``a1b2c3 → d4e5f6`` (a compare link when a template is set)."""
    text = f"{commit_link(row['last_good_commit'], template)} → {commit_link(row['first_bad_commit'], template)}"
    if compare and row["last_good_commit"] and row["first_bad_commit"]:
        href = compare.format(base=url_path(row["last_good_commit"]), head=url_path(row["first_bad_commit"]))
        text += f" ([compare]({href}))"
    return text


def night_markdown(run_id: str | None, commit: str | None, at: pl.DataFrame, *,
                   commit_url: str | None = None, compare_url: str | None = None,
                   sections: tuple[str, ...] = tuple(s for s, _ in SECTIONS)) -> str:
    """The summary of ``run_id`` from its ``incidents_at`` rows (``sections``: which
    lists to write; the counts line always covers them all)."""
    if run_id is None:
        return "# Dumpscope\n\nNo runs yet.\n"
    c = counts(at)
    lines = [f"# Dumpscope: run {md_text(run_id)} (commit {commit_link(commit, commit_url)})", "",
             "Last night: " + counts_line(c) + ".", ""]
    rows = at.sort("impact", "incident_id", descending=[True, False]).to_dicts()
    for status, title in SECTIONS:
        chosen = [r for r in rows if r["status"] == status and status in sections]
        if not chosen:
            continue
        lines += [f"## {title}", ""]
        for r in chosen:
            lines += _new(r, commit_url, compare_url) if status == "new" else [_short(r, status)]
        lines.append("")
    if not rows:
        lines += ["Nothing changed: no incident is open.", ""]
    return "\n".join(lines)


def _new(r: dict, commit_url: str | None, compare_url: str | None) -> list[str]:
    out = [f"### {md_text(r['job'])} / {md_text(r['program'])} · {r['kind']} · {code(r['incident_id'])}", "",
           md_text(r["headline"]), "",
           f"Commits {commit_range(r, commit_url, compare_url)}, runs {md_text(r['last_good_run'] or '?')} → {md_text(r['opened_run'])}."]
    if r["cause"]:
        out += ["", "Cause:", ""] + [f"- {md_text(line)}" for line in r["cause"].splitlines()]
    if r["last_good_run"]:
        pattern = f"{r['job']}/{r['program']}/*"
        out += ["", code("dumpscope diff " + " ".join(shell_word(x) for x in (r["last_good_run"], r["opened_run"]))
                         + f" --series {shell_word(pattern)}")]
    return out + [""]


def _short(r: dict, status: str) -> str:
    when = {"open": f"open since {md_text(r['opened_run'])} ({r['age_runs']} run{'' if r['age_runs'] == 1 else 's'})",
            "fixed": f"opened {md_text(r['opened_run'])}, fixed in this run",
            "accepted": f"opened {md_text(r['opened_run'])}, accepted by {md_text(r['accepted_by'] or '?')}"
                        + (f": {md_text(r['accepted_note'])}" if r["accepted_note"] else ""),
            "improvement": "opened in this run"}[status]
    return f"- {code(r['incident_id'])} {md_text(r['headline'])} — {when}"
