"""Raw bytes → lines: gzip by magic, damage reported with its line, never raised."""

import gzip
import io
import tracemalloc
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import SEEDS
from transforms.reading import LineReader, ReadLimitError, strip_gz

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
    cut_line = len(lines) if not lines[-1].endswith("\n") else len(lines) + 1  # a line cut mid-way is read too
    assert reader.error.startswith(f"line {cut_line}: compressed stream ends early")
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


# --- Bounded reading (issue 11, item 9) ---

_PIECES = [b"a", b"bc", b"\n", b"\r", b"\r\n", b"\xc3\xa9", b"\xe2\x82\xac", b"\xff", b"\x0c", b"\xe2\x80\xa8", b"\x00"]


class _Trickle(io.RawIOBase):
    """A stream that hands out a few bytes per read, as a socket or a slow bucket can."""

    def __init__(self, data: bytes, sizes: list[int]):
        self.data, self.sizes, self.pos = data, sizes or [1], 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self.sizes[self.pos % len(self.sizes)], len(self.data) - self.pos)
        buffer[:n] = self.data[self.pos : self.pos + n]
        self.pos += n
        return n


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.sampled_from(_PIECES), max_size=60), sizes=st.lists(st.integers(1, 9), max_size=5),
       cap=st.integers(1, 12))
def test_lines_are_those_of_a_text_file_and_the_cap_is_exact(pieces, sizes, cap):
    data = b"".join(pieces)
    expected = list(io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="replace", newline=None))
    assert list(LineReader(io.BufferedReader(_Trickle(data, sizes), 4))) == expected
    longest = [i for i, line in enumerate(data.splitlines(), 1) if len(line) > cap]  # bytes, newline excluded
    reader = LineReader(io.BufferedReader(_Trickle(data, sizes), 4), max_line_bytes=cap)
    if not longest:
        assert list(reader) == expected
    else:
        with pytest.raises(ReadLimitError) as caught:
            list(reader)
        assert caught.value.lineno == longest[0] and caught.value.limit == "max_line_bytes"
        assert str(caught.value) == (f"line {longest[0]} is longer than max_line_bytes ({cap} bytes); "
                                     "raise --max-line-bytes to read it")


def test_a_long_line_is_never_held():
    stream = io.BufferedReader(_Trickle(b"x" * (64 << 20), [1 << 20]), 1 << 20)  # 64 MiB, no newline
    tracemalloc.start()
    try:
        with pytest.raises(ReadLimitError, match="^line 1 is longer than max_line_bytes"):
            list(LineReader(stream, max_line_bytes=1 << 20))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20


def test_decompressed_bytes_are_counted():
    packed = gzip.compress(SEED_HLO)
    reader = LineReader(io.BytesIO(packed), max_bytes=len(SEED_HLO))
    assert "".join(reader).encode() == SEED_HLO and reader.bytes_read == len(SEED_HLO)
    reader = LineReader(io.BytesIO(packed), max_bytes=len(SEED_HLO) - 1)
    with pytest.raises(ReadLimitError, match=r"max_dump_bytes \(.*\) of text after decompression") as caught:
        list(reader)
    assert caught.value.limit == "max_dump_bytes" and 0 < caught.value.lineno <= 2104


def test_the_time_limit_stops_between_chunks():
    reader = LineReader(io.BytesIO(SEED_HLO), max_seconds=0)
    with pytest.raises(ReadLimitError, match=r"^line 1: the parse took longer than max_seconds \(0 s\)"):
        next(iter(reader))


@settings(max_examples=40, deadline=None)
@given(cut=st.integers(2, len(gzip.compress(SEED_HLO))))
def test_a_cut_gzip_gives_every_byte_it_holds(cut):
    packed = gzip.compress(SEED_HLO)[:cut]
    decodable = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(packed)
    assert "".join(LineReader(io.BytesIO(packed))).encode() == decodable


def _head_cases() -> list[bytes]:
    """Compressed heads as stage_object cuts them (HEAD_BYTES + 1024): every gzip dump of the
    sample bucket and the corpus, two gzip members, a stream cut inside its first member."""
    from pathlib import Path

    from transforms.reading import HEAD_BYTES

    root = Path(__file__).parents[1] / "data"
    heads = [p.read_bytes()[: HEAD_BYTES + 1024] for p in sorted(root.rglob("*.gz"))]
    text = b"".join(b"%%fusion.%d = f32[128,%d]{1,0} add(p0, p1)\n" % (i, i) for i in range(20_000))
    heads.append(gzip.compress(text[:30_000]) + gzip.compress(text[30_000:]))
    heads.append(gzip.compress(text)[:5_000])
    return heads


def test_a_head_only_reader_sees_the_head_a_whole_reader_sees():
    """``head_only`` (telling a dump's kind) inflates a head's worth; the head is the same."""
    heads = _head_cases()
    assert len(heads) > 100
    for raw in heads:
        assert LineReader(io.BytesIO(raw), head_only=True).head == LineReader(io.BytesIO(raw)).head


@pytest.mark.parametrize("odd", ["", "\x85", "\u2028", "\v\f\x1c"])
def test_lines_read_counts_each_line_as_it_is_handed_out(odd):
    """Across chunks (1 MiB each), whichever way a chunk is cut into lines: only \\n and \\r end a line
    (str.splitlines would also end one at \\v, \\x85, \\u2028 ...)."""
    lines = [f"line {i}{odd if i % 1000 == 7 else ''} {'x' * (i % 97)}\n" for i in range(60_000)]
    reader = LineReader(io.BytesIO("".join(lines).encode() + b"tail"))
    got = []
    for i, line in enumerate(reader, 1):
        got.append(line)
        assert reader.lines_read == i
    assert got == [*lines, "tail"] and reader.error is None
