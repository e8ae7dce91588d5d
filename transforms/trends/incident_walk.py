"""Incidents: every step of a program's figures is its own incident (docs/trends.md).

Compiler figures are deterministic, so a change is a step, not drift. Each (series,
metric) is walked in run order with a *level* (the value the next step is measured
from) and a stack of open steps, each with its own *baseline* (the level before it):

1. Close: while the top step is no longer past its baseline the way it stepped, it
   closes: a regression ``fixed`` (back within its floor, or past it the good way), an
   improvement ``lost``. The level returns to its baseline. A revert to an older level
   so fixes every step stacked above it and leaves the older one open.
2. Open: a value past the floor from the level opens a step, stacked on the top one:
   a ``regression`` when worse (the rule's direction), an ``improvement`` when better,
   unless it goes against the open steps (a partial recovery of a regression, a partial
   loss of an improvement: only the step's latest value moves; it is not news). The
   level becomes the value.
3. Below the floor nothing happens and the level stays: a slow creep opens a step in
   the run where it passes the floor, against the level it crept from.
4. Revert: a run that closed steps and opened one (an overshoot) is undone when a later
   value is back within the floor of the level before it, while the step it opened is
   open: that step closes (``reverted``), the steps it closed reopen (a row each, from the
   revert's run: the same incident, its first opening and commit range), nothing opens.
   A plain fix opens no step: a figure back at its old level after one is a new step.

A failure figure (``onnx.step.*``, ``onnx.errors``, ``dynamo.failures``) starts from its
passing value (``healthy_value``), so a program failing the first night it is seen opens a
failure that night; ``dynamo.rank_divergence`` from 0, so ranks that differ the first night
a job is seen open a regression that night.

An accept at a run closes the accepted steps ``accepted`` there and makes the value
there the level. Floors by family (``Floors``, settings ``[floors]``): bytes at least
``bytes`` (1 KiB) and the rule's relative threshold; counts at least 1 (and the rule's
``rel``); noisy floats (ONNX accuracy) their rule's ``noise``, a regression only past
its ``limit``.

Only figures of dumps whose figures stand are walked (``ok``, or partial naming what its
damage cost: ``incident_rule.figures_stand``): a ``partial`` or ``failed`` dump, one that
lost figures the verdict reads (``damaged``: ``dump.lost``, its other figures walked), or a
series that vanished from a job that still ran, opens a ``failure`` step about the dump
(closed ``fixed`` when it parses again); an ONNX export step that stops passing
(``onnx.step.*`` down, ``onnx.errors`` up) is a failure too.

The steps of one program (job + program, across dump kinds and stages) opened in one
run form one regression incident (its regression and failure steps; kind ``failure`` if
any is one) and one improvement incident (its improvement steps). An incident is open
while any of its steps is; it closes in the run its last step closes: ``fixed`` /
``lost`` (``accepted`` if any step was accepted); a revert that reopens one of its steps
opens it again (``reopened_runs``, ``reopened_after``: its status at the run it had
closed in stays what it was). ``stacked_on`` names the incidents of
the steps directly below its own when it opened. Statuses at a run: ``new``, ``open``,
``fixed``, ``accepted``, ``lost`` (``STATUSES``); kinds: ``KINDS``.

Pure: frames in, frames out. ``transforms.trends.incident_rule.compute_incidents`` feeds it (for the
nightly and for ``dumpscope check``); the cause (structural diff) is attached from ``diffs``.
"""

from __future__ import annotations

import fnmatch
import hashlib
import math
from dataclasses import dataclass
from typing import Iterable, Iterator, NamedTuple

import polars as pl

from transforms.trends.headlines import headline, impact
from transforms.trends.rules import ZERO_WHEN_ABSENT, Settings, windowed_metrics
from transforms.units import is_bytes_metric

KINDS = ("failure", "regression", "improvement")
STATUSES = ("new", "open", "fixed", "accepted", "lost")  # an incident's status at a run: one word each, everywhere
CLOSED_HOW = ("fixed", "accepted", "lost")

