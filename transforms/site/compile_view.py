"""The compile view of a program (pure): each compile of the latest run's TORCH_TRACE logs, as tlparse shows it.

A program (the compiled function, a series: ``<job>/<co_name> at <file>:<line>/torch_trace/<stage>``)
gets a page, ``compiles/<slug>.md``, listing its compiles in log order, each by its tlparse id
(``[0/0]``, ``[0/1]`` a recompile, ``[0/0_1]`` the attempt after a restart, ``[!0/1/0]`` under
compiled autograd): its status (ok, failed, restarted, cache hit, unfinished), why it recompiled or
restarted, the seconds of each phase, its guards, kernels and cache hits, the stack that led to it;
then, one section a compile, its artifacts' texts (the graphs, the output code, the guard tree, the
metrics), its guards (shape specialisations and guards added with their user line) and the other
artifacts with the log lines where to read them. The pages' inputs are the records tables of the
latest run (``SiteData.compile_rows``, ``compile_artifacts``, ``compile_guards``); the texts are
those the parser kept (``torch_trace_artifacts.text``: bounded per artifact and per log).

Pages are bounded by what a reader needs, not by the names a log holds: at most ``[site]
max_series_pages`` programs get a view (``viewed_series``), in the compile page's order (those that
changed, failed, broke or recompiled, then the slowest to compile); a page lists at most
``MAX_COMPILES`` compiles in its table, ``MAX_SECTIONS`` of them with their artifacts, and
``MAX_GUARDS`` guards a compile. Contexts for ``site_templates/compile_view.md.j2``.
"""

from __future__ import annotations

from typing import Iterator

import polars as pl

from transforms.escape import Markup, slug, url_path
from transforms.site.data import MAX_TABLE_ROWS, SiteData
from transforms.units import human_value
from transforms.volatile import normalise

VIEW_DIR = "compiles"
MAX_COMPILES = MAX_TABLE_ROWS  # rows of a view's table of compiles
MAX_SECTIONS = 100  # compiles of a view with a section (artifacts, guards); the table lists the rest
MAX_GUARDS = 500  # guard rows shown of one compile (the tree of a big model: thousands)
REASON_TEXT = 300  # characters of a reason in the table of compiles (its section has it whole)
MAX_FRAMES = 64  # frames of a stack in the trie, the innermost (a trie's depth is a page's nesting)
# The phases of a compile, without overlap, from its metrics (torch_trace_compiles): Dynamo's own time (the whole
# frame less the backend), AOTAutograd and Inductor (the backend less code generation), Inductor's code generation,
# and a backward graph compiled lazily at the first backward call (outside the whole frame's seconds).
PHASES = ("Dynamo", "AOT/Inductor", "code gen", "lazy backward")
STATUS_TEXT = {"ok": "ok", "failed": "failed", "restarted": "restarted", "cache_hit": "cache hit",
               "unfinished": "unfinished (no metrics record)"}
# The artifacts a compile section opens first, in this order; the others follow in log order.
TEXT_ORDER = ("dynamo_output_graph", "aot_joint_graph", "aot_forward_graph", "aot_backward_graph", "aot_inference_graph",
              "inductor_post_grad_graph", "inductor_output_code", "dynamo_cpp_guards_str", "dynamo_guards",
              "compilation_metrics", "bwd_compilation_metrics")
TRACED_METRICS = ("dynamo.compiles", "dynamo.compile_seconds", "dynamo.failures", "dynamo.graph_breaks",
                  "dynamo.recompiles")


def view_file(series: str) -> str:
    """Where the compile view of a program (its series) is written, below the docs directory."""
    return f"{VIEW_DIR}/{slug(series)}.md"


def view_link(series: str, here: str = "", fragment: str | None = None) -> Markup:
    """A relative link to a program's view from a page in directory ``here`` ("" = top)."""
    name = f"{slug(series)}.md"
    return url_path(name, fragment=fragment) if here == VIEW_DIR else url_path(
        *([".."] if here else []), VIEW_DIR, name, fragment=fragment)


def compile_anchor(path: str, tlparse_id: str) -> str:
    """The id of a compile's section on its view (a log's ids are its own: two logs of a view differ by path,
    named in their run: ``in_run``)."""
    return slug("compile", in_run(path), tlparse_id)


