"""The night's summary in Markdown, ready for an issue, a pull-request comment or the report
file (``night_markdown``); the same summary for chat and e-mail notifications (``chat_style``:
every value from outside a code span, headings bold lines), and as plain text for targets
that show text only (``text_style``: webhooks, SMS, Discord; links written out after their
label). A notification's style is made for its target's service: no name from a dump pings
anyone there (``transforms.escape.chat_text``, ``chat_code``).

One story, in the order a person reads it: the counts ("2 new, 1 still open, 1 fixed,
0 improvements, 0 lost"), then each new regression or failure with its headline, what
it stacks on, its commit range and cause, then what was fixed or accepted, what is
still open (with its age), the new improvements and the improvements lost. Every line
says its incident's kind; a revert says so on the lines of what it closed ("reverted")
and of what it reopened ("reopened in this run"). Input is the ``incidents_at(run)`` rows (``flows.verdict.incident_reader``),
so every count here is the count the CLI, the notifications and the site show. Names
come from dumps and paths: each reaches the text through ``transforms.escape``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import polars as pl

from transforms.escape import chat_code, chat_text, code, md_text, plain_text, shell_word, slug, url_path


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


def chat_style(service: str) -> Style:
    """The summary for a notification target that gets HTML (``service``: a key of
    ``transforms.escape.CHAT_MENTIONS``).

    It reaches chats through Apprise's HTML-to-Markdown conversion, which backslash-escapes "_"
    and "*" in text (Slack showed jit\\_train\\_step) and keeps headings that Slack shows as "###":
    names go in code spans, which every chat shows verbatim, with their mentions made inert
    (Apprise reads them even there), and headings become bold lines (an incident's own line,
    which starts with a code span, stays plain: "* `x`*" is not bold in Slack)."""
    named = lambda value: chat_code(value, service)  # noqa: E731
    return Style(named, named, MARKDOWN.link, MARKDOWN.bold, lambda level, s: f"**{s}**" if level < 3 else s)


def text_style(service: str) -> Style:
    """The summary for a notification target that gets plain text: ``TEXT`` with every name
    through ``chat_text`` for ``service`` (no mention pings; Markdown escaped where the service
    shows text as Markdown)."""
    named = lambda value: chat_text(value, service)  # noqa: E731
    return Style(named, named, TEXT.link, str, TEXT.heading)


CHAT = chat_style("chat")  # any chat: the style the site's tests and the docs show

# (key, title): the lists of the summary, in order. A key is a status, or "improvement"
# (improvement incidents new at the run) / "lost" (improvements lost there).
SECTIONS = (("new", "New"), ("fixed", "Fixed"), ("accepted", "Accepted"), ("open", "Still open"),
            ("improvement", "Improvements"), ("lost", "Improvements lost"))


def section_of(row: dict) -> str | None:
    """The list an ``incidents_at`` row goes to (None: an improvement still in effect, listed nowhere)."""
    improvement = row["kind"] == "improvement"
    if row["status"] == "new":
        return "improvement" if improvement else "new"
    if row["status"] == "open":
        return None if improvement else "open"
    return row["status"]  # fixed, accepted, lost


def counts(at: pl.DataFrame | None) -> dict[str, int]:
    """new, open (regressions and failures: opened in the run; earlier and still open), fixed,
    accepted, improvements (new improvement incidents), lost (improvements lost): at one run.
    The same counts as the view run_verdicts."""
    out = {key: 0 for key, _ in SECTIONS}
    for row in ([] if at is None else at.select("status", "kind").to_dicts()):
        key = section_of(row)
        if key is not None:
            out[key] += 1
    return {"new": out["new"], "open": out["open"], "fixed": out["fixed"], "accepted": out["accepted"],
            "improvements": out["improvement"], "lost": out["lost"]}


def ordered(at: pl.DataFrame) -> list[dict]:
    """``at``'s rows in the order the summary and the site list them: by impact."""
    return at.sort("impact", "incident_id", descending=[True, False]).to_dicts()


