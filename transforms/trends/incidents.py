"""Incidents: one change of one program, opened in the run where its figures stepped.

Compiler figures are deterministic, so a change is a step, not drift. Each (series,
metric) is walked in run order with a *step baseline*:

- the baseline is the value before the step, held until the step is closed;
- a value that differs from the baseline by more than the metric's floor (below) opens
  a step: ``regression`` when it is worse (the rule's direction), ``improvement`` when
  better; metrics without a direction never open one;
- an open step closes ``fixed`` in the run where the value is back within the floor of
  its baseline, or ``accepted`` in the run someone accepted it at, the run it opened in
  included (then that run's value is the new baseline); a further move while open updates it, it opens nothing;
- below the floor nothing happens and the baseline stays: a slow creep opens a step in
  the run where it passes the floor, against the value it crept from.

Floors by family (``Floors``, set in the settings file's ``[floors]``): bytes at least
``bytes`` (1 KiB) and the rule's relative threshold of the baseline; counts at least 1
(and the rule's ``rel`` of the baseline: kernel launches +2 %); noisy floats (ONNX
accuracy) their rule's ``noise`` band, and a regression only past its ``limit``.

Only figures of dumps that parsed ``ok`` are walked: a ``partial`` or ``failed`` dump
opens a ``failure`` step about the dump instead (closed ``fixed`` when the dump parses
again), and so does a series that vanished from a job that still ran, or an ONNX step
that stopped passing (``onnx.step.*`` down, ``onnx.errors`` up).

Steps of one program (job + program, across dump kinds and stages) opened in the same
run are one incident; its kind is ``failure`` if any step is one, else ``regression``
if any step is worse, else ``improvement``. It is open while any step is; it closes in
the run its last step closes, ``accepted`` if any step was accepted, else ``fixed``.
Incidents are ranked by ``impact``: bytes against the program's memory, then counts
with collectives and kernel launches first (``_WEIGHTS``), failures above all; never by
percentage alone.

Pure: frames in, frames out. ``flows.aggregate`` feeds it and writes ``incidents`` and
``incident_steps``; the cause (structural diff) is attached there from ``diffs``.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from dataclasses import dataclass
from typing import Any, Iterable

import polars as pl

from transforms.trends.rules import ZERO_WHEN_ABSENT, Settings
from transforms.units import human_delta, human_value, is_bytes_metric

KINDS = ("failure", "regression", "improvement")
CLOSED_HOW = ("fixed", "accepted")

STEP_SCHEMA = pl.Schema({
    "incident_id": pl.String, "job": pl.String, "program": pl.String, "series": pl.String,
    "dump_kind": pl.String, "stage": pl.String, "metric": pl.String, "step": pl.String,
    "opened_run": pl.String, "last_good_run": pl.String, "closed_run": pl.String, "closed_how": pl.String,
    "baseline": pl.Float64, "value": pl.Float64, "latest_value": pl.Float64, "change": pl.Float64,
    "impact": pl.Float64, "detail": pl.String,
    "worse_runs": pl.List(pl.String), "worse_from": pl.List(pl.Float64), "worse_to": pl.List(pl.Float64),
})
STEP_DOCS = {
    "": "The per-metric steps behind each incident (drill-down): one row per series and metric that stepped away from its baseline, or per dump that failed, in the run the incident opened.",
    "incident_id": "The incident the step belongs to (incidents.incident_id).",
    "job": "Job.",
    "program": "Program name normalized across runs.",
    "series": "Series id <job>/<program>/<kind>[/<stage>].",
    "dump_kind": "Dump format the figure comes from.",
    "stage": "Compiler stage (NULL when the format has none).",
    "metric": "Metric that stepped (docs/metrics.md); for a failure about a dump: dump.status or dump.vanished.",
    "step": "regression (worse past the floor), improvement (better past the floor) or failure.",
    "opened_run": "Run where the value first stepped away from the baseline.",
    "last_good_run": "The series' run before that (the baseline's last run).",
    "closed_run": "Run where the step was fixed (back at the baseline) or accepted; NULL while open.",
    "closed_how": "fixed or accepted; NULL while open.",
    "baseline": "Value before the step, held while it is open.",
    "value": "Value in the opening run.",
    "latest_value": "Value in the last run that had one, up to the closing run.",
    "change": "value - baseline.",
    "impact": "How much the step matters (see incidents.impact).",
    "detail": "For a failure: the dump's path and error; else NULL.",
    "worse_runs": "Runs after the opening one where the figure, still stepped, moved further the worse way past its floor (the step is updated, no incident opens): incidents_at(run).worse_again.",
    "worse_from": "The value before each of those moves (the series' previous run), in the order of worse_runs.",
    "worse_to": "The value after each of those moves, in the order of worse_runs.",
}

INCIDENT_SCHEMA = pl.Schema({
    "incident_id": pl.String, "job": pl.String, "program": pl.String, "kind": pl.String,
    "opened_run": pl.String, "opened_at": pl.Datetime("us"), "last_good_run": pl.String,
    "last_good_commit": pl.String, "first_bad_commit": pl.String, "closed_run": pl.String, "closed_how": pl.String,
    "headline": pl.String, "cause": pl.String, "metrics": pl.List(pl.String), "series": pl.List(pl.String),
    "impact": pl.Float64, "accepted_by": pl.String, "accepted_note": pl.String,
})
INCIDENT_DOCS = {
    "": "One row per incident: one change of one program, opened in the run where its figures stepped away from their baseline, with its cause and lifecycle. New in run R: opened_run = R; open at R: opened_run <= R and (closed_run IS NULL or closed_run > R) in run order; fixed at R: closed_run = R and closed_how = 'fixed'.",
    "incident_id": "Stable id (I- and 8 hex digits of the job, program and opening run): what `dumpscope accept` takes.",
    "job": "Job.",
    "program": "Program name normalized across runs.",
    "kind": "failure (a dump that stopped parsing or vanished, an ONNX step that stopped passing), regression (a figure got worse past its floor) or improvement (better past its floor, nothing worse).",
    "opened_run": "Run where the figures stepped.",
    "opened_at": "Start time of that run.",
    "last_good_run": "The program's run before that: the baseline's last run (the diff is last_good_run → opened_run).",
    "last_good_commit": "Commit of last_good_run (run.json), the start of the commit range.",
    "first_bad_commit": "Commit of opened_run, the end of the commit range.",
    "closed_run": "Run where the incident closed (every step fixed or accepted); NULL while open.",
    "closed_how": "fixed (the figures came back to the baseline) or accepted (someone declared the change intended); NULL while open.",
    "headline": "One line a person reads: program and the steps that matter most, with values.",
    "cause": "The top structural changes between last_good_run and opened_run (fusions, collectives, allocations with source lines, Inductor groups, ONNX steps), most significant first, one per line.",
    "metrics": "Metrics that stepped (every dump kind and stage of the program).",
    "series": "Series whose figures stepped.",
    "impact": "Ranking: failures above all, then bytes against the program's memory and counts weighted by family (collectives, kernel launches first); never a percentage alone.",
    "accepted_by": "Who accepted it (NULL unless accepted).",
    "accepted_note": "Why it was accepted (the note given to dumpscope accept).",
}

# Impact weights by metric family: what a step of that family is worth per unit of its
# relative size (bytes: against the program's memory; counts: against the baseline, at
# least 1). Failures rank above any figure.
_FAILURE_IMPACT = 100.0
_WEIGHTS = (
    (re.compile(r"^kernel\.collective"), 8.0),
    (re.compile(r"^kernel\.(launches|fallback)"), 4.0),
    (re.compile(r"^kernel\."), 2.0),
    (re.compile(r"^fusion\."), 1.0),
)
_FAILURE_METRICS = re.compile(r"^onnx\.(step\.|errors$)")
_ZERO_WHEN_ABSENT = re.compile(ZERO_WHEN_ABSENT)


@dataclass(frozen=True, slots=True)
class Floors:
    """The smallest steps that open an incident, per family (settings ``[floors]``)."""

    bytes: float = 1024.0
    count: float = 1.0


@dataclass(slots=True)
class _Step:
    series: str
    metric: str
    step: str
    opened_seq: int
    last_good_seq: int | None
    baseline: float | None
    value: float | None
    latest: float | None
    closed_seq: int | None = None
    closed_how: str | None = None
    detail: str | None = None
    accept: int | None = None  # index in the accepts list
    worse: list[tuple[int, float, float]] | None = None  # (run_seq, from, to): further moves the worse way


def incident_id(job: str, program: str, opened_run: str) -> str:
    return "I-" + hashlib.sha1(f"{job}\x00{program}\x00{opened_run}".encode()).hexdigest()[:8]


def step_test(metric: str, rule, floors: Floors):
    """``is_step(value, baseline)`` for one metric: whether ``value`` is a step away from
    ``baseline`` (past the noise, the family floor and the rule's threshold; a noisy
    figure regresses only past its limit). Built once per metric: it runs on every change."""
    noise, direction, limit = rule.noise, rule.direction, rule.limit
    rel = rule.rel or 0.0
    fixed = max(noise, rule.abs or 0.0,
                floors.bytes if is_bytes_metric(metric) else 0.0 if metric.startswith("onnx.max_") else floors.count)

    def is_step(value: float, base: float) -> bool:
        diff = value - base
        size = diff if diff >= 0 else -diff
        if size <= noise or size < fixed or size < rel * (base if base >= 0 else -base):
            return False
        if limit is not None and diff * direction > 0:
            return value * direction > limit * direction
        return True

    return is_step


def _accepted_at(accepts: list[dict], series: str, job: str, program: str, opened_run: str | None,
                 run_id: str, metric: str | None = None) -> int | None:
    """Index of the accept that closes a step of ``series`` (``metric``) at ``run_id``, if any."""
    for i, a in enumerate(accepts):
        if a["run_id"] != run_id or (a.get("metric") and metric and a["metric"] != metric):
            continue
        if a.get("incident_id") and opened_run is not None and a["incident_id"] == incident_id(job, program, opened_run):
            return i
        if a.get("series") and fnmatch.fnmatchcase(series, a["series"]):  # the accept log's pattern column
            return i
    return None


def walk_metric(rows: Iterable[tuple[int, float, int | None]], *, series: str, job: str, program: str, metric: str,
                rule, floors: Floors, run_ids: list[str], accepts: list[dict]) -> list[_Step]:
    """The steps of one (series, metric) from its (run_seq, value, previous run_seq) rows in
    run order. Rows equal to the one before may be left out (they change nothing), except
    at runs with an accept; the previous run_seq keeps the last good run exact."""
    out: list[_Step] = []
    base: float | None = None
    base_seq: int | None = None
    open_: _Step | None = None
    is_step = step_test(metric, rule, floors)
    for seq, value, prev_seq in rows:
        run_id = run_ids[seq]
        if prev_seq is not None:
            base_seq = prev_seq if open_ is None else base_seq
        if base is None:
            base, base_seq = value, seq
            continue
        if open_ is not None:
            opened_run = run_ids[open_.opened_seq]
            back = not is_step(value, open_.baseline)
            acc = _accepted_at(accepts, series, job, program, opened_run, run_id, metric)
            if back or acc is not None:
                open_.closed_seq, open_.closed_how = seq, "fixed" if back else "accepted"
                open_.accept = None if back else acc
                open_.latest = value
                open_, base, base_seq = None, value, seq
            else:
                # Still stepped. A further move the worse way past the floor updates the step
                # (it opens nothing new) and is kept: the night it happens must say so.
                if open_.step != "improvement" and open_.latest is not None and is_step(value, open_.latest) \
                        and (value - open_.latest) * rule.direction > 0:
                    if open_.worse is None:
                        open_.worse = []
                    open_.worse.append((seq, open_.latest, value))
                open_.latest = value
            continue
        if _accepted_at(accepts, series, job, program, None, run_id, metric) is not None:
            base, base_seq = value, seq  # accepted without a step: the baseline restarts here
            continue
        if rule.direction and is_step(value, base):
            worse = (value - base) * rule.direction > 0
            kind = "failure" if worse and _FAILURE_METRICS.match(metric) else "regression" if worse else "improvement"
            open_ = _Step(series, metric, kind, seq, base_seq, base, value, value)
            out.append(open_)
            acc = _accepted_at(accepts, series, job, program, run_id, run_id, metric)
            if acc is not None:  # accepted (by its id) in the run it opened in: closed there, its value the baseline
                open_.closed_seq, open_.closed_how, open_.accept = seq, "accepted", acc
                open_, base, base_seq = None, value, seq
        else:
            base_seq = seq  # the baseline's value stays; its last good run moves on
    return out


def _health_steps(health: pl.DataFrame, run_ids: list[str], accepts: list[dict]) -> list[tuple[str, str, _Step]]:
    """Failure steps about dumps: partial/failed after ok, and vanished series.

    ``health``: series, job, program, run_seq, status (worst of the series' dumps in the
    run, 'absent' where the series' job ran without it), detail."""
    out = []
    for (series, job, program), group in health.sort("run_seq").group_by(["series", "job", "program"], maintain_order=True):
        last_ok: int | None = None
        open_: _Step | None = None
        for seq, status, detail in group.select("run_seq", "status", "detail").iter_rows():
            if status == "ok":
                if open_ is not None:
                    open_.closed_seq, open_.closed_how = seq, "fixed"
                    open_ = None
                last_ok = seq
                continue
            if open_ is not None:
                acc = _accepted_at(accepts, series, job, program, run_ids[open_.opened_seq], run_ids[seq])
                if acc is not None:
                    open_.closed_seq, open_.closed_how, open_.accept = seq, "accepted", acc
                    open_, last_ok = None, None  # accepted: not ok, not reported again until it is ok once
                continue
            if last_ok is not None:
                metric = "dump.vanished" if status == "absent" else "dump.status"
                open_ = _Step(series, metric, "failure", seq, last_ok, None, None, None, detail=detail)
                out.append((job, program, open_))
                acc = _accepted_at(accepts, series, job, program, run_ids[seq], run_ids[seq])
                if acc is not None:  # accepted in the run it opened in
                    open_.closed_seq, open_.closed_how, open_.accept = seq, "accepted", acc
                    open_, last_ok = None, None
    return out


def compute(observations: pl.DataFrame, health: pl.DataFrame, order: pl.DataFrame, accepts: list[dict],
            settings: Settings, floors: Floors = Floors(), *, ok: pl.DataFrame | None = None,
            info: pl.DataFrame | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(incidents, incident_steps) without causes (``flows.aggregate`` adds them from ``diffs``).

    ``observations``: series, job, program, kind, stage, metric, run_id, value — figures
    of dumps that parsed ok only. ``health``: series, job, program, (kind, stage,) run_id,
    status (ok, partial, failed, absent), detail. ``order``: run_id, run_seq, started_at, commit.
    ``accepts``: rows of the accept log: run_id and incident_id or series (a pattern), plus metric, accepted_by, note.
    ``ok`` (series, run_id): when given, only the observations of these series and runs
    are walked (a year of observations is millions of rows: they are narrowed to the
    four columns the walk needs before anything is copied). ``info`` (series, job, program,
    kind, stage, one row per series): when given, ``observations`` needs only series,
    metric, run_id and value.
    """
    run_ids = order.sort("run_seq").get_column("run_id").to_list()
    seq_of = order.select("run_id", "run_seq")
    seq = {r: i for i, r in enumerate(run_ids)}
    if info is None:
        info = observations.select("series", "job", "program", "kind", "stage").unique("series")
    program_bytes = _program_bytes(observations.select("series", "metric", "value"), info)
    obs = observations.select("series", "metric", "run_id", "value")
    # One join (on the run ids as they come, categoricals: no string per row for millions
    # of rows) both numbers the runs and keeps only the ``ok`` ones.
    seqs = order.select(pl.col("run_id").cast(observations.schema["run_id"]), "run_seq")
    if ok is not None:
        seqs = ok.select(pl.col("series").cast(observations.schema["series"]),
                         pl.col("run_id").cast(observations.schema["run_id"])).join(seqs, on="run_id")
    obs = obs.join(seqs, on=["series", "run_id"] if ok is not None else ["run_id"], how="inner")
    obs = _with_zero_counts(obs, health.join(seq_of, on="run_id"))
    # One sort (on the categoricals' codes: contiguous groups are all it needs); "the row
    # before" is a shift masked where the (series, metric) group changes.
    by_group = [pl.col("series").to_physical(), pl.col("metric").to_physical(), "run_seq"]
    obs = obs.with_columns(pl.col("series", "metric").cast(pl.Categorical)).sort(by_group)
    same = (pl.col("series") == pl.col("series").shift(1)) & (pl.col("metric") == pl.col("metric").shift(1))
    accept_seqs = [seq[a["run_id"]] for a in accepts if a["run_id"] in seq]
    obs = obs.with_columns(same.fill_null(False).alias("_same")).with_columns(
        pl.when("_same").then(pl.col("run_seq").shift(1)).alias("prev_seq"),
        (pl.col("_same") & (pl.col("value") != pl.col("value").shift(1))).alias("_moved"))
    # Only pairs whose value ever changes can step, and a value equal to the one before
    # changes no state (figures are deterministic): the first value, the change points and
    # runs with an accept reach the Python loop; most compiler figures never move.
    moving = obs.filter("_moved").select("series", "metric").unique()
    obs = (obs.join(moving, on=["series", "metric"], how="semi")
           .filter(~pl.col("_same") | pl.col("_moved") | pl.col("run_seq").is_in(accept_seqs))
           .sort(by_group)
           .join(info.select("series", "job", "program", "kind", "stage").with_columns(pl.col("series").cast(obs.schema["series"])),
                 on="series", how="left", maintain_order="left")
           .with_columns(pl.col("series", "metric", "job", "program", "kind", "stage").cast(pl.String)))
    # Every series' names, from the health rows (series whose figures never move included).
    meta = {r["series"]: r for r in health.select("series", "job", "program", "kind", "stage").unique("series")
            .iter_rows(named=True)} if "kind" in health.columns else {}
    meta |= {r["series"]: r for r in obs.select("series", "job", "program", "kind", "stage").unique("series")
             .iter_rows(named=True)}
    steps: list[tuple[str, str, _Step]] = []
    cols = [obs.get_column(c).to_list() for c in ("series", "metric", "run_seq", "value", "prev_seq")]
    start = 0
    for end in range(1, len(cols[0]) + 1):
        if end < len(cols[0]) and cols[0][end] == cols[0][start] and cols[1][end] == cols[1][start]:
            continue
        series, metric = cols[0][start], cols[1][start]
        m = meta[series]
        rows = zip(cols[2][start:end], cols[3][start:end], cols[4][start:end])
        for s in walk_metric(rows, series=series, job=m["job"], program=m["program"], metric=metric,
                             rule=settings.rule_for(series, metric), floors=floors, run_ids=run_ids, accepts=accepts):
            steps.append((m["job"], m["program"], s))
        start = end
    steps += _health_steps(health.join(seq_of, on="run_id"), run_ids, accepts)
    return _frames(steps, meta, order, accepts, program_bytes)


def _with_zero_counts(obs: pl.DataFrame, health: pl.DataFrame) -> pl.DataFrame:
    """Counts the parsers omit when zero (``rules.ZERO_WHEN_ABSENT``) are 0 in the runs
    where their series parsed ok without them: a first fallback kernel steps 0 → 1.
    ``obs`` may hold categoricals; only the (rare) pairs with fewer rows than their
    series has ok runs are looked at."""
    text = pl.col("series", "metric").cast(pl.String)
    ok = health.filter(pl.col("status") == "ok").select(pl.col("series").cast(pl.String), "run_seq").unique()
    per = obs.group_by("series", "metric").len("n").with_columns(text)
    short = (per.filter(pl.col("metric").str.contains(ZERO_WHEN_ABSENT))
             .join(ok.group_by("series").len("n_ok"), on="series").filter(pl.col("n") < pl.col("n_ok"))
             .select("series", "metric"))
    if short.is_empty():
        return obs
    some = obs.with_columns(text).join(short, on=["series", "metric"], how="semi")
    missing = ok.join(short, on="series").join(some, on=["series", "metric", "run_seq"], how="anti")
    filled = missing.with_columns(pl.lit(None).alias("run_id"), pl.lit(0.0).alias("value"))
    return pl.concat([obs, filled.select(obs.columns).cast(dict(obs.schema))])


def _program_bytes(obs: pl.DataFrame, info: pl.DataFrame) -> dict[tuple[str, str], float]:
    """Each program's memory (the largest byte figure it reports in any run): what byte
    steps are measured against. ``obs``: series, metric, value; ``info``: series, job, program."""
    per_series = obs.group_by("series", "metric").agg(pl.col("value").max())  # few rows, then strings
    mem = (per_series.join(info.select("series", "job", "program").with_columns(pl.col("series").cast(per_series.schema["series"])),
                           on="series")
           .with_columns(pl.col("job", "program", "metric").cast(pl.String))
           .filter(pl.col("metric").str.starts_with("memory.") & pl.col("metric").str.ends_with("_bytes"))
           .group_by("job", "program").agg(pl.col("value").max()))
    return {(j, p): float(v or 0) for j, p, v in mem.iter_rows()}


def impact(metric: str, step: str, change: float | None, baseline: float | None, program_bytes: float) -> float:
    if step == "failure":
        return _FAILURE_IMPACT
    change = abs(change or 0.0)
    if is_bytes_metric(metric):
        return 3.0 * change / max(program_bytes, 1.0)
    size = change / max(abs(baseline or 0.0), 1.0)
    for pattern, weight in _WEIGHTS:
        if pattern.match(metric):
            return weight * size
    return 0.5 * size


def _frames(steps: list[tuple[str, str, _Step]], meta: dict, order: pl.DataFrame, accepts: list[dict],
            program_bytes: dict) -> tuple[pl.DataFrame, pl.DataFrame]:
    runs = order.sort("run_seq")
    run_ids = runs.get_column("run_id").to_list()
    started = runs.get_column("started_at").to_list()
    commits = runs.get_column("commit").to_list()

    def rid(seq: int | None) -> str | None:
        return None if seq is None else run_ids[seq]

    step_rows, groups = [], {}
    for job, program, s in steps:
        iid = incident_id(job, program, run_ids[s.opened_seq])
        m = meta.get(s.series) or {}
        change = None if s.value is None or s.baseline is None else s.value - s.baseline
        score = impact(s.metric, s.step, change, s.baseline, program_bytes.get((job, program), 0.0))
        step_rows.append({
            "incident_id": iid, "job": job, "program": program, "series": s.series, "dump_kind": m.get("kind"),
            "stage": m.get("stage"), "metric": s.metric, "step": s.step, "opened_run": rid(s.opened_seq),
            "last_good_run": rid(s.last_good_seq), "closed_run": rid(s.closed_seq), "closed_how": s.closed_how,
            "baseline": s.baseline, "value": s.value, "latest_value": s.latest, "change": change, "impact": score,
            "detail": s.detail, "worse_runs": [run_ids[q] for q, _, _ in s.worse or ()],
            "worse_from": [a for _, a, _ in s.worse or ()], "worse_to": [b for _, _, b in s.worse or ()],
            "_seq": s.opened_seq, "_closed": s.closed_seq, "_accept": s.accept})
        groups.setdefault(iid, []).append(step_rows[-1])
    incidents = []
    for iid, rows in groups.items():
        rows.sort(key=lambda r: (-r["impact"], r["metric"], r["series"]))
        # One figure often stands in several files of one compile (HLO before/after, the
        # buffer assignment and the memory report): count and show each metric once.
        top = [r for i, r in enumerate(rows) if r["metric"] not in {q["metric"] for q in rows[:i]}]
        kinds = {r["step"] for r in rows}
        kind = "failure" if "failure" in kinds else "regression" if "regression" in kinds else "improvement"
        open_steps = [r for r in rows if r["_closed"] is None]
        closed = None if open_steps else max(r["_closed"] for r in rows)
        accepted = [r for r in rows if r["closed_how"] == "accepted"]
        how = None if closed is None else "accepted" if accepted else "fixed"
        acc = accepts[accepted[0]["_accept"]] if accepted and accepted[0]["_accept"] is not None else {}
        seq = rows[0]["_seq"]
        good = min((r["last_good_run"] for r in rows if r["last_good_run"]), default=None,
                   key=lambda r: run_ids.index(r))
        incidents.append({
            "incident_id": iid, "job": rows[0]["job"], "program": rows[0]["program"], "kind": kind,
            "opened_run": run_ids[seq], "opened_at": started[seq], "last_good_run": good,
            "last_good_commit": commits[run_ids.index(good)] if good else None, "first_bad_commit": commits[seq],
            "closed_run": rid(closed), "closed_how": how, "headline": headline(rows[0]["job"], rows[0]["program"], top),
            "cause": None, "metrics": sorted({r["metric"] for r in rows}), "series": sorted({r["series"] for r in rows}),
            "impact": sum(r["impact"] for r in top), "accepted_by": acc.get("accepted_by"),
            "accepted_note": acc.get("note")})
    step_frame = pl.DataFrame([{k: v for k, v in r.items() if not k.startswith("_")} for r in step_rows],
                              schema=STEP_SCHEMA)
    return in_order(pl.DataFrame(incidents, schema=INCIDENT_SCHEMA), step_frame)


def in_order(incidents: pl.DataFrame, steps: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The order ``compute`` gives its frames (also of frames computed in parts and concatenated)."""
    return (incidents.sort("opened_at", "impact", "incident_id", descending=[False, True, False], maintain_order=True),
            steps.sort("opened_run", "incident_id", "impact", "metric", "series", descending=[False, False, True, False, False],
                       maintain_order=True))


def worse_again_line(moves: list[dict[str, Any]], most: int = 2) -> str:
    """``memory.temp_bytes 132.3 KiB → 202.5 KiB (+70.2 KiB); +3 more``: an open incident's
    further moves in one run (``incidents_at(run).worse_again``: metric, value_before,
    value_after; most impact first), each metric once."""
    seen, parts = set(), []
    for m in moves:
        if m["metric"] not in seen:
            seen.add(m["metric"])
            parts.append(m)
    shown = [f"{m['metric']} {human_value(m['metric'], m['value_before'])} → {human_value(m['metric'], m['value_after'])}"
             f" ({human_delta(m['metric'], m['value_after'] - m['value_before'])})" for m in parts[:most]]
    more = len(parts) - len(shown)
    return "; ".join(shown) + (f"; +{more} more" if more > 0 else "")


def headline(job: str, program: str, rows: list[dict[str, Any]], most: int = 2) -> str:
    """``jax-pmap / jit__fun: memory.temp_bytes 104.7 KiB → 299.3 KiB (+194.6 KiB); +3 more``
    (``rows``: one per metric, most impact first)."""
    parts = []
    for r in rows[:most]:
        if r["step"] == "failure" and r["metric"].startswith("dump."):
            what = "vanished" if r["metric"] == "dump.vanished" else "stopped parsing"
            parts.append(f"{r['dump_kind']} dump {what}")
        else:
            parts.append(f"{r['metric']} {human_value(r['metric'], r['baseline'])} → {human_value(r['metric'], r['value'])}"
                         f" ({human_delta(r['metric'], r['change'])})")
    more = len(rows) - len(rows[:most])
    return f"{job} / {program}: " + "; ".join(parts) + (f"; +{more} more" if more > 0 else "")
