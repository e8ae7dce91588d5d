"""A small reference implementation of the incident model (.briefs/incident_model.md), for tests.

Input: a dump bucket (``<bucket>/<run_id>/<job>/**``), read with the project's parser
(``transforms.parse.parse_dump``); series ids as the project names them (job, program
without counters, dump kind, stage). Output (``incidents``): one dict per incident, keyed
by ``(job, program, opened_run, improvement)``, with its kind, closing, ``stacked_on``,
status at every run from the opening one, metrics and steps (series, metric, baseline,
value). Only the stable pieces of the project are used: the parser, ``normalize_program``, ``normalise``
(values that change from process to process),
``DEFAULT_RULES`` (direction, the median window of noisy timings) and ``step_test``/``floor_test``/``Floors``
(floors). No accepts, and no renaming of colliding programs (``#2``): a bucket that needs either raises.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path

from transforms.parse import parse_dump
from transforms.trends.incident_walk import Floors, floor_test, step_test
from transforms.trends.rules import DEFAULT_RULES, FALLBACK_RULE, ZERO_WHEN_ABSENT
from transforms.trends.series import normalize_program
from transforms.volatile import normalise


@dataclass
class Step:
    series: str
    job: str
    program: str
    metric: str
    kind: str  # regression, improvement, failure
    opened: int  # index of the run
    baseline: float | None = None
    value: float | None = None
    below: "Step | None" = None
    closed: int | None = None
    how: str | None = None
    before: float | None = None  # the level before the run it opened in
    undid: tuple = ()  # the steps that run closed
    reverted: bool = False
    lives: list = None  # (from, to) runs it was open: its first and each a revert reopened

    def __post_init__(self):
        self.lives = [[self.opened, None]]


def read_bucket(bucket: Path) -> tuple[list[str], list[set[str]], dict[str, dict]]:
    """Run ids in order, the jobs that ran in each, and per series: job, program and per run
    (status, metrics). A TORCH_TRACE log of several compiled functions: a series per function,
    its own figures; the rank logs of a job: each program's ``dynamo.rank_divergence``."""
    run_ids = sorted(p.name for p in bucket.iterdir() if p.is_dir())
    jobs, series = [], {}
    for i, run_id in enumerate(run_ids):
        run = bucket / run_id
        jobs.append({p.name for p in run.iterdir() if p.is_dir()})
        ranks: dict[str, dict[int, tuple[dict, list[str]]]] = {}  # job -> rank -> (profiles, series of the log)
        for path in sorted(run.rglob("*.gz")):
            with open(path, "rb") as f:
                parsed = parse_dump(f, str(path.relative_to(bucket)))
            s = parsed.summary
            if s.kind.value == "unknown":
                continue
            job = path.relative_to(run).parts[0]
            figures = s.programs if len(s.programs) > 1 else {s.program: s.metrics}
            sids = []
            for named, metrics in figures.items():
                program = normalize_program(named)
                sid = "/".join(p for p in (job, program, s.kind.value, s.stage) if p)
                entry = series.setdefault(sid, {"job": job, "program": program, "runs": {}})
                assert i not in entry["runs"], f"two dumps of {sid} in {run_id}: the oracle does not number them"
                entry["runs"][i] = (s.status.value, dict(metrics))
                sids.append(sid)
            if s.kind.value == "torch_trace" and (s.stage or "").startswith("rank_") and s.status.value == "ok":
                ranks.setdefault(job, {})[int(s.stage[5:])] = (rank_profiles(parsed.tables), sids)
        for logs in ranks.values():
            differing = divergence({rank: profiles for rank, (profiles, _) in logs.items()})
            for sid in {sid for _, sids in logs.values() for sid in sids}:
                if series[sid]["program"] in differing:
                    series[sid]["runs"][i][1]["dynamo.rank_divergence"] = differing[series[sid]["program"]]
    return run_ids, jobs, series


def divergence(logs: dict[int, dict[str, tuple]]) -> dict[str, float]:
    """Program -> how many ranks differ from the majority (the largest group of ranks that agree, a
    tie the lowest rank's), of a job's rank logs in one run (rank -> ``rank_profiles``); none for one rank."""
    if len(logs) < 2:
        return {}
    out = {}
    for program in {p for profiles in logs.values() for p in profiles}:
        groups: dict[tuple, list[int]] = {}
        for rank in sorted(logs):
            groups.setdefault(logs[rank].get(program, ()), []).append(rank)
        majority = max(groups.values(), key=lambda r: (len(r), -r[0]))
        out[program] = float(len(logs) - len(majority))
    return out


