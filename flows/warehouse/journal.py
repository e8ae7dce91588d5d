"""The writer's journal: what one publish changed, so the standby copy catches up cheaply.

The writer works on a standby copy of the warehouse (``store.Warehouse``). The standby
is the generation before the published one; to bring it level, the writer replays the
statements that made the published generation out of it — they were recorded here when
that publish was written. A night's journal holds its own statements and inputs, so
catching up costs what the last night wrote, never a copy of the whole history.

- ``Recorder`` wraps the writer's DuckDB connection. Every statement that writes
  (INSERT, UPDATE, DELETE, CREATE, ALTER, DROP, COMMENT, CHECKPOINT) is recorded with its
  parameters once it succeeded; a rolled-back transaction's are dropped. Frames the
  statement reads through ``register`` are saved as Parquet. (Records rows are files of
  the records store, shared by both generations: the journal lists them, never copies.)
- ``write``/``replay``: the journal directory (``journal.json`` plus those files).

Replay is statement-based: the same statements on the same prior state give the same
tables. The journal also records each table's row count after the night; a replay
that does not reach them is refused (the writer then copies the whole file).
"""

from __future__ import annotations

import json
import os
import re
from datetime import date, datetime
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from flows.warehouse.reads import registered
from flows.warehouse.transactions import transaction

FORMAT = 1
# CHECKPOINT too: where the writer frees space before it writes, so does the replay.
_WRITES = re.compile(r"^\s*(INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|COMMENT|CHECKPOINT)\b", re.IGNORECASE)


class JournalError(RuntimeError):
    """A journal that cannot be written or replayed: the writer falls back to a full copy."""


def _encode(value: Any) -> Any:
    if isinstance(value, datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, date):
        return {"$date": value.isoformat()}
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise JournalError(f"cannot journal a parameter of type {type(value).__name__}")


def _decode(value: Any, directory: Path) -> Any:
    if isinstance(value, dict):
        if "$datetime" in value:
            return datetime.fromisoformat(value["$datetime"])
        if "$date" in value:
            return date.fromisoformat(value["$date"])
        if "$kept" in value:  # a staged file a schema-9 writer linked into its journal
            return str(directory / value["$kept"])
    if isinstance(value, list):
        return [_decode(v, directory) for v in value]
    return value


class Recorder:
    """A DuckDB connection that records its writes into ``directory`` (see the module doc).
    Reads and anything else pass through to the connection."""

    def __init__(self, con: duckdb.DuckDBPyConnection, directory: Path):
        self._con = con
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.steps: list[dict] = []
        self._pending: list[dict] | None = None  # inside begin(): committed steps only
        self._registered: dict[str, Any] = {}
        self._saved: dict[str, str] = {}  # registered name -> file of its current object
        self._files = 0
        self.broken: str | None = None  # why this journal cannot be replayed (then it is not written)

    # -- recording
    def _file(self, suffix: str) -> Path:
        self._files += 1
        return self.directory / f"{self._files:06d}{suffix}"

    def _record(self, sql: str, params: Any = None, *, many: bool = False) -> None:
        if self.broken or not _WRITES.match(sql):
            return
        try:
            tables = {}
            for name, obj in self._registered.items():
                if re.search(rf"\b{re.escape(name)}\b", sql):
                    if name not in self._saved:
                        path = self._file(".parquet")
                        frame = obj if isinstance(obj, pa.Table) else obj.to_arrow() if isinstance(obj, pl.DataFrame) else None
                        if frame is None:
                            raise JournalError(f"cannot journal a registered {type(obj).__name__}")
                        pq.write_table(frame, path)
                        self._saved[name] = path.name
                    tables[name] = self._saved[name]
            encoded = None if params is None else _encode(params)
            step = {"sql": sql, "params": encoded, "many": many, "tables": tables}
        except (JournalError, OSError) as exc:
            self.broken = str(exc)
            return
        (self._pending if self._pending is not None else self.steps).append(step)

    # -- the connection's surface
    def execute(self, sql: str, params: Any = None):
        result = self._con.execute(sql, params) if params is not None else self._con.execute(sql)
        self._record(sql, params)
        return result

    def executemany(self, sql: str, params: Any):
        result = self._con.executemany(sql, params)
        self._record(sql, [list(p) for p in params], many=True)
        return result

    def sql(self, sql: str, *args, **kwargs):
        result = self._con.sql(sql, *args, **kwargs)
        self._record(sql, kwargs.get("params") or (args[1] if len(args) > 1 else None))
        return result

    def register(self, name: str, obj: Any):
        self._registered[name] = obj
        self._saved.pop(name, None)
        return self._con.register(name, obj)

    def unregister(self, name: str):
        self._registered.pop(name, None)
        self._saved.pop(name, None)
        return self._con.unregister(name)

    def begin(self):
        self._con.begin()
        self._pending = []

    def commit(self):
        self._con.commit()
        if self._pending is not None:
            self.steps.append({"tx": self._pending})
        self._pending = None

    def rollback(self):
        self._con.rollback()
        self._pending = None

    def __getattr__(self, name: str):
        return getattr(self._con, name)

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        return self._con


def write(recorder: Recorder, facts: dict) -> None:
    """Seal the journal: its steps and ``facts`` (row counts, the files it applies to)."""
    if recorder.broken:
        raise JournalError(recorder.broken)
    write_json(recorder.directory / "journal.json", {"format": FORMAT, "steps": recorder.steps, **facts})


def write_json(path: Path, body: dict) -> None:
    """``body`` as JSON at ``path``, on disk (fsync) before this returns."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(body, f)
        f.flush()
        os.fsync(f.fileno())


def read(directory: Path) -> dict | None:
    try:
        body = json.loads((Path(directory) / "journal.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) and body.get("format") == FORMAT else None


def replay(con: duckdb.DuckDBPyConnection, directory: Path, body: dict) -> None:
    """Apply the journal's steps to ``con`` (the standby); raises ``JournalError``."""
    directory = Path(directory)

    def run(step: dict) -> None:
        with registered(con, **{name: pq.read_table(directory / file) for name, file in step["tables"].items()}):
            params = _decode(step["params"], directory)
            if step["many"]:
                con.executemany(step["sql"], params)
            elif params is None:
                con.execute(step["sql"])
            else:
                con.execute(step["sql"], params)

    try:
        for step in body["steps"]:
            if "tx" in step:
                with transaction(con):
                    for inner in step["tx"]:
                        run(inner)
            else:
                run(step)
    except (duckdb.Error, OSError, KeyError, TypeError) as exc:
        raise JournalError(f"replay of {directory} failed: {exc}") from exc
    finally:
        pa.default_memory_pool().release_unused()  # the replayed frames' memory back to the system


__all__ = ["JournalError", "Recorder", "read", "replay", "write", "write_json"]