STEP_SCHEMA = pl.Schema({
    "incident_id": pl.String, "job": pl.String, "program": pl.String, "series": pl.String,
    "dump_kind": pl.String, "stage": pl.String, "metric": pl.String, "step": pl.String,
    "opened_run": pl.String, "last_good_run": pl.String, "closed_run": pl.String, "closed_how": pl.String,
    "baseline": pl.Float64, "value": pl.Float64, "latest_value": pl.Float64, "change": pl.Float64,
    "impact": pl.Float64, "detail": pl.String, "stacked_on": pl.String, "reopened_run": pl.String,
    "reverted": pl.Boolean,
})
STEP_DOCS = {
    "": "Every step behind each incident (drill-down): one row per series and metric whose figure stepped away from its level, or per dump that failed, in the run the incident opened. A step stays open until its figure is back within the floor of its own baseline (or past it the good way: fixed), loses its improvement (lost) or is accepted.",
    "incident_id": "The incident the step belongs to (incidents.incident_id).",
    "job": "Job.",
    "program": "Program name normalized across runs.",
    "series": "Series id <job>/<program>/<kind>[/<stage>].",
    "dump_kind": "Dump format the figure comes from.",
    "stage": "Compiler stage (NULL when the format has none).",
    "metric": "Metric that stepped (docs/metrics.md); for a failure about a dump: dump.status (it did not parse), dump.lost (damage cost figures the verdict reads; its other figures are judged) or dump.vanished.",
    "step": "regression (worse past the floor), improvement (better past the floor) or failure.",
    "opened_run": "Run where the figure stepped.",
    "last_good_run": "The series' run before that (the diff of the step is last_good_run → opened_run).",
    "closed_run": "Run where the step closed; NULL while open.",
    "closed_how": "fixed (a regression's figure no longer worse than its baseline), lost (an improvement's figure no longer better), accepted; NULL while open.",
    "baseline": "The level before the step: what the figure stepped from, and what a fix returns to.",
    "value": "Value in the opening run.",
    "latest_value": "Value in the latest run while the step was open (up to its closing run): a partial recovery shows here.",
    "change": "value - baseline.",
    "impact": "How much the step matters, for ranking only (docs/trends.md: bytes against the program's memory, counts weighted by family).",
    "detail": "For a failure: the dump's path and error; else NULL.",
    "stacked_on": "The incident of the step directly below this one on the same series and metric when it opened (a further step on top of an open one); NULL when none was open.",
    "reopened_run": "NULL for a step's first life; else the run where a revert reopened it (the change that had closed it was undone): this row is its life from that run, with its first opened_run, last_good_run and baseline.",
    "reverted": "Closed by a revert: its figure went back within its floor to where it stood before the step's run (closed_how says fixed or lost).",
}

INCIDENT_SCHEMA = pl.Schema({
    "incident_id": pl.String, "job": pl.String, "program": pl.String, "kind": pl.String,
    "opened_run": pl.String, "opened_at": pl.Datetime("us"), "last_good_run": pl.String,
    "last_good_commit": pl.String, "first_bad_commit": pl.String, "closed_run": pl.String, "closed_how": pl.String,
    "headline": pl.String, "cause": pl.String, "metrics": pl.List(pl.String), "series": pl.List(pl.String),
    "impact": pl.Float64, "accepted_by": pl.String, "accepted_note": pl.String, "stacked_on": pl.List(pl.String),
    "reopened_runs": pl.List(pl.String), "reopened_after": pl.List(pl.String), "reverted": pl.Boolean,
})
INCIDENT_DOCS = {
    "": "One row per incident: one step of one program, opened in the run where its figures stepped, with its cause, commit range and lifecycle. A program's regression and failure steps of one run are one incident, its improvement steps another. Status at a run: incidents_at(run) / incident_status.",
    "incident_id": "Stable id (I- and 8 hex digits of the job, program, opening run and, for an improvement, the word improvement): what `dumpscope accept` and `dumpscope incidents` take.",
    "job": "Job.",
    "program": "Program name normalized across runs.",
    "kind": "failure (a dump that stopped parsing or vanished, an ONNX step that stopped passing), regression (a figure got worse past its floor) or improvement (better past its floor).",
    "opened_run": "Run where the figures stepped.",
    "opened_at": "Start time of that run.",
    "last_good_run": "The program's run before that (the diff is last_good_run → opened_run).",
    "last_good_commit": "Commit of last_good_run (run.json), the start of the commit range.",
    "first_bad_commit": "Commit of opened_run, the end of the commit range.",
    "closed_run": "Run where the incident closed (its last step closed); NULL while open.",
    "closed_how": "fixed (a regression or failure whose figures came back), lost (an improvement whose figures went back), accepted (someone declared the change intended); NULL while open.",
    "headline": "One line a person reads: program and the steps engineers track first (peak and temp memory, collectives, launches, fallbacks), with values; a failure's error first.",
    "cause": "The top structural changes between last_good_run and opened_run (a failure's error first; new collectives, custom calls and fallbacks; fusions; allocations with source lines), most significant first, one per line.",
    "metrics": "Metrics that stepped (every dump kind and stage of the program).",
    "series": "Series whose figures stepped.",
    "impact": "Ranking only: failures above all, then bytes against the program's memory and counts weighted by family (collectives, launches and fallbacks first); never a percentage alone.",
    "accepted_by": "Who accepted it (NULL unless accepted).",
    "accepted_note": "Why it was accepted (the note given to dumpscope accept).",
    "stacked_on": "Open incidents this one's steps stepped further from (the same figures, the same way): it is news of its own, and its fix returns to their level.",
    "reopened_runs": "Runs where a revert reopened it (the change that had closed it was undone: its figures went back to where they stood before that change), in run order; empty for most. It stays the same incident: its opened_run and commit range are its first.",
    "reopened_after": "For each of reopened_runs, the run it had closed in before (its status there: fixed, or lost for an improvement).",
    "reverted": "Closed by a revert (closed_how fixed or lost): its figures went back within their floor to where they stood before it opened.",
}