def in_run(path: str) -> str:
    """A dump's path below its run's folder (``<run>/<job>/...`` -> ``<job>/...``): what a view names, so
    that a night whose log is the last night's content leaves the view's Markdown as it was (not built again;
    the page says "the latest run", which assets/status.js fills in)."""
    return path.split("/", 1)[-1]


def telling_order(rows: pl.DataFrame) -> pl.DataFrame:
    """The series of ``rows`` (the latest run's metric_trends rows of traced programs), most telling first:
    those whose figures changed, then those that failed, broke or recompiled, then the slowest to compile."""
    return rows.group_by("series").agg(
        (pl.col("delta").fill_null(0) != 0).any().alias("_changed"),
        pl.col("value").filter(pl.col("metric").is_in(["dynamo.failures", "dynamo.graph_breaks", "dynamo.recompiles"]))
        .sum().alias("_trouble"),
        pl.col("value").filter(pl.col("metric") == "dynamo.compile_seconds").sum().alias("_seconds"),
    ).sort("_changed", "_trouble", "_seconds", "series", descending=[True, True, True, False])


def viewed_series(d: SiteData) -> list[str]:
    """The programs with a compile view: of the latest run's programs whose compiles the records tables
    hold, the first ``max_series_pages`` in ``telling_order``."""
    if d.compile_rows is None or d.compile_rows.is_empty():
        return []
    held = set(d.compile_rows.get_column("series").drop_nulls().to_list())
    latest = d.trends.filter((pl.col("kind") == "torch_trace") & (pl.col("run_id") == d.latest)
                             & pl.col("metric").is_in(TRACED_METRICS))
    ordered = [s for s in telling_order(latest).get_column("series").to_list() if s in held]
    return ordered[:d.max_series_pages]


def _seconds(v: float | None) -> float:
    return v if v is not None and v > 0 else 0.0


def phase_seconds(row: dict) -> dict[str, float]:
    """A metrics row's seconds by phase (``PHASES``), none negative (a null is 0: the phase did not run)."""
    if row["phase"] == "backward":
        return dict.fromkeys(PHASES[:3], 0.0) | {"lazy backward": _seconds(row["backward_compile_time_s"])}
    whole, backend, code_gen = (_seconds(row[k]) for k in ("entire_frame_compile_time_s", "backend_compile_time_s",
                                                           "code_gen_time_s"))
    return {"Dynamo": max(whole - backend, 0.0), "AOT/Inductor": max(backend - code_gen, 0.0), "code gen": code_gen,
            "lazy backward": 0.0}


def phase_rows(d: SiteData, series: list[str]) -> pl.DataFrame:
    """The compile page's stacked bars: for each program of ``series`` (in that order), its seconds by
    phase in the latest run, summed over its compiles (program, phase, seconds)."""
    rows = [] if d.compile_rows is None else d.compile_rows.filter(pl.col("series").is_in(series)).to_dicts()
    sums: dict[tuple[str, str], float] = {}
    label = {}
    for r in rows:
        label[r["series"]] = _line(r)
        for phase, s in phase_seconds(r).items():
            sums[(r["series"], phase)] = sums.get((r["series"], phase), 0.0) + s
    out = [(label[s], phase, round(sums[(s, phase)], 6)) for s in series if s in label for phase in PHASES]
    return pl.DataFrame(out, schema={"program": pl.String, "phase": pl.String, "seconds": pl.Float64}, orient="row")


def _line(r: dict) -> str:
    rank = "" if r["stage"] in (None, "trace") else f" ({r['stage']})"
    return f"{r['job']}/{r['program']}{rank}"


def compile_views(d: SiteData) -> Iterator[tuple[str, dict]]:
    """(series, the view's context) of each program ``viewed_series`` names."""
    series = viewed_series(d)
    if not series:
        return
    rows = d.compile_rows.filter(pl.col("series").is_in(series))
    keys = rows.select("path", "compile_id", "series").unique()
    artifacts, guards = _of(d.compile_artifacts, keys), _of(d.compile_guards, keys)
    for s in series:  # a frame of each program at a time (a dict of 2,000 frames cost ~14 MiB at once)
        of = pl.col("series") == s
        yield s, view_context(d, s, rows.filter(of), artifacts.filter(of), guards.filter(of))


