"""Series identity: one program of one job, followed night after night.

A series is ``(job, kind, stage, program)`` with the program name normalized, so
that compilers renumbering their programs between runs does not break it:

1. An override wins: the run's ``run.json`` ``"series": {"<program>": "<name>"}``,
   then the settings file's ``[series]`` table (``"<regex>" = "<name>"``, the regex
   matching the whole program name; ``\\1`` refers to its groups).
2. Otherwise the compiler's counters are stripped:
   - XLA: ``module_0007.jit_train_step`` → ``jit_train_step`` and
     ``SyncTensorsGraph.2143`` → ``SyncTensorsGraph`` (a ``.<digits>`` suffix, and a
     ``module_<digits>.`` prefix);
   - Inductor debug directories ``model__0_forward_1.0`` → ``model__0_forward``
     (``<name>__<aot id>_<forward|backward|inference>_<compile id>``: the compile id goes, the
     AOT graph id stays: it is the graph's index in the model, ``model__0`` and ``model__1`` on
     either side of a graph break);
   - ONNX export artifacts: a date/time stamp and what follows it is dropped
     (``onnx_export_2026-11-20_02-01-35-123456_success`` → ``onnx_export``);
   - torch.compile programs of a TORCH_TRACE log, ``<co_name> at <co_filename>:<line>``, keep the
     file's name without its directories (``forward at /src/pkg/model.py:19`` →
     ``forward at model.py:19``): a series id has no ``/`` of the program's, and the name reads.
3. Programs of one run and job that normalize to the same name stay apart: in path
   order (the order the compiler wrote them; programs of one dump in name order), the first keeps the name and the next
   ones get ``#2``, ``#3``... (a job compiling ``jit_step`` for two input shapes has
   two series, ``jit_step`` and ``jit_step#2``).

A dump that gives each program's figures (a TORCH_TRACE log: its metric rows name their
program, ``flows.warehouse.loading.metric_rows``) has one series per program (``programs``).

The series id reads ``<job>/<program>/<kind>[/<stage>]``, e.g.
``jax-jit/jit_train_step/xla_hlo/after_optimizations``.
"""

from __future__ import annotations

import re
from typing import Mapping

import polars as pl

_XLA_MODULE_PREFIX = re.compile(r"^module_\d+\.")
_NUMERIC_SUFFIX = re.compile(r"(?:\.\d+)+$")
_INDUCTOR_GRAPH = re.compile(r"^(?P<graph>.*?__\d+_(?:forward|backward|inference))(?:_[\d.]+)?$")
_TORCH_PROGRAM = re.compile(r"^(?P<name>\S+) at (?:.*[/\\])?(?P<file>[^/\\]+):(?P<line>\d+)$")
_TIMESTAMP = re.compile(r"[_-]?\d{4}-\d{2}-\d{2}(?:[_T -]\d{2}[-:]\d{2}(?:[-:]\d{2})?(?:[-.]\d+)?)?.*$")


def normalize_program(program: str) -> str:
    """The program's name without the compiler's run-dependent counters (rule 2)."""
    if (m := _TORCH_PROGRAM.match(program)) is not None:
        return f"{m['name']} at {m['file']}:{m['line']}"
    name = _XLA_MODULE_PREFIX.sub("", program)
    if (m := _INDUCTOR_GRAPH.match(name)) is not None:
        return m["graph"]
    name = _TIMESTAMP.sub("", name) or name
    return _NUMERIC_SUFFIX.sub("", name) or name


def compile_overrides(patterns: Mapping[str, str]) -> list[tuple[re.Pattern[str], str]]:
    """The settings file's ``[series]`` table, compiled (invalid regexes raise ValueError)."""
    out = []
    for pattern, name in patterns.items():
        try:
            out.append((re.compile(pattern), str(name)))
        except re.error as e:
            raise ValueError(f"[series] pattern {pattern!r}: {e}") from None
    return out


def series_program(program: str, run_overrides: Mapping[str, str] | None = None,
                   overrides: list[tuple[re.Pattern[str], str]] = ()) -> str:
    """Rules 1 and 2 for one program name."""
    if run_overrides and program in run_overrides:
        return str(run_overrides[program])
    for pattern, name in overrides:
        if (m := pattern.fullmatch(program)) is not None:
            return m.expand(name)
    return normalize_program(program)


SERIES_SCHEMA = pl.Schema({
    "path": pl.String, "run_id": pl.String, "job": pl.String, "kind": pl.String, "stage": pl.String,
    "program": pl.String, "series_program": pl.String, "series": pl.String,
})
SERIES_DOCS = {
    "": "The series of each dump path: which program of which job it shows, under the name that stays the same across runs (docs: series identity).",
    "path": "Dump path (dumps.path).",
    "run_id": "Run of the dump.",
    "job": "Job of the dump.",
    "kind": "Dump format.",
    "stage": "Compiler stage (NULL when the format has none).",
    "program": "Program name as the dump gives it (dumps.program), counters included.",
    "series_program": "Program name normalized across runs: counters stripped, an override applied, #2, #3... for programs colliding within one run.",
    "series": "Series id <job>/<series_program>/<kind>[/<stage>].",
}


def assign_series(dumps: pl.DataFrame, run_overrides: Mapping[str, Mapping[str, str]] | None = None,
                  overrides: list[tuple[re.Pattern[str], str]] = (), programs: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per dump path (kind ``unknown`` left out) with its series (rules 1-3); one per
    program for the paths of ``programs``.

    ``dumps``: path, run_id, job, kind, stage, program. ``run_overrides``: run_id →
    {program: name} from run.json. ``programs`` (path, program): the programs of the dumps whose
    metric rows name programs other than the dump's (``per_program_paths``).
    """
    run_overrides = run_overrides or {}
    if programs is not None and not programs.is_empty():
        programs = programs.select(pl.col("path", "program").cast(pl.String)).unique()
        split = dumps.join(programs.select("path").unique(), on="path", how="semi").drop("program")
        dumps = pl.concat([dumps.join(programs, on="path", how="anti"),
                           split.join(programs, on="path").select(dumps.columns).cast(dict(dumps.schema))])
    frame = dumps.filter(pl.col("kind").is_not_null() & (pl.col("kind") != "unknown") & pl.col("program").is_not_null())
    # Few distinct (run, program) pairs: resolve the names in Python, join back.
    pairs = frame.select("run_id", "program").unique()
    names = [series_program(p, run_overrides.get(r), overrides) for r, p in pairs.iter_rows()]
    pairs = pairs.with_columns(pl.Series("base", names, pl.String))
    frame = frame.join(pairs, on=["run_id", "program"], how="left")
    # Rule 3: dumps colliding on one name (of a kind and stage) get #2, #3... in path order.
    frame = frame.sort("path", "program").with_columns(
        pl.int_range(1, pl.len() + 1).over("run_id", "job", "kind", "stage", "base").alias("ordinal"))
    frame = frame.with_columns(
        pl.when(pl.col("ordinal") > 1).then(pl.format("{}#{}", "base", "ordinal")).otherwise("base").alias("series_program")
    )
    sid = pl.concat_str([pl.col("job"), pl.col("series_program"), pl.col("kind"), pl.col("stage")], separator="/", ignore_nulls=True)
    return frame.with_columns(sid.alias("series")).select(SERIES_SCHEMA.names()).cast(dict(SERIES_SCHEMA)).sort("path", "program")