_FAILURE_METRICS = ("onnx.step.", "onnx.errors", "dynamo.failures")


def _failure_metric(metric: str) -> bool:
    return metric.startswith(_FAILURE_METRICS[0]) or metric in _FAILURE_METRICS[1:]


# Figures with a healthy value that are no failure's: ranks that agree (a divergence is a regression of the
# ranks' agreement, the kind it opens on any later night).
_HEALTHY = {"dynamo.rank_divergence": 0.0}


def healthy_value(metric: str) -> float | None:
    """What a figure reads when nothing is wrong (an ONNX step passed: 1; errors, failed compiles and
    ranks differing from the others: 0), the level a program seen for the first time is measured
    from, so that what is wrong the first night it is seen opens that night; None for the others."""
    if metric.startswith(_FAILURE_METRICS[0]):
        return 1.0
    return 0.0 if metric in _FAILURE_METRICS[1:] else _HEALTHY.get(metric)


class Walked(NamedTuple):
    """What ``compute`` returns: incidents and their steps (``in_order``), and the ids of
    the incidents it left out as unchanged (with ``since``; else empty)."""

    incidents: pl.DataFrame
    steps: pl.DataFrame
    unchanged: list[str]


@dataclass(frozen=True, slots=True)
class Floors:
    """The smallest steps that open an incident, per family (settings ``[floors]``)."""

    bytes: float = 1024.0
    count: float = 1.0


@dataclass(slots=True)
class _Step:
    series: str
    metric: str
    step: str  # regression, improvement, failure
    opened_seq: int
    last_good_seq: int | None
    baseline: float | None
    value: float | None
    latest: float | None
    closed_seq: int | None = None
    closed_how: str | None = None
    detail: str | None = None
    accept: int | None = None  # index in the accepts list
    below: "_Step | None" = None  # the open step it stacked on
    touched_seq: int | None = None  # the last run its row changed in (opened, latest value, closed)
    job: str = ""
    program: str = ""
    # A revert (docs/trends.md): the level just before the run the step opened in (before that
    # run closed anything), and the steps that run closed; a later return within the floor to
    # that level undoes the run: the step closes ``reverted`` and those steps reopen.
    before: float | None = None
    undid: tuple["_Step", ...] = ()
    reverted: bool = False  # closed by a revert
    reopened_seq: int | None = None  # this row is a life the step got again when a revert reopened it there

    @property
    def improvement(self) -> bool:
        return self.step == "improvement"

    @property
    def from_seq(self) -> int:
        """The run this row's life began in: its opening, or the revert that reopened it."""
        return self.opened_seq if self.reopened_seq is None else self.reopened_seq

    def reopened(self, seq: int, value: float, below: "_Step | None") -> "_Step":
        """The step again, open from ``seq`` (a revert undid what closed it): its first opening,
        baseline and commit range stay."""
        return _Step(self.series, self.metric, self.step, self.opened_seq, self.last_good_seq, self.baseline,
                     self.value, value, detail=self.detail, below=below, touched_seq=seq, job=self.job,
                     program=self.program, reopened_seq=seq)


