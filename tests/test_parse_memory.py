"""Parsing holds no dump whole (issue 14): ``dumpscope parse`` and the nightly's staging take
a dump's records a batch at a time and let each go before the next is parsed.

The dump: the real torch_xla Llama 2 module of data/corpus (3,517 instructions), 20 times
in one file as 20 modules (the HLO parser reads many modules a file): 70,340 instruction
rows, more than one batch (``BATCH_ROWS``). Each test wraps ``iter_dump`` where its caller
looks it up, to see how many batches it already yielded are still alive when the caller
asks for the next: 1 (the one the caller's loop still names) when batches are let go, all
of them when they are collected. Peak RSS itself is measured by benchmarks/bench_real.py.
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
import sys
import weakref
from pathlib import Path

import fsspec
import polars as pl
import pyarrow.parquet as pq
import pytest

from flows.commands import parse as parse_files
from flows.ingest import staging
from flows.ingest.bucket import list_objects
from transforms.parse import iter_dump, parse_dump
from transforms.records import BATCH_ROWS, TableBatch

SOURCE = Path(__file__).resolve().parents[1] / "data/corpus/torch_xla_llama2_tp1_pp1.before_optimizations.txt.gz"
SOURCE_INSTRUCTIONS = 3517  # hlo.instructions of the source module (tests/test_corpus.py parses it)
COPIES = 20
NAME = "module_0000.llama2_x20.before_optimizations.txt"


@pytest.fixture(scope="module")
def big_dump(tmp_path_factory) -> Path:
    text = gzip.decompress(SOURCE.read_bytes()).decode()
    header, _, body = text.partition("\n")
    module = header.split()[1].rstrip(",")
    copies = [header.replace(module, f"{module}_copy{k}", 1) + "\n" + body for k in range(COPIES)]
    path = tmp_path_factory.mktemp("big") / NAME
    path.write_text("".join(c if c.endswith("\n") else c + "\n" for c in copies))
    return path


class BatchWatch:
    """``iter_dump`` that notes, each time its caller asks for the next item, how many of
    the batches it yielded before are still alive."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, weakref.ref]] = []
        self.most_alive = 0

    def __call__(self, *args, **kwargs):
        for item in iter_dump(*args, **kwargs):
            self.most_alive = max(self.most_alive, sum(ref() is not None for _, ref in self.batches))
            if isinstance(item, TableBatch):
                self.batches.append((item.table, weakref.ref(item.frame)))
            yield item

    def count(self, table: str) -> int:
        return sum(t == table for t, _ in self.batches)


class Stdout:
    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)


