"""The night's summary in Markdown, ready for an issue, a pull-request comment or the report
file (``night_markdown``); the same summary for chat and e-mail notifications (``CHAT``:
every value from outside a code span, headings bold lines), and as plain text for targets
that show text only (``night_text``: webhooks, SMS; links written out after their label).

One story, in the order a person reads it: the counts ("2 new, 1 still open, 1 fixed,
0 improvements"), then each new incident with its headline, commit range and cause,
then what was fixed, what is still open (with its age), and the improvements. Input is
the ``incidents_at(run)`` rows (``flows.verdict``), so every count here is the count
the CLI, the notifications and the site show. Names come from dumps and paths: each
reaches the text through ``transforms.escape``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import polars as pl

from transforms.escape import code, md_text, plain_text, shell_word, url_path
from transforms.trends.incidents import worse_again_line


class Style(NamedTuple):
    """How the summary writes text from outside, code, links, emphasis and headings."""

    text: Callable[[object], str]
    code: Callable[[object], str]
    link: Callable[[str, str], str]  # (label as written, URL already encoded)
    bold: Callable[[str], str]
    heading: Callable[[int, str], str]


MARKDOWN = Style(md_text, code, lambda label, href: f"[{label}]({href})", lambda s: f"**{s}**",
                 lambda level, s: f"{'#' * level} {s}")
TEXT = Style(plain_text, plain_text, lambda label, href: f"{label} ({href})", str, lambda level, s: s)
# Notifications reach chats through Apprise's HTML-to-Markdown conversion, which backslash-escapes
# "_" and "*" in text (Slack showed jit\_train\_step) and keeps headings that Slack shows as "###":
# names go in code spans, which every chat shows verbatim, and headings become bold lines (an
# incident's own line, which starts with a code span, stays plain: "* `x`*" is not bold in Slack).
CHAT = Style(code, code, MARKDOWN.link, MARKDOWN.bold, lambda level, s: f"**{s}**" if level < 3 else s)

SECTIONS = (("new", "New"), ("fixed", "Fixed"), ("accepted", "Accepted"), ("open", "Still open"),
            ("improvement", "Improvements"))


def counts(at: pl.DataFrame) -> dict[str, int]:
    """new, open (opened earlier, still open), worse_again (of those open, the ones whose figures
    moved further the worse way in this run), fixed, accepted, improvements: at one run."""
    by = dict(at.group_by("status").len().iter_rows()) if at.height else {}
    again = at.filter((pl.col("status") == "open") & pl.col("worse_again").is_not_null()).height if at.height else 0
    return {"new": by.get("new", 0), "open": by.get("open", 0), "worse_again": again, "fixed": by.get("fixed", 0),
            "accepted": by.get("accepted", 0), "improvements": by.get("improvement", 0)}


def ordered(at: pl.DataFrame) -> list[dict]:
    """``at``'s rows in the order the summary and the site list them: the open incidents
    whose figures moved further the worse way in this run first, then by impact."""
    calm = pl.col("worse_again").is_null()
    return (at.with_columns(calm.alias("_calm")).sort("_calm", "impact", "incident_id", descending=[False, True, False])
            .drop("_calm").to_dicts())


def counts_line(c: dict[str, int], style: Style = MARKDOWN) -> str:
    again = f" ({c['worse_again']} worse again)" if c.get("worse_again") else ""
    return (f"{style.bold(str(c['new']) + ' new')}, {c['open']} still open{again}, {c['fixed']} fixed, "
            f"{c['improvements']} improvement{'s' if c['improvements'] != 1 else ''}"
            + (f", {c['accepted']} accepted" if c["accepted"] else ""))


def commit_link(commit: str | None, template: str | None, style: Style = MARKDOWN) -> str:
    if not commit:
        return "?"
    # run.json's commit is any string: percent-encoded in the link, as the site does it
    return style.link(style.code(commit), template.format(commit=url_path(commit))) if template else style.code(commit)


def commit_range(row: dict, template: str | None = None, compare: str | None = None, style: Style = MARKDOWN) -> str:
    """``a1b2c3 → d4e5f6`` (a compare link when a template is set)."""
    text = (f"{commit_link(row['last_good_commit'], template, style)} → "
            f"{commit_link(row['first_bad_commit'], template, style)}")
    if compare and row["last_good_commit"] and row["first_bad_commit"]:
        href = compare.format(base=url_path(row["last_good_commit"]), head=url_path(row["first_bad_commit"]))
        text += f" ({style.link('compare', href)})"
    return text


def night_markdown(run_id: str | None, commit: str | None, at: pl.DataFrame | None, *,
                   commit_url: str | None = None, compare_url: str | None = None,
                   sections: tuple[str, ...] = tuple(s for s, _ in SECTIONS), style: Style = MARKDOWN) -> str:
    """The summary of ``run_id`` from its ``incidents_at`` rows (``sections``: which
    lists to write; the counts line always covers them all)."""
    s = style
    if run_id is None:
        return f"{s.heading(1, 'Dumpscope')}\n\nNo runs yet.\n"
    c = counts(at)
    lines = [s.heading(1, f"Dumpscope: run {s.text(run_id)} (commit {commit_link(commit, commit_url, s)})"), "",
             "Last night: " + counts_line(c, s) + ".", ""]
    rows = ordered(at)
    for status, title in SECTIONS:
        chosen = [r for r in rows if r["status"] == status and status in sections]
        if not chosen:
            continue
        lines += [s.heading(2, title), ""]
        for r in chosen:
            lines += _new(r, commit_url, compare_url, s) if status == "new" else [_short(r, status, s)]
        lines.append("")
    if not rows:
        lines += ["Nothing changed: no incident is open.", ""]
    return "\n".join(lines)


def night_text(run_id: str | None, commit: str | None, at: pl.DataFrame | None, **kwargs) -> str:
    """``night_markdown`` as plain text."""
    return night_markdown(run_id, commit, at, **kwargs, style=TEXT)


def _new(r: dict, commit_url: str | None, compare_url: str | None, s: Style) -> list[str]:
    out = [s.heading(3, f"{s.text(r['job'])} / {s.text(r['program'])} · {r['kind']} · {s.code(r['incident_id'])}"), "",
           s.text(r["headline"]), "",
           f"Commits {commit_range(r, commit_url, compare_url, s)}, runs {s.text(r['last_good_run'] or '?')} → "
           f"{s.text(r['opened_run'])}."]
    if r["cause"]:
        out += ["", "Cause:", ""] + [f"- {s.text(line)}" for line in r["cause"].splitlines()]
    if r["last_good_run"]:
        pattern = f"{r['job']}/{r['program']}/*"
        out += ["", s.code("dumpscope diff " + " ".join(shell_word(x) for x in (r["last_good_run"], r["opened_run"]))
                           + f" --series {shell_word(pattern)}")]
    return out + [""]


def _short(r: dict, status: str, s: Style) -> str:
    when = {"open": f"open since {s.text(r['opened_run'])} ({r['age_runs']} run{'' if r['age_runs'] == 1 else 's'})",
            "fixed": f"opened {s.text(r['opened_run'])}, fixed in this run",
            "accepted": f"opened {s.text(r['opened_run'])}, accepted by {s.text(r['accepted_by'] or '?')}"
                        + (f": {s.text(r['accepted_note'])}" if r["accepted_note"] else ""),
            "improvement": "opened in this run"}[status]
    if status == "open" and r.get("worse_again"):
        when += f"; worse again in this run: {s.text(worse_again_line(r['worse_again']))}"
    return f"- {s.code(r['incident_id'])} {s.text(r['headline'])} — {when}"