def rank_profiles(tables: dict) -> dict[str, tuple]:
    """Per program (as its series names it): what ranks are compared on, as tlparse's multi-rank report
    does: its compile ids, graph breaks, recompile reasons (ids and paths normalised) and each compile's
    collective schedule, in log order."""
    compiles = tables.get("torch_trace_compiles")
    if compiles is None:
        return {}
    out: dict[str, list] = {}
    forward = compiles.filter(compiles["phase"] == "forward").sort("lineno").to_dicts()
    program_of = {c["compile_id"]: normalize_program(c["program"]) for c in forward if c["program"]}
    breaks = tables.get("torch_trace_graph_breaks")
    ops = tables.get("torch_trace_collectives")
    for c in forward:
        profile = out.setdefault(normalize_program(c["program"]) if c["program"] else "?", [[], [], [], []])
        profile[0].append(c["tlparse_id"])
        if c["recompile_reason"]:
            profile[2].append(normalise(re.sub(r"^[!\d/]+: ", "", c["recompile_reason"])))
        if ops is not None:
            mine = ops.filter(ops["compile_id"] == c["compile_id"]).sort("lineno")["op"].to_list()
            if mine:
                profile[3].append(mine)
    for b in [] if breaks is None else breaks.sort("lineno").to_dicts():
        if b["compile_id"] in program_of:
            out[program_of[b["compile_id"]]][1].append((normalise(b["reason"] or ""), b["user_lineno"]))
    return {p: tuple(tuple(map(str, dim)) for dim in profile) for p, profile in out.items()}


def rule_for(metric: str):
    return next((r for r in DEFAULT_RULES if fnmatch.fnmatchcase(metric, r.metric)), FALLBACK_RULE)