def incident_id(job: str, program: str, opened_run: str, improvement: bool = False) -> str:
    key = f"{job}\x00{program}\x00{opened_run}" + ("\x00improvement" if improvement else "")
    return "I-" + hashlib.sha1(key.encode()).hexdigest()[:8]


def floor_test(metric: str, rule, floors: Floors):
    """``past_floor(value, base)`` for one metric: whether ``value`` is further from ``base``
    than the noise, the family floor and the rule's threshold, either way."""
    noise, rel = rule.noise, rule.rel or 0.0
    fixed = max(noise, rule.abs or 0.0,
                floors.bytes if is_bytes_metric(metric) else 0.0 if metric.startswith("onnx.max_") else floors.count)

    def past_floor(value: float, base: float) -> bool:
        diff = value - base
        size = diff if diff >= 0 else -diff
        return not (size <= noise or size < fixed or size < rel * (base if base >= 0 else -base))

    return past_floor


def step_test(metric: str, rule, floors: Floors):
    """``is_step(value, baseline)`` for one metric: whether ``value`` is a step away from
    ``baseline`` (past the noise, the family floor and the rule's threshold; a noisy
    figure regresses only past its limit). Built once per metric: it runs on every change."""
    direction, limit = rule.direction, rule.limit
    past_floor = floor_test(metric, rule, floors)

    def is_step(value: float, base: float) -> bool:
        if not past_floor(value, base):
            return False
        if limit is not None and (value - base) * direction > 0:
            return value * direction > limit * direction
        return True

    return is_step


def _accepted_at(accepts: list[dict], series: str, job: str, program: str, opened_run: str | None,
                 run_id: str, metric: str | None = None, improvement: bool = False) -> int | None:
    """Index of the accept that closes a step of ``series`` (``metric``) at ``run_id``: one naming
    its incident (opened at ``opened_run``; None: only series patterns count), or its series."""
    for i, a in enumerate(accepts):
        if a["run_id"] != run_id or (a.get("metric") and metric and a["metric"] != metric):
            continue
        if a.get("incident_id") and opened_run is not None \
                and a["incident_id"] == incident_id(job, program, opened_run, improvement):
            return i
        if a.get("series") and fnmatch.fnmatchcase(series, a["series"]):  # the accept log's pattern column
            return i
    return None


def walk_metric(rows: Iterable[tuple[int, float, int | None]], *, series: str, job: str, program: str, metric: str,
                rule, floors: Floors, run_ids: list[str], accepts: list[dict],
                repeats: frozenset[int] = frozenset()) -> list[_Step]:
    """The steps of one (series, metric) from its (run_seq, value, previous run_seq) rows in
    run order. Rows equal to the one before may be left out (they change nothing), except
    at runs with an accept; the previous run_seq keeps each step's last good run exact.
    ``repeats``: the run_seqs where the series' dump holds bytes it held in an earlier run
    (a night copied, a log written again): a median of runs does not sample them again."""
    out: list[_Step] = []
    direction = rule.direction
    # A failure figure of a program seen for the first time is measured from a passing one: an
    # export or compile that fails the first night it is seen is a failure that night (and ranks
    # that differ the first night a job is seen, a regression that night).
    level: float | None = healthy_value(metric) if direction else None
    stack: list[_Step] = []
    is_step = step_test(metric, rule, floors)
    past_floor = floor_test(metric, rule, floors)
    accept_runs = {a["run_id"] for a in accepts}  # most runs have none: their rows skip the accept checks
    value = None

    def worse(value: float, base: float) -> bool:
        return (value - base) * direction > 0 and is_step(value, base)

    def better(value: float, base: float) -> bool:
        return (value - base) * direction < 0 and is_step(value, base)

    if rule.window > 1:
        rows = _medians(rows, rule.window, lambda v, base: worse(v, base) or better(v, base), lambda: level, repeats)
    seen = False  # a value seen yet (before it, a failure figure's level is the passing one it assumes)
    for seq, value, prev_seq in rows:
        if level is None:
            level, seen = value, True
            continue
        run_id = run_ids[seq]
        before, seen = (level if seen else None), True
        # 1. Close, from the top: a step no longer past its baseline the way it stepped.
        closed: list[_Step] = []
        while stack and not (better if stack[-1].improvement else worse)(value, stack[-1].baseline):
            top = stack.pop()
            top.closed_seq, top.closed_how, top.latest = seq, "lost" if top.improvement else "fixed", value
            # Reverted: back within the floor to the level before its run (a fix past it is no revert).
            top.reverted = top.before is not None and not past_floor(value, top.before)
            level = top.baseline
            closed.append(top)
        # 1b. A revert of a run that also closed steps (an overshoot: it fixed a regression and
        # opened an improvement) undoes that run: what it closed reopens (their first opening and
        # commit range), nothing opens.
        undone = next((s for s in closed if s.undid and s.reverted), None)
        if undone is not None:
            for s in reversed(undone.undid):  # closed from the top: reopened from the bottom
                again = s.reopened(seq, value, stack[-1] if stack else None)
                again.before, again.undid = before, tuple(closed)  # a reland undoes this revert in turn
                out.append(again)
                stack.append(again)
            level = undone.before
        # 2. Open: past the floor from the level, and not against the open steps.
        top = stack[-1] if stack else None
        kind = None
        if undone is not None:
            pass  # a revert opens nothing
        elif direction and worse(value, level) and (top is None or not top.improvement):
            kind = "failure" if _failure_metric(metric) else "regression"
        elif direction and better(value, level) and (top is None or top.improvement):
            kind = "improvement"
        if kind is not None:
            out.append(_Step(series, metric, kind, seq, prev_seq, level, value, value, below=top, job=job, program=program,
                             before=before, undid=tuple(closed)))
            stack.append(out[-1])
            level = value
        # Accepts at this run, after the opening (a step that stepped here is recorded, then
        # accepted): of series (a pattern), every open step; of an incident, its steps (a step
        # that opened here on top of it is news of its own). They close accepted there, and
        # the value is the level.
        for s in list(stack) if run_id in accept_runs else ():
            acc = _accepted_at(accepts, series, job, program, run_ids[s.opened_seq], run_id, metric, s.improvement)
            if acc is not None:
                s.closed_seq, s.closed_how, s.accept, s.latest = seq, "accepted", acc, value
                stack.remove(s)
                level = value
        # Otherwise nothing opens: below the floor, or a partial recovery / loss (the open
        # steps' latest value moved).
    for s in stack:  # still open: their latest value is the last one (a closed step's is its closing run's)
        s.latest, s.touched_seq = value, seq
    return out


