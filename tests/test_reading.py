"""Raw bytes → lines: gzip by magic, damage reported with its line, never raised."""

import gzip
import io

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import SEEDS
from transforms.reading import LineReader, strip_gz

SEED_HLO = (SEEDS / "001_a0c5460ce1af2dbe.txt").read_bytes()


def test_plain_lines_and_head():
    reader = LineReader(io.BytesIO(b"HloModule m\n\nENTRY e {\n}\n"))
    assert reader.head.startswith("HloModule m")
    assert list(reader) == ["HloModule m\n", "\n", "ENTRY e {\n", "}\n"]
    assert reader.error is None and not reader.compressed


def test_gzip_is_read_transparently_whatever_the_name():
    reader = LineReader(io.BytesIO(gzip.compress(SEED_HLO)))
    assert reader.compressed
    assert reader.head.startswith("HloModule SyncTensorsGraph.2143")
    assert "".join(reader).encode() == SEED_HLO
    assert reader.error is None and reader.lines_read == 2104


def test_gzip_cut_short_ends_cleanly_with_the_line():
    packed = gzip.compress(SEED_HLO)
    reader = LineReader(io.BytesIO(packed[: len(packed) // 2]))
    lines = list(reader)
    assert 0 < len(lines) < 2104
    assert reader.error.startswith(f"line {len(lines) + 1}: compressed stream ends early")
    assert "".join(lines).encode() == SEED_HLO[: len("".join(lines).encode())]


def test_empty_and_binary():
    empty = LineReader(io.BytesIO(b""))
    assert empty.head == "" and list(empty) == [] and empty.error is None
    junk = LineReader(io.BytesIO(bytes(range(256)) * 100))
    assert "\x00" in junk.head


def test_gzip_header_only_is_an_error_not_an_exception():
    reader = LineReader(io.BytesIO(gzip.compress(SEED_HLO)[:5]))
    assert list(reader) == []
    assert reader.error is not None and reader.error.startswith("line 1:")


def test_strip_gz():
    assert strip_gz("a.txt.gz") == "a.txt" and strip_gz("a.txt") == "a.txt"


@settings(max_examples=40, deadline=None)
@given(cut=st.integers(2, len(gzip.compress(SEED_HLO))))  # below 2 bytes there is no gzip magic: plain text
def test_any_gzip_cut_yields_a_prefix(cut):
    reader = LineReader(io.BytesIO(gzip.compress(SEED_HLO)[:cut]))
    text = "".join(reader).encode()
    assert SEED_HLO.startswith(text)
