"""Bad input is normal input: every kind of damage gets a verdict, never an exception.

These go through the driver, as the nightly run does. Format-specific truncation
properties live next to each parser's tests.
"""

import gzip
import io
import time
import tracemalloc
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import SEEDS
from transforms.parse import ParseLimits, parse_dump
from transforms.records import DumpKind, Status

SEED_BYTES = {p.name: p.read_bytes() for p in sorted(SEEDS.glob("*.txt"))}
HEADS = {  # the first line of each format, to make damaged files of that kind
    name: data[: data.index(b"\n") + 1] for name, data in SEED_BYTES.items()
}


def _parse(data: bytes, name: str = "night/job/dump.txt"):
    return parse_dump(io.BytesIO(data), name)


@pytest.mark.parametrize("seed", sorted(SEED_BYTES))
def test_header_then_nothing(seed):
    parsed = _parse(HEADS[seed])
    assert parsed.summary.kind is not DumpKind.UNKNOWN
    assert parsed.status in (Status.OK, Status.PARTIAL, Status.FAILED)
    if parsed.status is not Status.OK:
        assert all(e.startswith("night/job/dump.txt: ") for e in parsed.summary.errors)


@pytest.mark.parametrize("seed", sorted(SEED_BYTES))
@pytest.mark.slow
def test_a_50_mb_line_after_the_header(seed):
    data = HEADS[seed] + b"x" * (50 * 1024 * 1024) + b"\n"
    parsed = _parse(data)
    assert parsed.summary.kind is not DumpKind.UNKNOWN
    assert parsed.status in (Status.OK, Status.PARTIAL, Status.FAILED)


def test_a_50_mb_single_line_without_newline_is_unknown():
    parsed = _parse(b"y" * (50 * 1024 * 1024))
    assert parsed.summary.kind is DumpKind.UNKNOWN and parsed.status is Status.OK


@pytest.mark.parametrize("seed", sorted(SEED_BYTES))
def test_binary_junk_in_the_middle(seed):
    data = SEED_BYTES[seed]
    mid = len(data) // 2
    parsed = _parse(data[:mid] + bytes(range(256)) * 64 + data[mid:])
    assert parsed.summary.kind is not DumpKind.UNKNOWN
    assert parsed.status in (Status.OK, Status.PARTIAL)


@pytest.mark.parametrize("seed", sorted(SEED_BYTES))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fraction=st.floats(0.0, 1.0))
@pytest.mark.slow
def test_any_byte_cut_of_a_gzipped_seed_gets_a_verdict(seed, fraction):
    packed = gzip.compress(SEED_BYTES[seed], compresslevel=1)
    parsed = _parse(packed[: int(len(packed) * fraction)], "night/job/dump.txt.gz")
    assert parsed.status in (Status.OK, Status.PARTIAL, Status.FAILED)
    if parsed.status is Status.FAILED:
        assert parsed.summary.errors and parsed.tables == {}


# --- Limits (issue 11, item 9): what one parse costs is bounded by a setting, not by the input ---


def _gzip_of_one_line(n_mib: int, prefix: bytes = b"") -> bytes:
    """gzip of ``prefix`` and ``n_mib`` MiB of 'a' with no newline, compressed 1 MiB at a time."""
    z = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b"a" * (1 << 20)
    return b"".join([z.compress(prefix), *(z.compress(block) for _ in range(n_mib)), z.flush()])


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return _gzip_of_one_line(200)  # ~200 KB holding a 200 MiB line


def _parse_measured(data: bytes, name: str, limits: ParseLimits):
    tracemalloc.start()
    try:
        t0 = time.perf_counter()
        parsed = parse_dump(io.BytesIO(data), name, limits=limits)
        return parsed, time.perf_counter() - t0, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_gzip_bomb_is_failed_by_the_line_cap_and_stays_cheap(bomb):
    name = "night/job/module_0001.bomb.after_optimizations.txt.gz"
    parsed, seconds, peak = _parse_measured(bomb, name, ParseLimits(max_line_bytes=1 << 20))
    assert parsed.status is Status.FAILED and parsed.summary.kind is DumpKind.XLA_HLO and parsed.tables == {}
    assert parsed.summary.errors == [
        f"{name}: line 1 is longer than max_line_bytes (1.0 MiB, 1,048,576 bytes); raise --max-line-bytes to read it"]
    assert parsed.summary.limit == "max_line_bytes"
    assert peak < 16 << 20 and seconds < 2  # the 200 MiB line is never held


def test_a_long_line_deep_in_a_real_dump_is_failed_with_its_line_number():
    head = b"HloModule m\n\nENTRY e {\n  p = f32[] parameter(0), metadata={op_name=\""
    parsed, _, peak = _parse_measured(_gzip_of_one_line(8, head), "night/job/m.txt.gz", ParseLimits(max_line_bytes=1 << 20))
    assert parsed.status is Status.FAILED and parsed.tables == {}
    assert parsed.summary.errors[0].startswith("night/job/m.txt.gz: line 4 is longer than max_line_bytes (1.0 MiB")
    assert peak < 16 << 20