def _medians(rows: Iterable[tuple[int, float, int | None]], window: int, stepped, level,
             repeats: frozenset[int] = frozenset()) -> Iterator[tuple[int, float, int | None]]:
    """A noisy figure's rows as its walk reads them: each value the median of the series' last
    ``window`` values (the lower middle one of an even count, while it has fewer), so one
    outlier moves nothing. The previous run_seq of a row is that of the run before the
    newest values that all stepped from the level (``level()``, read as the walk moves it):
    a step the median confirms has as last good run the one before its lasting level began.
    A row of ``repeats`` (the same bytes as an earlier run's dump: the same measurement, not
    another one) is not sampled: the walk reads the median as it stood, so the run's accepts
    still apply. Needs every row of the series (``compute`` keeps them for these metrics)."""
    recent: list[tuple[int, float, int | None]] = []
    stood: tuple[float, int | None] | None = None
    for row in rows:
        if row[0] in repeats and stood is not None:
            yield row[0], *stood
            continue
        recent = [*recent[-(window - 1):], row]
        values = sorted(v for _, v, _ in recent)
        median = values[(len(values) - 1) // 2]
        prev = row[2]
        base = level()
        if base is not None:
            for seq, value, before in reversed(recent):
                if not stepped(value, base):
                    break
                prev = before
        stood = median, prev
        yield row[0], median, prev


def _health_steps(health: pl.DataFrame, run_ids: list[str], accepts: list[dict]) -> list[_Step]:
    """Failure steps about dumps: partial/failed after ok, and vanished series.

    ``health``: series, job, program, run_seq, status (worst of the series' dumps in the
    run, 'damaged' where it lost figures the verdict reads, 'absent' where the series' job ran
    without it), detail."""
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
                metric = {"absent": "dump.vanished", "damaged": "dump.lost"}.get(status, "dump.status")
                open_ = _Step(series, metric, "failure", seq, last_ok, None, None, None, detail=detail, job=job, program=program)
                out.append(open_)
                acc = _accepted_at(accepts, series, job, program, run_ids[seq], run_ids[seq])
                if acc is not None:  # accepted in the run it opened in
                    open_.closed_seq, open_.closed_how, open_.accept = seq, "accepted", acc
                    open_, last_ok = None, None
    return out


def compute(observations: pl.DataFrame, health: pl.DataFrame, order: pl.DataFrame, accepts: list[dict],
            settings: Settings, floors: Floors = Floors(), *, ok: pl.DataFrame | None = None,
            info: pl.DataFrame | None = None, since: int | None = None, repeats: pl.DataFrame | None = None) -> Walked:
    """Incidents and incident_steps without causes (``incident_rule.causes`` adds them from ``diffs``).

    ``observations``: series, job, program, kind, stage, metric, run_id, value — figures
    of dumps that parsed ok only. ``health``: series, job, program, (kind, stage,) run_id,
    status (ok, partial, failed, absent), detail. ``order``: run_id, run_seq, started_at, commit.
    ``accepts``: rows of the accept log: run_id and incident_id or series (a pattern), plus metric, accepted_by, note.
    ``ok`` (series, run_id): when given, only the observations of these series and runs
    are walked (a year of observations is millions of rows: they are narrowed to the
    four columns the walk needs before anything is copied). ``info`` (series, job, program,
    kind, stage, one row per series): when given, ``observations`` needs only series,
    metric, run_id and value. ``since`` (a run_seq): only the incidents with a step that
    changed at that run or later (opened, moved while open, closed) — a night's, when the
    runs before it are as they were; the others (``Walked.unchanged``) are what an earlier
    walk made of the same runs (the walk is a function of the runs so far, and impact of
    the step's own runs). ``repeats`` (series, run_id): the runs where a series' dump holds
    the bytes of one of its earlier runs (``incident_rule.repeated_contents``), which a median
    of runs does not sample again.
    """
    run_ids = order.sort("run_seq").get_column("run_id").to_list()
    seq_of = order.select("run_id", "run_seq")
    seq = {r: i for i, r in enumerate(run_ids)}
    if info is None:
        info = observations.select("series", "job", "program", "kind", "stage").unique("series")
    program_bytes = _program_bytes(observations.select("series", "metric", "run_id", "value"), info)
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
    # A median of runs (rules' window) reads every row of its series, equal ones included.
    whole = sorted(windowed_metrics(settings, obs.get_column("metric").cast(pl.String).unique().to_list()))
    obs = obs.with_columns(same.fill_null(False).alias("_same")).with_columns(
        pl.when("_same").then(pl.col("run_seq").shift(1)).alias("prev_seq"),
        (pl.col("_same") & (pl.col("value") != pl.col("value").shift(1))).alias("_moved"))
    # Only pairs whose value ever changes can step, and a value equal to the one before
    # changes no state (figures are deterministic): the first value, the change points and
    # runs with an accept reach the Python loop; most compiler figures never move.
    moving = obs.filter("_moved").select("series", "metric")
    # ... and a failure figure failing at its first value (a program that fails the first night it is seen).
    names = obs.get_column("metric").unique().cast(pl.String).to_list()
    healthy = {m: healthy_value(m) for m in names if healthy_value(m) is not None}
    if healthy:
        name = pl.col("metric").cast(pl.String)
        first = obs.filter(~pl.col("_same") & name.is_in(list(healthy)))  # one row per pair at most
        failing = first.filter(pl.col("value") != name.replace_strict(healthy, default=None))
        moving = pl.concat([moving, failing.select("series", "metric")])
    moving = moving.unique()
    obs = (obs.join(moving, on=["series", "metric"], how="semi")
           .filter(~pl.col("_same") | pl.col("_moved") | pl.col("run_seq").is_in(accept_seqs)
                   | pl.col("metric").cast(pl.String).is_in(whole))
           .sort(by_group)
           .join(info.select("series", "job", "program", "kind", "stage").with_columns(pl.col("series").cast(obs.schema["series"])),
                 on="series", how="left", maintain_order="left")
           .with_columns(pl.col("series", "metric", "job", "program", "kind", "stage").cast(pl.String)))
    # Every series' names, from the health rows (series whose figures never move included).
    meta = {r["series"]: r for r in health.select("series", "job", "program", "kind", "stage").unique("series")
            .iter_rows(named=True)} if "kind" in health.columns else {}
    meta |= {r["series"]: r for r in info.select(pl.col("series", "job", "program", "kind", "stage").cast(pl.String))
             .unique("series").iter_rows(named=True)}  # every series with figures, moving or not
    repeated: dict[str, set[int]] = {}
    for series, run_id in (repeats.select(pl.col("series", "run_id").cast(pl.String)).iter_rows()
                           if repeats is not None else ()):
        if run_id in seq:
            repeated.setdefault(series, set()).add(seq[run_id])
    steps: list[_Step] = []
    cols = [obs.get_column(c).to_list() for c in ("series", "metric", "run_seq", "value", "prev_seq")]
    start = 0
    for end in range(1, len(cols[0]) + 1):
        if end < len(cols[0]) and cols[0][end] == cols[0][start] and cols[1][end] == cols[1][start]:
            continue
        series, metric = cols[0][start], cols[1][start]
        m = meta[series]
        rows = zip(cols[2][start:end], cols[3][start:end], cols[4][start:end])
        steps += walk_metric(rows, series=series, job=m["job"], program=m["program"], metric=metric,
                             rule=settings.rule_for(series, metric), floors=floors, run_ids=run_ids, accepts=accepts,
                             repeats=frozenset(repeated.get(series, ())))
        start = end
    steps += _health_steps(health.join(seq_of, on="run_id"), run_ids, accepts)
    # A revert is a run that reopened a step of the program: the steps it closed back at their level
    # before are reverted there (any other return to a level is a plain fix or loss). Of every
    # incident: an incident's closing is a revert by another's reopening.
    revert_runs = {(s.job, s.program, s.reopened_seq) for s in steps if s.reopened_seq is not None}
    unchanged: list[str] = []
    if since is not None:
        steps, unchanged = _of_incidents_touched(steps, since, run_ids)
    return Walked(*_frames(steps, meta, order, accepts, program_bytes, revert_runs), unchanged)


def _of_incidents_touched(steps: list[_Step], since: int, run_ids: list[str]) -> tuple[list[_Step], list[str]]:
    """The steps of the incidents (job, program, opening run, improvement) with a step
    touched at ``since`` or later, and the ids of the others."""
    def key(s: _Step) -> tuple:
        return s.job, s.program, s.opened_seq, s.improvement

    touched = {key(s) for s in steps if max(s.from_seq, s.closed_seq or 0, s.touched_seq or 0) >= since}
    others = {key(s) for s in steps} - touched
    return ([s for s in steps if key(s) in touched],
            sorted(incident_id(job, program, run_ids[seq], improvement) for job, program, seq, improvement in others))


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


def _program_bytes(obs: pl.DataFrame, info: pl.DataFrame) -> dict[tuple[str, str, str], float]:
    """Each program's memory per run (the largest byte figure it reports there): what byte
    steps are measured against, in the step's own runs, so a step's impact never changes
    after it. ``obs``: series, metric, run_id, value; ``info``: series, job, program."""
    memory = pl.col("metric").cast(pl.String)
    is_memory = memory.str.starts_with("memory.") & memory.str.ends_with("_bytes")
    per_series = obs.filter(is_memory).group_by("series", "run_id").agg(pl.col("value").max())
    mem = (per_series.join(info.select("series", "job", "program").with_columns(pl.col("series").cast(per_series.schema["series"])),
                           on="series")
           .group_by("job", "program", "run_id").agg(pl.col("value").max())
           .with_columns(pl.col("job", "program", "run_id").cast(pl.String)))
    return {(j, p, r): float(v or 0) for j, p, r, v in mem.iter_rows()}


def _frames(steps: list[_Step], meta: dict, order: pl.DataFrame, accepts: list[dict],
            program_bytes: dict, revert_runs: set[tuple[str, str, int]]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The frames of ``steps``; ``revert_runs``: (job, program, run_seq) of every run that reopened a
    step (``compute``)."""
    runs = order.sort("run_seq")
    run_ids = runs.get_column("run_id").to_list()
    started = runs.get_column("started_at").to_list()
    commits = runs.get_column("commit").to_list()
    position = {r: i for i, r in enumerate(run_ids)}
    ids: dict[tuple, str] = {}  # a year of steps shares a few thousand incidents: one hash each

    def iid_of(s: _Step) -> str:
        key = (s.job, s.program, s.opened_seq, s.improvement)
        if (iid := ids.get(key)) is None:
            iid = ids[key] = incident_id(s.job, s.program, run_ids[s.opened_seq], s.improvement)
        return iid

    def rid(seq: int | None) -> str | None:
        return None if seq is None else run_ids[seq]

    step_rows, groups = [], {}
    for s in steps:
        iid = iid_of(s)
        m = meta.get(s.series) or {}
        change = None if s.value is None or s.baseline is None else s.value - s.baseline
        # The program's memory before or after the step, the larger: a step up and the same step down weigh the same.
        memory = max(program_bytes.get((s.job, s.program, rid(s.opened_seq)), 0.0),
                     program_bytes.get((s.job, s.program, rid(s.last_good_seq)), 0.0))
        score = impact(s.metric, s.step, change, s.baseline, memory)
        row = (iid, s.job, s.program, s.series, m.get("kind"), m.get("stage"), s.metric, s.step, rid(s.opened_seq),
               rid(s.last_good_seq), rid(s.closed_seq), s.closed_how, s.baseline, s.value, s.latest, change, score,
               s.detail, None if s.below is None else iid_of(s.below), rid(s.reopened_seq),
               s.reverted and (s.job, s.program, s.closed_seq) in revert_runs)
        step_rows.append(row)
        groups.setdefault(iid, []).append((row, s))
    incidents = []
    for iid, members in groups.items():
        # The headline and the causes read steps as rows by name; an incident has a few.
        rows = [dict(zip(STEP_SCHEMA.names(), row)) | {"_step": s} for row, s in members]
        rows.sort(key=lambda r: (-r["impact"], r["metric"], r["series"]))
        kinds = {r["step"] for r in rows}
        kind = "failure" if "failure" in kinds else "regression" if "regression" in kinds else "improvement"
        closed = None if any(r["_step"].closed_seq is None for r in rows) else max(r["_step"].closed_seq for r in rows)
        accepted = [r for r in rows if r["closed_how"] == "accepted"]
        how = None if closed is None else "accepted" if accepted else "lost" if kind == "improvement" else "fixed"
        gaps = _gaps([r["_step"] for r in rows])
        acc = accepts[accepted[0]["_step"].accept] if accepted and accepted[0]["_step"].accept is not None else {}
        seq = rows[0]["_step"].opened_seq
        good = min((r["last_good_run"] for r in rows if r["last_good_run"]), default=None, key=position.__getitem__)
        # One figure often stands in several files of one compile (HLO before/after, the buffer
        # assignment and the memory report): impact counts each metric once.
        seen: set[str] = set()
        once = [r for r in rows if not (r["metric"] in seen or seen.add(r["metric"]))]
        incidents.append({
            "incident_id": iid, "job": rows[0]["job"], "program": rows[0]["program"], "kind": kind,
            "opened_run": run_ids[seq], "opened_at": started[seq], "last_good_run": good,
            "last_good_commit": commits[position[good]] if good else None, "first_bad_commit": commits[seq],
            "closed_run": rid(closed), "closed_how": how, "headline": headline(rows[0]["job"], rows[0]["program"], rows),
            "cause": None, "metrics": sorted({r["metric"] for r in rows}), "series": sorted({r["series"] for r in rows}),
            "impact": sum(r["impact"] for r in once), "accepted_by": acc.get("accepted_by"),
            "accepted_note": acc.get("note"),
            "stacked_on": sorted({r["stacked_on"] for r in rows if r["stacked_on"] and r["reopened_run"] is None}),
            "reopened_runs": [run_ids[o] for _, o in gaps], "reopened_after": [run_ids[c] for c, _ in gaps],
            "reverted": closed is not None and all(r["reverted"] for r in rows if r["_step"].closed_seq == closed)})
    step_frame = pl.DataFrame(step_rows, schema=STEP_SCHEMA, orient="row")
    return in_order(pl.DataFrame(incidents, schema=INCIDENT_SCHEMA), step_frame)


def _gaps(steps: list[_Step]) -> list[tuple[int, int]]:
    """(closed, reopened) run_seqs where an incident's steps were all closed, then a revert
    reopened one: its lives are the union of its rows' (each from its opening or reopening
    to its closing)."""
    lives = sorted((s.from_seq, math.inf if s.closed_seq is None else s.closed_seq) for s in steps)
    out, end = [], lives[0][1]
    for start, stop in lives[1:]:
        if start > end:
            out.append((int(end), start))
        end = max(end, stop)
    return out


def in_order(incidents: pl.DataFrame, steps: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The order ``compute`` gives its frames (also of frames computed in parts and concatenated)."""
    return (incidents.sort("opened_at", "impact", "incident_id", descending=[False, True, False], maintain_order=True),
            steps.sort("opened_run", "incident_id", "impact", "metric", "series", descending=[False, False, True, False, False],
                       maintain_order=True))