def walk(values: list[tuple[int, float]], metric: str, **names) -> list[Step]:
    """The steps of one (series, metric): a level and a stack of open steps, in run order. A rule
    with a ``window`` (noisy timings) is walked on the median of the series' last ``window`` values
    (the lower middle of an even count)."""
    rule = rule_for(metric)
    direction, is_step = rule.direction, step_test(metric, rule, Floors())
    if not direction:
        return []
    if rule.window > 1:
        values = [(run, sorted(v for _, v in values[max(0, k + 1 - rule.window):k + 1])[k // 2 if k + 1 < rule.window
                  else (rule.window - 1) // 2]) for k, (run, _) in enumerate(values)]
    failure = metric.startswith("onnx.step.") or metric in ("onnx.errors", "dynamo.failures")

    def past(v: float, base: float, way: int) -> bool:  # way 1: worse, -1: better
        return (v - base) * direction * way > 0 and is_step(v, base)

    past_floor = floor_test(metric, rule, Floors())

    # A failure figure starts from passing: a program failing the first night it is seen is a failure; ranks
    # start from agreeing: ranks that differ the first night a job is seen are a regression that night.
    level = (1.0 if metric.startswith("onnx.step.") else 0.0) if failure else 0.0 if metric == "dynamo.rank_divergence" \
        else None
    stack, out = [], []
    for k, (run, v) in enumerate(values):
        if level is None:
            level = v
            continue
        before, closed = (level if k else None), []  # the first value: no level was seen before it
        while stack and not past(v, stack[-1].baseline, -1 if stack[-1].kind == "improvement" else 1):
            top = stack.pop()
            top.closed, top.how, level = run, "lost" if top.kind == "improvement" else "fixed", top.baseline
            top.lives[-1][1] = run
            top.reverted = top.before is not None and not past_floor(v, top.before)  # back to the level before its run
            closed.append(top)
        # A revert of a run that also closed steps: those reopen, nothing opens.
        undone = next((s for s in closed if s.undid and s.reverted), None)
        if undone is not None:
            for s in reversed(undone.undid):
                s.closed, s.how = None, None
                s.lives.append([run, None])
                s.before, s.undid = before, tuple(closed)
                stack.append(s)
            level = undone.before
            continue
        top = stack[-1] if stack else None
        if past(v, level, 1) and (top is None or top.kind != "improvement"):
            kind = "failure" if failure else "regression"
        elif past(v, level, -1) and (top is None or top.kind == "improvement"):
            kind = "improvement"
        else:
            continue  # below the floor, or a partial recovery (loss) of the open steps
        step = Step(metric=metric, kind=kind, opened=run, baseline=level, value=v, below=top, before=before,
                    undid=tuple(closed), **names)
        out.append(step)
        stack.append(step)
        level = v
    return out


def health(runs: dict[int, tuple], jobs: list[set[str]], job: str, **names) -> list[Step]:
    """Failure steps about the dumps: partial/failed, or vanished while its job ran, after ok."""
    out, open_, seen_ok = [], None, False
    for i, ran in enumerate(jobs):
        status = runs[i][0] if i in runs else "absent" if job in ran else None
        if status is None:
            continue
        if status == "ok":
            if open_ is not None:
                open_.closed, open_.how, open_.lives[-1][1], open_ = i, "fixed", i, None
            seen_ok = True
        elif open_ is None and seen_ok:
            metric = "dump.vanished" if status == "absent" else "dump.status"
            open_ = Step(job=job, metric=metric, kind="failure", opened=i, **names)
            out.append(open_)
    return out


def all_steps(bucket: Path) -> tuple[list[str], list[Step]]:
    run_ids, jobs, series = read_bucket(bucket)
    steps = []
    for sid, s in series.items():
        names = {"series": sid, "program": s["program"]}
        steps += health(s["runs"], jobs, s["job"], **names)
        ok = {i: m for i, (status, m) in sorted(s["runs"].items()) if status == "ok"}
        for metric in sorted({k for m in ok.values() for k in m}):
            zero = 0 if re.search(ZERO_WHEN_ABSENT, metric) else None
            values = [(i, m.get(metric, zero)) for i, m in ok.items() if m.get(metric, zero) is not None]
            steps += walk(values, metric, job=s["job"], **names)
    return run_ids, steps


def incidents(bucket: Path) -> dict[tuple, dict]:
    """Every incident of the bucket, keyed by (job, program, opened run, improvement)."""
    run_ids, steps = all_steps(bucket)

    def key(s: Step) -> tuple:
        return s.job, s.program, run_ids[s.opened], s.kind == "improvement"

    groups: dict[tuple, list[Step]] = {}
    for s in steps:
        groups.setdefault(key(s), []).append(s)
    # Runs where a revert reopened a step of a program: there, steps back at their level are reverted.
    revert_runs = {(s.job, s.program, a) for s in steps for a, _ in s.lives[1:]}
    out = {}
    for k, group in groups.items():
        kinds = {s.kind for s in group}
        kind = "failure" if "failure" in kinds else "regression" if "regression" in kinds else "improvement"
        closed = None if any(s.closed is None for s in group) else max(s.closed for s in group)
        how = None if closed is None else "lost" if kind == "improvement" else "fixed"
        opened = group[0].opened
        last = len(run_ids) - 1 if closed is None else closed
        # Its status at each run: open while a step of it is; closed runs (all steps closed) that a
        # revert later reopened say how it closed there, the runs up to the reopening are not listed.
        lives = sorted((life for s in group for life in s.lives), key=lambda ab: (ab[0], ab[1] is None, ab[1] or 0))
        lifecycle = {}
        for i in range(opened, last + 1):
            open_ = any(a <= i and (b is None or i < b) for a, b in lives)
            closing = any(b == i for _, b in lives)
            if i == opened:
                lifecycle[run_ids[i]] = "new"
            elif open_:
                lifecycle[run_ids[i]] = "open"
            elif closing:
                lifecycle[run_ids[i]] = "lost" if kind == "improvement" else "fixed"
        reopened, end = [], lives[0][1]
        for a, b in lives[1:]:  # the union of its lives: where it was closed, then reopened
            if end is not None and a > end:
                reopened.append((run_ids[end], run_ids[a]))
            end = None if end is None or b is None else max(end, b)
        out[k] = {
            "kind": kind,
            "closed": None if closed is None else run_ids[closed],
            "closed_as": how,
            "stacked_on": sorted({key(s.below) for s in group if s.below is not None}),
            "lifecycle": lifecycle,
            "metrics": sorted({s.metric for s in group}),
            "steps": sorted((s.series, s.metric, s.baseline, s.value) for s in group),
        } | ({"reopened": [list(r) for r in reopened]} if reopened else {}) | (
            {"reverted": True} if closed is not None and (group[0].job, group[0].program, closed) in revert_runs
            and all(s.reverted for s in group if s.closed == closed) else {})
    return out