def test_a_dump_over_max_dump_bytes_is_failed():
    data = SEED_BYTES["004_83a80cec1e7cc5e6.txt"]
    packed = gzip.compress(data, compresslevel=1)
    parsed = parse_dump(io.BytesIO(packed), "night/job/m.txt.gz", limits=ParseLimits(max_dump_bytes=1 << 20))
    assert parsed.status is Status.FAILED and parsed.tables == {} and parsed.summary.limit == "max_dump_bytes"
    (error,) = parsed.summary.errors
    assert error.startswith("night/job/m.txt.gz: line ") and error.endswith(
        "more than max_dump_bytes (1.0 MiB, 1,048,576 bytes) of text after decompression; raise --max-dump-bytes to read it")
    at_the_cap = parse_dump(io.BytesIO(packed), "night/job/m.txt.gz", limits=ParseLimits(max_dump_bytes=len(data)))
    assert at_the_cap.status is Status.OK


def test_a_parse_past_its_time_limit_is_failed():
    data = SEED_BYTES["004_83a80cec1e7cc5e6.txt"]
    parsed = parse_dump(io.BytesIO(data), "night/job/m.txt", limits=ParseLimits(max_seconds=0))
    assert parsed.status is Status.FAILED and parsed.tables == {} and parsed.summary.limit == "max_seconds"
    assert parsed.summary.errors == [
        "night/job/m.txt: line 1: the parse took longer than max_seconds (0 s); raise --parse-seconds to finish it"]
    assert parse_dump(io.BytesIO(data), "night/job/m.txt", limits=ParseLimits(max_seconds=60)).status is Status.OK


def test_limits_are_checked():
    assert ParseLimits() == ParseLimits(max_line_bytes=64 << 20, max_dump_bytes=4 << 30, max_seconds=600)
    with pytest.raises(ValueError, match="max_line_bytes"):
        ParseLimits(max_line_bytes=-1)
    with pytest.raises(ValueError, match="max_seconds"):
        ParseLimits(max_seconds=float("nan"))


# --- Empty and binary files under dump names (issue 11, item 10) ---

NAMED = {  # names the compilers give their dumps -> the kind the name promises
    "module_0000.jit_f.before_optimizations.txt": DumpKind.XLA_HLO,
    "module_0000.jit_f.cpu_after_optimizations.txt": DumpKind.XLA_HLO,
    "module_0000.jit_tiny.0001.HLO_passes_after_layout_assignment.after_fusion.before_fusion-wrapper.txt":
        DumpKind.XLA_HLO,
    "module_0000.jit_f.cpu_after_optimizations-buffer-assignment.txt": DumpKind.XLA_BUFFER_ASSIGNMENT,
    "module_0000.jit_f.cpu_after_optimizations-buffer-assignment-values.txt": DumpKind.XLA_BUFFER_ASSIGNMENT,
    "module_0000.jit_f.cpu_after_optimizations-live-range.txt": DumpKind.XLA_BUFFER_ASSIGNMENT,
    "module_0000.jit_f.cpu_after_optimizations-memory-usage-report.txt": DumpKind.XLA_MEMORY_USAGE_REPORT,
    "torchinductor/model__0_forward_1.0/ir_pre_fusion.txt": DumpKind.INDUCTOR_IR,
    "torchinductor/model__0_forward_1.0/ir_post_fusion.txt": DumpKind.INDUCTOR_IR,
    "torchinductor/model__0_forward_1.0/output_code.py": DumpKind.INDUCTOR_OUTPUT_CODE,
    "torch-onnx/onnx_export_2026-11-18_02-01-35-123456_success.md": DumpKind.ONNX_REPORT,
}
JUNK = bytes(range(256)) * 64


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
@pytest.mark.parametrize("name", sorted(NAMED))
def test_empty_and_binary_files_under_dump_names_are_failed(name, gz):
    path = f"night/job/{name}" + (".gz" if gz else "")
    for data, what in ((b"", "is empty"), (JUNK, "is binary, not "), (b"\n\n", ""), (b"hello\n", "")):
        parsed = _parse(gzip.compress(data) if gz else data, path)
        s = parsed.summary
        assert (s.kind, parsed.status, parsed.tables) == (NAMED[name], Status.FAILED, {}), (data[:10], s)
        assert len(s.errors) == 1 and s.errors[0].startswith(f"{path}: ") and what in s.errors[0], s.errors


@pytest.mark.parametrize("name", ["compiler_figures.json", "module_0000.jit_f.debug_options", "fx_graph_runnable.py",
                                  "debug.log", "module_0000.jit_f/module.mlir", "notes.md", "dump.txt"])
def test_empty_and_binary_files_under_other_names_stay_unknown(name):
    for data in (b"", JUNK, gzip.compress(b"")):
        parsed = _parse(data, f"night/job/{name}")
        assert (parsed.summary.kind, parsed.status, parsed.summary.errors) == (DumpKind.UNKNOWN, Status.OK, [])