def test_parse_json_prints_every_row_a_slice_at_a_time_holding_one_batch(big_dump, monkeypatch):
    watch, out = BatchWatch(), Stdout()
    monkeypatch.setattr(parse_files, "iter_dump", watch)
    monkeypatch.setattr(sys, "stdout", out)
    failed = parse_files.print_parsed([big_dump], as_json=True, table="hlo_instructions", limit=0, summary=False)
    monkeypatch.undo()

    assert failed == 0
    assert watch.count("hlo_instructions") == -(-COPIES * SOURCE_INSTRUCTIONS // BATCH_ROWS) == 2
    assert len(watch.batches) > COPIES  # and one hlo_modules and hlo_computations batch per module
    assert watch.most_alive == 1
    # Written in pieces of at most _JSON_ROWS rows, never as one string of every row.
    assert max(w.count('"opcode": ') for w in out.writes) == parse_files._JSON_ROWS
    got = json.loads("".join(out.writes))
    assert got["status"] == "ok" and got["metrics"]["hlo.instructions"] == COPIES * SOURCE_INSTRUCTIONS
    assert got["metrics"]["hlo.modules"] == COPIES
    whole = parse_dump(io.BytesIO(big_dump.read_bytes()), str(big_dump)).tables["hlo_instructions"]
    assert got["table"] == {"name": "hlo_instructions", "rows": whole.to_dicts()}


def test_parse_without_a_table_lets_every_batch_go(big_dump, monkeypatch):
    watch, out = BatchWatch(), Stdout()
    monkeypatch.setattr(parse_files, "iter_dump", watch)
    monkeypatch.setattr(sys, "stdout", out)
    parse_files.print_parsed([big_dump], as_json=True, table=None, limit=20, summary=False)
    monkeypatch.undo()

    assert watch.count("hlo_instructions") == 2 and watch.most_alive == 1
    got = json.loads("".join(out.writes))
    assert "table" not in got and got["metrics"]["hlo.instructions"] == COPIES * SOURCE_INSTRUCTIONS


def test_staging_writes_a_row_group_per_batch_as_they_come(big_dump, tmp_path, monkeypatch):
    fs = fsspec.filesystem("file")
    bucket = tmp_path / "bucket"
    (bucket / "2026-01-01" / "job").mkdir(parents=True)
    shutil.copyfile(big_dump, bucket / "2026-01-01" / "job" / NAME)
    [obj] = [o for o in list_objects(str(bucket)) if o.role.value == "dump"]
    watch = BatchWatch()
    monkeypatch.setattr(staging, "iter_dump", watch)
    res = staging.stage_object(fs, obj, tmp_path / "staging")

    assert res.parsed and res.status == "ok"
    assert watch.most_alive == 1
    meta = pq.ParquetFile(res.tables["hlo_instructions"]).metadata
    assert meta.num_row_groups == watch.count("hlo_instructions") == 2
    assert meta.num_rows == res.summary["rows"]["hlo_instructions"] == COPIES * SOURCE_INSTRUCTIONS
    assert pq.ParquetFile(res.tables["hlo_modules"]).metadata.num_row_groups == COPIES
    assert res.summary["rows"]["hlo_modules"] == COPIES
    # Written from string views (flows.ingest.staging._to_arrow), read back as the parser's frames.
    whole = parse_dump(io.BytesIO(big_dump.read_bytes()), obj.path, dump_id=res.sha256).tables
    for table, frame in whole.items():
        assert pl.read_parquet(res.tables[table]).equals(frame), table
    assert pl.read_parquet(res.tables["hlo_instructions"]).schema == whole["hlo_instructions"].schema


def test_staged_enum_tables_read_back_as_parsed(tmp_path):
    """ONNX report tables hold enums, which pyarrow cannot write as views: they keep the legacy export."""
    seed = Path(__file__).parent / "fixtures" / "seeds" / "000_d1eac3fb69f76648.txt"
    bucket = tmp_path / "bucket"
    (bucket / "2026-01-01" / "job").mkdir(parents=True)
    shutil.copyfile(seed, bucket / "2026-01-01" / "job" / seed.name)
    [obj] = [o for o in list_objects(str(bucket)) if o.role.value == "dump"]
    res = staging.stage_object(fsspec.filesystem("file"), obj, tmp_path / "staging")
    whole = parse_dump(io.BytesIO(seed.read_bytes()), obj.path, dump_id=res.sha256).tables
    assert whole["onnx_steps"].schema["status"] == pl.Enum(["ok", "failed", "skipped", "unknown"])
    assert set(res.tables) == set(whole) and res.summary["rows"]["onnx_op_counts"] == 96
    for table, frame in whole.items():
        got = pl.read_parquet(res.tables[table])
        assert got.equals(frame) and got.schema == frame.schema, table


def test_parse_prints_a_long_table_in_slices(capsys):
    """Without --json, a table longer than _SHOWN_ROWS is printed a slice at a time (rich's cost
    grows with the square of one table's rows), every row once, in order."""
    seed = Path(__file__).parent / "fixtures" / "seeds" / "001_a0c5460ce1af2dbe.txt"
    parse_files.print_parsed([seed], as_json=False, table="hlo_instructions", limit=0, summary=False)
    heads = [line for line in capsys.readouterr().out.splitlines() if line.startswith("rows ")]
    assert parse_files._SHOWN_ROWS == 256
    assert heads == [f"rows {a + 1:,}-{min(a + 256, 1886):,} of 1,886" for a in range(0, 1886, 256)]
