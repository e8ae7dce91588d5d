"""What ``dumpscope check`` found, and how it is written: text, Markdown (a pull-request comment) or JSON.

``CheckResult`` holds the answer of ``flows.commands.check.check_dir``: the incidents the candidate
directory would open (regressions and failures; improvements apart), the open ones it
would fix, the improvements it would lose, the closed ones a revert would reopen, its new
programs, its damaged dumps, what was wrong with its run.json and what the nightly's listing
leaves out of it. ``changes`` says each as a plain object, from the incidents the rule found
over history + candidate: its steps, the top lines of its cause (the structural diff of the
candidate against the reference run) and their evidence (dump paths and lines). Pure: names
come from dumps and paths, and reach the text through ``transforms.escape`` (terminal text:
control characters made visible).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import polars as pl

from transforms.escape import code, md_text, plain_text, slug, url_path
from transforms.trends import incident_rule
from transforms.trends.headlines import step_text
from transforms.units import human_delta, human_value

FORMATS = ("text", "markdown", "json")
EVIDENCE_SHOWN = 5  # evidence lines per incident in text and Markdown (JSON has them all)
NOT_READ = "Not read (the nightly leaves these out of a run)"


@dataclass
class CheckResult:
    against: str  # the reference run
    against_commit: str | None
    candidate_commit: str | None
    dumps: int = 0  # dump files read in DIR (run.json and unknown files included)
    opened: list[dict] = field(default_factory=list)  # regressions and failures the candidate would open
    improvements: list[dict] = field(default_factory=list)  # improvements it would open
    fixed: list[dict] = field(default_factory=list)  # open regressions and failures it would fix
    lost: list[dict] = field(default_factory=list)  # improvements in effect that it would lose
    reopened: list[dict] = field(default_factory=list)  # closed incidents a revert would reopen (not new: no --fail-on new)
    new_programs: list[dict] = field(default_factory=list)  # job, program, series
    damaged: list[dict] = field(default_factory=list)  # path, kind, status, error
    run_errors: list[str] = field(default_factory=list)  # what was wrong with DIR/run.json
    not_read: list[str] = field(default_factory=list)  # what the nightly's listing leaves out, one line per reason
    site_url: str | None = None  # [site] url: incident and run pages become links

    @property
    def failing(self) -> list[dict]:
        """What ``--fail-on new`` fails on: the regressions and failures it would open."""
        return self.opened


def changes(incidents: pl.DataFrame, steps: pl.DataFrame, diffs: pl.DataFrame, run_id: str) -> dict[str, list[dict]]:
    """What the candidate run ``run_id`` does to the incidents of the walk over history +
    candidate (``steps`` theirs; ``diffs``: the rows of what it opens): the ``CheckResult``
    fields ``opened`` (regressions and failures), ``improvements``, ``fixed``, ``lost`` and
    ``reopened`` (the same incidents again: a revert undid the change that closed them)."""
    opened = incidents.filter(pl.col("opened_run") == run_id)
    closed_here = (pl.col("closed_run") == run_id) & (pl.col("opened_run") != run_id)
    return {
        "opened": _described(opened.filter(pl.col("kind") != "improvement"), steps, diffs, change="opens"),
        "improvements": _described(opened.filter(pl.col("kind") == "improvement"), steps, diffs, change="opens"),
        "fixed": _described(incidents.filter(closed_here & (pl.col("closed_how") == "fixed")), steps, diffs, change="fixes"),
        "lost": _described(incidents.filter(closed_here & (pl.col("closed_how") == "lost")), steps, diffs, change="loses"),
        "reopened": _described(incidents.filter(pl.col("reopened_runs").list.contains(run_id)),
                               steps.filter(pl.col("reopened_run") == run_id), diffs, change="reopens"),
    }


def _described(incidents: pl.DataFrame, steps: pl.DataFrame, diffs: pl.DataFrame, *, change: str) -> list[dict]:
    """Incidents as plain objects, each with its steps (metric, before, after), and for those the
    candidate opens, its cause lines and their evidence."""
    out = []
    opened = change == "opens"
    for inc in incidents.sort("impact", "incident_id", descending=[True, False]).iter_rows(named=True):
        own = steps.filter(pl.col("incident_id") == inc["incident_id"]).sort("impact", "metric", "series",
                                                                            descending=[True, False, False])
        # Opened: from the level it stepped from to the candidate's value; closed: from the value
        # it opened at to the candidate's.
        shown = [_step(s, s["baseline"], s["value"]) if opened else _step(s, s["value"], s["latest_value"])
                 for s in own.iter_rows(named=True)]
        cause, evidence_rows = [], []
        if opened:
            mine = diffs.join(own.select("series").unique(), on="series", how="semi").with_columns(
                pl.lit(inc["incident_id"]).alias("incident_id"))
            cause = (incident_rule.causes(pl.DataFrame([inc]).select("incident_id"), own, mine)[0] or "").splitlines()
            evidence_rows = mine.sort("series", "rank").select(
                "series", "description", "before_path", "lines_before", "after_path", "lines_after").to_dicts()
        out.append({
            # An opened incident's id would name the candidate's run, which no night will have: none.
            "incident_id": None if opened else inc["incident_id"], "change": change, "job": inc["job"],
            "program": inc["program"], "kind": inc["kind"], "headline": inc["headline"], "metrics": inc["metrics"],
            "last_good_run": inc["last_good_run"], "stacked_on": inc["stacked_on"] or [],
            "steps": shown, "cause": cause, "evidence": evidence_rows,
        })
    return out


def _step(s: dict, before: float | None, after: float | None) -> dict:
    """One ``incident_steps`` row as the output lists it, with the figures this entry shows."""
    change = None if before is None or after is None else after - before
    return {"series": s["series"], "dump_kind": s["dump_kind"], "stage": s["stage"], "metric": s["metric"],
            "step": s["step"], "before": _number(before), "after": _number(after), "change": _number(change),
            "detail": s["detail"]}


def _number(value: float | None) -> float | int | None:
    """A figure as JSON carries it: a whole number as an integer, one that is not finite as null."""
    if value is None or not math.isfinite(value):
        return None
    return int(value) if float(value).is_integer() else value


def render(result: CheckResult, directory: str, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(result.opened + result.improvements + result.fixed + result.lost + result.reopened + [
            {"incident_id": None, "change": "new_program", "job": p["job"], "program": p["program"], "kind": "new_program",
             "headline": f"{p['job']} / {p['program']}: new program, not in the warehouse", "metrics": [],
             "series": p["series"], "steps": [], "cause": [], "evidence": []} for p in result.new_programs],
            ensure_ascii=False, default=str)
    return markdown(result, directory) if fmt == "markdown" else text(result, directory)


def counts(result: CheckResult) -> tuple[str, str]:
    """("2 new incidents: 1 regression, 1 failure", "0 fixed; 1 improvement, 0 lost; 0 new programs, 1 damaged dump")."""
    kinds = [r["kind"] for r in result.opened]
    n = len(result.opened)
    head = f"{n} new incident{'' if n == 1 else 's'}" + (
        f": {_n(kinds.count('regression'), 'regression')}, {_n(kinds.count('failure'), 'failure')}" if n else "")
    rest = (f"{len(result.fixed)} fixed; {_n(len(result.improvements), 'improvement')}, {len(result.lost)} lost; "
            + (f"{len(result.reopened)} reopened by a revert; " if result.reopened else "")
            + f"{_n(len(result.new_programs), 'new program')}, {_n(len(result.damaged), 'damaged dump')}")
    return head, rest


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


SECTIONS = (("opened", "Would open"), ("fixed", "Would fix"), ("improvements", "Would improve"), ("lost", "Would lose"),
            ("reopened", "Would reopen (a revert: the change that closed them is undone)"))


def step_line(s: dict) -> str:
    """One step as a person reads it: a figure's move (its before and after in this check), or
    what happened to the dump (its error first)."""
    if s["metric"].startswith("dump.") or s["before"] is None or s["after"] is None:
        return step_text({**s, "baseline": s["before"], "value": s["after"]})
    m = s["metric"]
    return f"{m} {human_value(m, s['before'])} → {human_value(m, s['after'])} ({human_delta(m, s['change'])})"


def _where(s: dict) -> str:
    return " ".join(p for p in (s.get("dump_kind"), s.get("stage")) if p)


def _evidence_line(e: dict) -> str:
    sides = [f"{p}:{lines}" if lines else p for p, lines in ((e["before_path"], e["lines_before"]),
                                                             (e["after_path"], e["lines_after"])) if p]
    return f"{e['description']} — {' / '.join(sides)}" if sides else e["description"]


def text(result: CheckResult, directory: str) -> str:
    head, rest = counts(result)
    lines = [plain_text(f"dumpscope check {directory} against run {result.against}"
                        f" (commit {result.against_commit or '?'}): {head} ({rest})")]
    for key, title in SECTIONS:
        rows = getattr(result, key)
        if rows:
            lines += ["", f"{title}:"]
        for r in rows:
            on_top = f", on top of {', '.join(r['stacked_on'])}" if r.get("stacked_on") else ""
            lines.append(plain_text(f"  {r['kind']:<11} {r['job']} / {r['program']}"
                                    + (f" ({r['incident_id']})" if r["incident_id"] else "") + on_top))
            for s in r["steps"]:
                lines.append(plain_text(f"      {step_line(s)}" + (f"  [{_where(s)}]" if _where(s) else "")))
            for c in r.get("cause") or []:
                lines.append(plain_text(f"      cause: {c}"))
            for e in (r.get("evidence") or [])[:EVIDENCE_SHOWN]:
                lines.append(plain_text(f"        {_evidence_line(e)}"))
    if result.new_programs:
        lines += ["", "New programs (not in the warehouse, no baseline):"]
        lines += [plain_text(f"  {p['job']} / {p['program']}: {', '.join(p['series'])}") for p in result.new_programs]
    if result.damaged:
        lines += ["", "Damaged dumps:"]
        lines += [plain_text(f"  {d['status']:<11} {e}") for d in result.damaged for e in d["error"].split("\n")]
    if result.run_errors:
        lines += ["", "run.json errors (the valid fields were kept):"] + [plain_text(f"  {e}") for e in result.run_errors]
    if result.not_read:
        lines += ["", NOT_READ + ":"] + [plain_text(f"  {e}") for e in result.not_read]
    return "\n".join(lines)


def _page(result: CheckResult, *parts: str) -> str | None:
    """A page of the published site (``[site] url``), or None."""
    if not result.site_url:
        return None
    return result.site_url + str(url_path(*parts))


def markdown(result: CheckResult, directory: str) -> str:
    """A pull-request comment: the counts first, each incident a line with its details folded;
    every name through ``transforms.escape``."""
    head, rest = counts(result)
    run_page = _page(result, "runs", f"{slug(result.against)}.html")
    against = f"[{code(result.against)}]({run_page})" if run_page else code(result.against)
    lines = [f"### Dumpscope check against run {against}"
             f" (commit {code(result.against_commit) if result.against_commit else '?'})", "",
             f"**{md_text(head)}**; {md_text(rest)}"]
    for key, title in SECTIONS:
        rows = getattr(result, key)
        if not rows:
            continue
        lines += ["", f"#### {title}", ""]
        for r in rows:
            lines += _markdown_incident(result, r)
    if result.new_programs:
        lines += ["", "#### New programs", "", "Not in the warehouse: no baseline, nothing to compare.", ""]
        lines += [f"- {md_text(p['job'])} / {md_text(p['program'])}: " + ", ".join(code(s) for s in p["series"])
                  for p in result.new_programs]
    if result.damaged:
        lines += ["", "#### Damaged dumps", ""]
        lines += [f"- {md_text(d['status'])}: {md_text(e)}" for d in result.damaged for e in d["error"].split("\n")]
    if result.run_errors:
        lines += ["", "#### run.json errors", ""] + [f"- {md_text(e)}" for e in result.run_errors]
    if result.not_read:
        lines += ["", f"#### {NOT_READ}", ""] + [f"- {md_text(e)}" for e in result.not_read]
    return "\n".join(lines)


def _markdown_incident(result: CheckResult, r: dict) -> list[str]:
    iid = r["incident_id"]
    page = _page(result, "incidents", f"{slug(iid)}.html") if iid else None
    name = (f" ([{code(iid)}]({page}))" if page else f" ({code(iid)})") if iid else ""
    on_top = ""
    if r.get("stacked_on"):
        links = [f"[{code(i)}]({p})" if (p := _page(result, "incidents", f"{slug(i)}.html")) else code(i)
                 for i in r["stacked_on"]]
        on_top = " — on top of " + ", ".join(links)
    # The program leads to the page of its series that stepped most (an incident the change
    # would open has no page yet); each step to its series' page when the steps are of several.
    pages = [_page(result, "series", f"{slug(s['series'])}.html") if s.get("series") else None for s in r["steps"]]
    program = md_text(r["program"])
    program = f"[{program}]({pages[0]})" if pages and pages[0] else program
    several = len(set(filter(None, pages))) > 1
    out = [f"- **{md_text(r['kind'])}** {md_text(r['job'])} / {program}{name}: "
           f"{md_text(r['headline'].removeprefix(r['job'] + ' / ' + r['program'] + ': '))}{on_top}"]
    details = [f"  - {md_text(step_line(s))}" + (f" ({md_text(_where(s))})" if _where(s) else "")
               + (f" · [series]({page})" if several and page else "") for s, page in zip(r["steps"], pages)]
    if r.get("cause"):
        details += ["", "  Cause:", ""] + [f"  - {md_text(c)}" for c in r["cause"]]
    evidence = r.get("evidence") or []
    if evidence:
        details += ["", "  Evidence:", ""] + [f"  - {md_text(_evidence_line(e))}" for e in evidence[:EVIDENCE_SHOWN]]
        if len(evidence) > EVIDENCE_SHOWN:
            details.append(f"  - … and {len(evidence) - EVIDENCE_SHOWN} more (`--format json` lists them)")
    # A folded block: GitHub renders Markdown inside <details> after a blank line.
    return out + ["", "  <details><summary>steps, cause and evidence</summary>", "", *details, "", "  </details>", ""]