def _of(frame: pl.DataFrame | None, keys: pl.DataFrame) -> pl.DataFrame:
    """The rows of ``frame`` (artifacts, guards) of the compiles ``keys`` names, each with its series."""
    if frame is None:
        return keys.clear()
    return frame.join(keys, on=["path", "compile_id"], how="inner", maintain_order="left")


def view_context(d: SiteData, series: str, rows: pl.DataFrame, artifacts: pl.DataFrame | None,
                 guards: pl.DataFrame | None) -> dict:
    """The context of one program's view: ``rows`` its compiles' metrics rows (forward and lazy backward),
    ``artifacts`` and ``guards`` those of its compiles."""
    here = VIEW_DIR
    first = rows.row(0, named=True)
    entries = _entries(rows.to_dicts(), [] if artifacts is None else artifacts.to_dicts())
    by_compile: dict[tuple[str, str], list[dict]] = {}
    for g in ([] if guards is None else guards.to_dicts()):
        by_compile.setdefault((g["path"], g["tlparse_id"]), []).append(g)
    for e in entries:
        e["guards"], e["more_guards"] = _guards(by_compile.get((e["path"], e["id"]), []))
    paths = sorted({in_run(e["path"]) for e in entries})
    return {"title": _line(first), "series": series, "series_link": d.series_link(series, here),
            "compile_page": Markup("../compile.md"), "logs": paths, "compiles": entries[:MAX_COMPILES],
            "more_compiles": max(0, len(entries) - MAX_COMPILES), "sections": entries[:MAX_SECTIONS],
            "more_sections": max(0, min(len(entries), MAX_COMPILES) - MAX_SECTIONS),
            "trie": stack_trie(entries), "phases": PHASES, "query": _query(first)}


def _query(first: dict) -> str:
    """The query that lists the artifacts of the program's log in the latest run, texts included."""
    where = in_run(first["path"]).replace("'", "''")
    return ("dumpscope sql \"SELECT a.tlparse_id, a.kind, a.lineno, a.end_lineno, a.text FROM torch_trace_artifacts a "
            "JOIN dumps d USING (dump_id) WHERE d.run_id = (SELECT max_by(run_id, started_at) FROM runs) AND "
            f"ends_with(d.path, '/{where}') ORDER BY a.lineno\"")


def _entries(rows: list[dict], artifacts: list[dict]) -> list[dict]:
    """One entry per compile attempt (tlparse id) of the program, in log order (its first record):
    its metrics (the forward row of that id; the lazy backward's with it), status, reasons, phase
    seconds, guards, kernels, caches, stack and artifacts."""
    forward = {(r["path"], r["tlparse_id"]): r for r in rows if r["phase"] == "forward"}
    backward: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if r["phase"] == "backward":
            backward.setdefault((r["path"], r["compile_id"]), []).append(r)
    attempts = _attempts(rows, artifacts)
    final = {(p, r["compile_id"]): r for (p, _), r in forward.items()}  # a compile's metrics: of its last attempt
    out = []
    for path, tid in attempts:
        arts = attempts[(path, tid)]
        metrics = forward.get((path, tid))
        compile_id = metrics["compile_id"] if metrics else (arts[0]["compile_id"] if arts else None)
        lazy = backward.get((path, compile_id), []) if metrics else []
        out.append(_entry(path, tid, compile_id, metrics, lazy, arts, final=final.get((path, compile_id))))
    return out