def counts_line(c: dict[str, int], style: Style = MARKDOWN) -> str:
    return (f"{style.bold(str(c['new']) + ' new')}, {c['open']} still open, {c['fixed']} fixed, "
            f"{c['improvements']} improvement{'s' if c['improvements'] != 1 else ''}, {c['lost']} lost"
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


def site_page(site_url: str | None, *parts: str) -> str | None:
    """The URL of a page of the published site (``[site] url``: ``runs/<run>.html``,
    ``incidents/<id>.html``; each part a slug), or None without one."""
    return site_url.rstrip("/") + "/" + str(url_path(*parts)).lstrip("/") if site_url else None


def _incident(r: dict, s: Style, site_url: str | None) -> str:
    """An incident's id, a link to its page when the site's URL is known."""
    page = site_page(site_url, "incidents", f"{slug(r['incident_id'])}.html")
    return s.link(s.code(r["incident_id"]), page) if page else s.code(r["incident_id"])


def night_markdown(run_id: str | None, commit: str | None, at: pl.DataFrame | None, *,
                   commit_url: str | None = None, compare_url: str | None = None, site_url: str | None = None,
                   sections: tuple[str, ...] = tuple(s for s, _ in SECTIONS), style: Style = MARKDOWN) -> str:
    """The summary of ``run_id`` from its ``incidents_at`` rows (``sections``: which
    lists to write; the counts line always covers them all). With ``site_url`` (``[site] url``)
    the run and each incident link to their pages."""
    s = style
    if run_id is None:
        return f"{s.heading(1, 'Dumpscope')}\n\nNo runs yet.\n"
    c = counts(at)
    run_page = site_page(site_url, "runs", f"{slug(run_id)}.html")
    run = s.link(s.text(run_id), run_page) if run_page else s.text(run_id)
    lines = [s.heading(1, f"Dumpscope: run {run} (commit {commit_link(commit, commit_url, s)})"), "",
             "Last night: " + counts_line(c, s) + ".", ""]
    rows = ordered(at)
    for key, title in SECTIONS:
        chosen = [r for r in rows if section_of(r) == key and key in sections]
        if not chosen:
            continue
        lines += [s.heading(2, title), ""]
        for r in chosen:
            lines += _new(r, commit_url, compare_url, s, site_url) if key == "new" else [_short(r, key, s, site_url, run_id)]
        lines.append("")
    if not rows:
        lines += ["Nothing changed: no incident is open.", ""]
    return "\n".join(lines)


def night_text(run_id: str | None, commit: str | None, at: pl.DataFrame | None, **kwargs) -> str:
    """``night_markdown`` as plain text."""
    return night_markdown(run_id, commit, at, **kwargs, style=TEXT)


def _new(r: dict, commit_url: str | None, compare_url: str | None, s: Style, site_url: str | None = None) -> list[str]:
    out = [s.heading(3, f"{s.text(r['job'])} / {s.text(r['program'])} · {r['kind']} · {_incident(r, s, site_url)}"), "",
           s.text(r["headline"]), ""]
    if r.get("stacked_on"):
        out += ["On top of " + ", ".join(s.code(i) for i in r["stacked_on"])
                + ": the figures stepped again while it was open; a fix of this one returns to its level.", ""]
    out += [f"Commits {commit_range(r, commit_url, compare_url, s)}, runs {s.text(r['last_good_run'] or '?')} → "
            f"{s.text(r['opened_run'])}."]
    if r["cause"]:
        out += ["", "Cause:", ""] + [f"- {s.text(line)}" for line in r["cause"].splitlines()]
    if r["last_good_run"]:
        out += ["", s.code(diff_command(r))]
    return out + [""]


def diff_command(r: dict) -> str:
    """The ``dumpscope diff`` that shows an incident's change, each name one shell word (a name
    from a dump pastes as itself, never as shell syntax)."""
    pattern = f"{r['job']}/{r['program']}/*"
    return ("dumpscope diff " + " ".join(shell_word(x) for x in (r["last_good_run"], r["opened_run"]))
            + f" --series {shell_word(pattern)}")


def night_brief(run_id: str | None, commit: str | None, at: pl.DataFrame | None, *, limit: int = 5,
                site_url: str | None = None) -> list[str]:
    """The summary for a person at a terminal, in plain text and a few lines: the counts on one
    line, then each new regression or failure (the first ``limit``, by impact) on one line with
    its first line of cause and its ``dumpscope diff``; the rest is a command away
    (``dumpscope incidents``). With ``site_url`` (``[site] url``) the run's page and each
    incident's follow them. Every name through ``plain_text``: no markup, no entity, control
    characters shown as symbols."""
    s = TEXT
    if run_id is None:
        return ["No runs yet: the bucket held no run."]
    c = counts(at)
    lines = [f"Last night ({s.text(run_id)}, commit {s.text(commit or '?')}): {counts_line(c, s)}."]
    if site_url:
        lines.append(f"  page: {site_page(site_url, 'runs', f'{slug(run_id)}.html')}")
    rows = ordered(at)
    new = [r for r in rows if section_of(r) == "new"]
    # A revert is news even though nothing opens: what it reopened, on one line each.
    for r in rows:
        if run_id in (r.get("reopened_runs") or []):
            lines += ["", f"{s.code(r['incident_id'])} {r['kind']} (open since {s.text(r['opened_run'])})"
                          f"{reverted_text(r, run_id, s)}: {s.text(r['headline'])}"]
            if site_url:
                lines.append(f"  page: {site_page(site_url, 'incidents', slug(r['incident_id']) + '.html')}")
    for r in new[:limit]:
        lines += ["", f"{s.code(r['incident_id'])} {r['kind']}: {s.text(r['headline'])}"]
        cause = r["cause"].splitlines() if r["cause"] else []
        if cause:
            lines.append(f"  cause: {s.text(cause[0])}" + (f" (and more: dumpscope incidents {s.code(r['incident_id'])})"
                                                            if len(cause) > 1 else ""))
        if r["last_good_run"]:
            lines.append(f"  {s.code(diff_command(r))}")
        if site_url:
            lines.append(f"  page: {site_page(site_url, 'incidents', slug(r['incident_id']) + '.html')}")
    if len(new) > limit:
        lines += ["", f"… and {len(new) - limit} more new: dumpscope incidents --status new"]
    return lines


def reverted_text(r: dict, run_id: str | None, style: Style = TEXT) -> str:
    """What a revert did to an incident at ``run_id`` (``incidents_at`` row), as the end of its
    line: ", reopened in this run: ..." or ": reverted ..."; empty when no revert touched it there."""
    reopened, after = r.get("reopened_runs") or [], r.get("reopened_after") or []
    if run_id is not None and run_id in reopened:
        closed = after[reopened.index(run_id)]
        return (f", reopened in this run: the change that {'lost' if r['kind'] == 'improvement' else 'fixed'} it "
                f"in {style.text(closed)} was reverted")
    if r.get("reverted") and r.get("closed_run") == run_id:
        return ": reverted (its figures are back where they stood before it opened)"
    return ""


def _short(r: dict, key: str, s: Style, site_url: str | None = None, run_id: str | None = None) -> str:
    age = f"{r['age_runs']} run{'' if r['age_runs'] == 1 else 's'}"
    when = {"open": f"open since {s.text(r['opened_run'])} ({age})",
            "fixed": f"opened {s.text(r['opened_run'])}, fixed in this run",
            "accepted": f"opened {s.text(r['opened_run'])}, accepted by {s.text(r['accepted_by'] or '?')}"
                        + (f": {s.text(r['accepted_note'])}" if r["accepted_note"] else ""),
            "improvement": "opened in this run",
            "lost": f"opened {s.text(r['opened_run'])}, lost in this run"}[key]
    return f"- {_incident(r, s, site_url)} {r['kind']}: {s.text(r['headline'])} — {when}{reverted_text(r, run_id, s)}"
