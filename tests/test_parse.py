"""The driver: classification, identity columns, statuses, errors that name the file."""

import gzip
import io

import polars as pl
import pytest

from tests.conftest import SEEDS
from transforms.parsers.formats import all_table_docs, all_tables, classify, known_kinds, module_for
from transforms.naming import program_from_path
from transforms.parse import iter_dump, kind_of, parse_dump
from transforms.records import DumpKind, DumpSummary, Status, TableBatch

SEED_KINDS = {
    "000_d1eac3fb69f76648.txt": (DumpKind.ONNX_REPORT, None),
    "001_a0c5460ce1af2dbe.txt": (DumpKind.XLA_HLO, "after_optimizations"),
    "002_5960cad812240b69.txt": (DumpKind.XLA_BUFFER_ASSIGNMENT, None),
    "003_f2a980d458b1ffe8.txt": (DumpKind.INDUCTOR_IR, "post_fusion"),
    "004_83a80cec1e7cc5e6.txt": (DumpKind.XLA_HLO, "after_optimizations"),
}


def _parse(data: bytes, name: str = "x.txt"):
    return parse_dump(io.BytesIO(data), name)


@pytest.mark.parametrize("name", sorted(SEED_KINDS))
def test_each_seed_is_classified_and_parses_ok(name):
    data = (SEEDS / name).read_bytes()
    kind, stage = SEED_KINDS[name]
    assert classify(name, data[:65536].decode(errors="replace")) is kind
    parsed = _parse(data, name)
    assert parsed.summary.kind is kind
    assert parsed.status is Status.OK, parsed.summary.errors
    if stage:
        assert parsed.summary.stage == stage
    assert parsed.summary.metrics
    for table, frame in parsed.tables.items():
        assert frame.schema == pl.Schema({"dump_id": pl.String, "parser_version": pl.Int16, **all_tables()[table]})


def test_gzipped_seed_gives_the_same_result():
    data = (SEEDS / "004_83a80cec1e7cc5e6.txt").read_bytes()
    plain, packed = _parse(data, "m.txt"), _parse(gzip.compress(data), "m.txt.gz")
    assert packed.summary.metrics == plain.summary.metrics
    assert packed.tables["hlo_instructions"].equals(plain.tables["hlo_instructions"])