def _attempts(rows: list[dict], artifacts: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """(path, tlparse id) -> the artifacts of that compile attempt, in log order; the attempts in
    the order of their first record (an artifact, else the metrics record)."""
    attempts: dict[tuple[str, str], list[dict]] = {}
    first: dict[tuple[str, str], int] = {}
    for a in artifacts:
        if a["tlparse_id"] is not None:
            attempts.setdefault(key := (a["path"], a["tlparse_id"]), []).append(a)
            first[key] = min(first.get(key, a["lineno"]), a["lineno"])
    for r in rows:
        if r["phase"] == "forward" and r["tlparse_id"] is not None:
            attempts.setdefault(key := (r["path"], r["tlparse_id"]), [])
            first[key] = min(first.get(key, r["lineno"]), r["lineno"])
    return {k: attempts[k] for k in sorted(attempts, key=lambda k: (k[0], first[k]))}


def _entry(path: str, tid: str, compile_id: str | None, m: dict | None, lazy: list[dict], arts: list[dict], *,
           final: dict | None) -> dict:
    """``final``: the metrics of the compile's last attempt (an attempt without its own was restarted)."""
    if m is None:
        status = "restarted" if final is not None else "unfinished"
        attempt = next((a["attempt"] for a in arts if a["attempt"] is not None), 0)
        reasons = (final or {}).get("restart_reasons") or []
        why = f"restarted: {reasons[attempt]}" if attempt < len(reasons) else ""
    else:
        status = ("failed" if m["fail_type"] else "cache_hit" if _cache_hit(m) else "ok")
        why = (f"recompiled: {m['recompile_reason']}" if m["recompile_reason"] else "")
        if m["fail_type"]:
            why = "; ".join(x for x in (why, f"{m['fail_type']}: {m['fail_reason'] or ''}") if x)
    phases = dict.fromkeys(PHASES, 0.0)
    for r in ([m] if m else []) + lazy:
        for k, v in phase_seconds(r).items():
            phases[k] += v
    kernels = sum(r["kernels"] or 0 for r in ([m] if m else []) + lazy)
    texts, others, stack = [], [], None
    for a in arts:
        if a["kind"] == "dynamo_start":
            stack = a["text"]
        elif a["text"] is not None or a["text_cut"]:
            texts.append(_text(a, path))
        else:
            others.append({"kind": a["kind"], "size": _size(a), "lines": _lines(a)})
    texts.sort(key=lambda t: TEXT_ORDER.index(t["kind"]) if t["kind"] in TEXT_ORDER else len(TEXT_ORDER))
    return {
        "id": tid, "path": path, "compile_id": compile_id, "anchor": compile_anchor(path, tid),
        "status": STATUS_TEXT[status], "bad": status in ("failed", "unfinished"), "why": why,
        "why_short": why if len(why) <= REASON_TEXT else why[:REASON_TEXT] + "…",
        "restart_reasons": (m or {}).get("restart_reasons") or [],
        "seconds": _s(m["entire_frame_compile_time_s"]) if m else "",
        "phases": {k: _s(v) if m else "" for k, v in phases.items()},
        "guards_count": "" if not m or m["guard_count"] is None else human_value("n", m["guard_count"]),
        "shape_guards": "" if not m or m["shape_env_guard_count"] is None else human_value("n", m["shape_env_guard_count"]),
        "kernels": human_value("n", kernels) if m else "",
        "cache": _cache(m) if m else "",
        "line": m["lineno"] if m else (arts[0]["lineno"] if arts else None),
        "line_is": "its metrics record" if m else "its first record",
        "stack": stack, "frames": parse_stack(stack), "texts": texts, "others": others,
    }


def _cache_hit(m: dict) -> bool:
    """Every graph came from a cache: a hit (FX graph or AOTAutograd) and no FX graph miss."""
    return bool((m["fx_cache_hits"] or 0) + (m["aotautograd_cache_hits"] or 0)) and not (m["fx_cache_misses"] or 0)


def _cache(m: dict) -> str:
    parts = [f"{name} {m[h] or 0}/{m[x] or 0}" for name, h, x in (
        ("FX", "fx_cache_hits", "fx_cache_misses"), ("AOT", "aotautograd_cache_hits", "aotautograd_cache_misses"))
        if (m[h] or 0) + (m[x] or 0)]
    return ", ".join(parts)


def _s(v: float | None) -> str:
    return "" if v is None else f"{v:.3f}"


def _size(a: dict) -> str:
    return f"{a['payload_bytes']:,} bytes" if a["payload_bytes"] else "its record"


def _lines(a: dict) -> str:
    first, last = a["lineno"], a["end_lineno"] or a["lineno"]
    return f"lines {first}–{last}" if last != first else f"line {first}"


def _text(a: dict, path: str) -> dict:
    """An artifact whose text the view shows, with what was left out and where to read the whole."""
    path, note = in_run(path), ""
    if a["text"] is None:
        note = f"Its text was not kept (the log's texts reached their bound first): {_lines(a)} of {path}."
    elif a["text_cut"]:
        kept = len(a["text"].encode())
        note = (f"Cut at {kept:,} of {a['payload_bytes']:,} bytes ({a['text_lines']:,} of {a['payload_lines']:,} lines); "
                f"the whole: {_lines(a)} of {path}.")
    return {"kind": a["kind"], "size": _size(a), "lines": _lines(a), "text": a["text"] or "", "note": note,
            "whole": a["complete"] is not False}


def _guards(rows: list[dict]) -> tuple[list[dict], int]:
    """A compile's guard rows (log order), at most ``MAX_GUARDS``, and how many are left out."""
    out = []
    for g in rows[:MAX_GUARDS]:
        where = ""
        if g["user_filename"] or g["user_lineno"] is not None:
            where = f"{normalise(g['user_filename'] or '?')}:{'?' if g['user_lineno'] is None else g['user_lineno']}"
            if g["user_function"]:
                where += f" in {g['user_function']}"
        out.append({"source": g["source"], "type": g["guard_type"] or "", "guard": g["guard"] or "",
                    "guarded": g["guarded"] or "", "reason": g["reason"] or "", "code": g["user_code"] or "",
                    "where": where, "line": g["lineno"]})
    return out, max(0, len(rows) - MAX_GUARDS)


def parse_stack(text: str | None) -> list[tuple[str, str]]:
    """The frames of a stack text as the parser writes it (``File "f", line N, in fn`` then its code,
    indented): (frame, code), outermost first."""
    frames: list[tuple[str, str]] = []
    for line in (text or "").split("\n"):
        if line.startswith("File "):
            frames.append((line, ""))
        elif line.startswith("    ") and frames and not frames[-1][1]:
            frames[-1] = (frames[-1][0], line.strip())
    if len(frames) > MAX_FRAMES:  # the innermost: where the user's code called into the compiled function
        frames = [(f"… {len(frames) - MAX_FRAMES + 1} outer frames", "")] + frames[-(MAX_FRAMES - 1):]
    return frames


def stack_trie(entries: list[dict], sections: int = MAX_SECTIONS) -> list[dict]:
    """tlparse's stack trie: the compiles' stacks merged from their outermost frame, each node a frame
    (``frame``, ``code``) with the compiles whose stack ends there (``ids``: id, and the anchor of its
    section: the first ``sections`` entries have one) and its ``children``, in the order first seen."""
    root: dict = {"children": {}, "ids": []}
    for i, e in enumerate(entries):
        if not e["frames"]:
            continue
        node = root
        for frame in e["frames"]:
            node = node["children"].setdefault(frame, {"children": {}, "ids": []})
        node["ids"].append({"id": e["id"], "anchor": e["anchor"] if i < sections else None})

    def listed(node: dict) -> list[dict]:
        return [{"frame": f, "code": c, "ids": n["ids"], "children": listed(n)} for (f, c), n in node["children"].items()]

    return listed(root)


def view_links(d: SiteData, here: str = "") -> dict[str, tuple[Markup, Markup | None]]:
    """series -> (its view, the section of its first compile that generated code, when the view has
    that section) of each program with a view."""
    series = viewed_series(d)
    if not series:
        return {}
    rows = d.compile_rows.filter(pl.col("series").is_in(series))
    keys = rows.select("path", "compile_id", "series").unique()
    arts = _of(None if d.compile_artifacts is None else d.compile_artifacts.select("path", "compile_id", "tlparse_id",
                                                                                   "lineno"), keys)
    links = {}
    for s in series:
        of = pl.col("series") == s
        compiles = rows.filter(of).select("path", "compile_id", "tlparse_id", "phase", "lineno", "kernels",
                                          "output_codes").to_dicts()
        order = list(_attempts(compiles, arts.filter(of).to_dicts() if arts.height else []))[:MAX_SECTIONS]
        coded = {(r["path"], r["tlparse_id"]) for r in compiles
                 if r["phase"] == "forward" and ((r["kernels"] or 0) > 0 or (r["output_codes"] or 0) > 0)}
        first = next((k for k in order if k in coded), None)
        links[s] = view_link(s, here, fragment=compile_anchor(*first)) if first else None
    return {s: (view_link(s, here), links.get(s)) for s in series}
