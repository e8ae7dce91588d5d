"""Bad input is normal input: every kind of damage gets a verdict, never an exception.

These go through the driver, as the nightly run does. Format-specific truncation
properties live next to each parser's tests.
"""

import gzip
import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import SEEDS
from transforms.parse import parse_dump
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
def test_any_byte_cut_of_a_gzipped_seed_gets_a_verdict(seed, fraction):
    packed = gzip.compress(SEED_BYTES[seed], compresslevel=1)
    parsed = _parse(packed[: int(len(packed) * fraction)], "night/job/dump.txt.gz")
    assert parsed.status in (Status.OK, Status.PARTIAL, Status.FAILED)
    if parsed.status is Status.FAILED:
        assert parsed.summary.errors and parsed.tables == {}