def test_gzip_cut_short_is_partial_and_names_file_and_line():
    packed = gzip.compress((SEEDS / "004_83a80cec1e7cc5e6.txt").read_bytes())
    parsed = _parse(packed[: len(packed) // 2], "run/job/m.txt.gz")
    assert parsed.status is Status.PARTIAL
    assert any(e.startswith("run/job/m.txt.gz: line ") and "compressed stream ends early" in e for e in parsed.summary.errors)
    assert 0 < parsed.summary.metrics["hlo.instructions"] < 8217


def test_unknown_files_are_recorded_not_errors():
    for data in (b"", b"hello world\n", bytes(range(256)) * 50, b"\x89PNG\r\n\x1a\n" + b"\x00" * 100):
        parsed = _parse(data, "run/job/notes.bin")
        assert parsed.summary.kind is DumpKind.UNKNOWN
        assert parsed.status is Status.OK and parsed.tables == {}


def test_identity_columns_are_prepended():
    batches = [b for b in iter_dump(io.BytesIO((SEEDS / "001_a0c5460ce1af2dbe.txt").read_bytes()), "a.txt", dump_id="abc")
               if isinstance(b, TableBatch)]
    assert batches and all(b.frame.columns[:2] == ["dump_id", "parser_version"] for b in batches)
    assert all(b.frame["dump_id"].unique().to_list() == ["abc"] for b in batches)


def test_a_crashing_parser_fails_that_file_only(monkeypatch):
    import transforms.parsers.xla_hlo as hlo

    def broken(lines):
        yield from ()
        raise KeyError("boom")

    monkeypatch.setattr(hlo, "parse", broken)
    parsed = _parse(b"HloModule m\n", "night/job/m.txt")
    assert parsed.status is Status.FAILED and parsed.tables == {}
    assert parsed.summary.errors[0].startswith("night/job/m.txt: line ")
    assert "internal parser error KeyError" in parsed.summary.errors[0]


def test_parse_error_names_file_and_line(monkeypatch):
    import transforms.parsers.xla_hlo as hlo
    from transforms.records import ParseError

    def refusing(lines):
        yield from ()
        raise ParseError("not HLO", 3)

    monkeypatch.setattr(hlo, "parse", refusing)
    parsed = _parse(b"HloModule m\n", "a/b.txt")
    assert parsed.summary.errors == ["a/b.txt: line 3: not HLO"]
    assert parsed.status is Status.FAILED


def test_every_table_and_column_is_documented():
    docs = all_table_docs()
    for table, schema in all_tables().items():
        assert docs[table].get(""), f"{table} has no description"
        missing = [c for c in schema.names() if not docs[table].get(c)]
        assert not missing, f"{table}: undocumented columns {missing}"
    # Each format's own surface: a parser version, and docs for exactly its tables and columns
    # (no doc left for a table or column that is gone).
    for kind in known_kinds():
        parser = module_for(kind)
        assert isinstance(parser.PARSER_VERSION, int), parser.__name__
        assert set(parser.TABLE_DOCS) == set(parser.TABLES), parser.__name__
        for table, schema in parser.TABLES.items():
            assert set(parser.TABLE_DOCS[table]) == {"", *schema.names()}, (parser.__name__, table)


@pytest.mark.parametrize(
    "path, program",
    [
        ("2026-11-20/jax-jit/module_0007.jit_train_step.cpu_after_optimizations-buffer-assignment.txt.gz", "jit_train_step"),
        ("module_0012.jit_train_step.before_optimizations.txt", "jit_train_step"),
        ("x/torchinductor/model__0_forward_1.0/ir_post_fusion.txt", "model__0_forward_1.0"),
        ("002_5960cad812240b69.txt", "002_5960cad812240b69"),
        ("2026-11-18/torch-onnx/onnx_export_2026-11-18_02-01-35-123456_success.md.gz", "torch-onnx"),
        ("onnx_export_2026-11-18_02-01-35-123456_conversion.md", "onnx_export"),
    ],
)
def test_program_from_path(path, program):
    assert program_from_path(path) == program


def test_summary_status_rules():
    assert DumpSummary(DumpKind.XLA_HLO).status is Status.OK
    assert DumpSummary(DumpKind.XLA_HLO, truncated=True).status is Status.PARTIAL
    assert DumpSummary(DumpKind.XLA_HLO, errors=["line 1: x"]).status is Status.PARTIAL
    assert DumpSummary(DumpKind.XLA_HLO, failed=True).status is Status.FAILED


def test_status_and_errors_agree_even_when_a_parser_forgets(monkeypatch):
    import transforms.parsers.xla_hlo as hlo

    def forgetful(lines):
        for _ in lines:
            pass
        yield DumpSummary(DumpKind.XLA_HLO, truncated=True)

    monkeypatch.setattr(hlo, "parse", forgetful)
    parsed = _parse(b"HloModule m\n\nENTRY e {\n", "night/job/m.txt")
    assert parsed.status is Status.PARTIAL
    assert parsed.summary.errors == [
        "night/job/m.txt: line 3: the dump ends before its structure is complete (cut short?)"]


def test_the_kind_comes_from_the_text_then_the_name():
    assert kind_of("r/j/notes.txt", "HloModule m\n") is DumpKind.XLA_HLO
    assert kind_of("r/j/module_0001.jit_f.before_optimizations.txt.gz", "") is DumpKind.XLA_HLO
    assert kind_of("r/j/module_0001.jit_f.cpu_after_optimizations-buffer-assignment.txt", "\x00\x01") \
        is DumpKind.XLA_BUFFER_ASSIGNMENT
    assert kind_of("r/j/x-memory-usage-report.txt", "BufferAssignment:\n") is DumpKind.XLA_BUFFER_ASSIGNMENT
    assert kind_of("r/j/onnx_export_2026-11-18_02-01-35-123456_success.md", "") is DumpKind.ONNX_REPORT
    assert kind_of("r/j/compiler_figures.json", "") is DumpKind.UNKNOWN
