"""Decoded lines from the raw bytes of one dump, gzip or not, damage reported not raised.

Input: any binary stream (a local file, an fsspec/S3 object). The caller opens and
closes it; this module only reads. gzip is recognised by its magic bytes, not by the
name, so a renamed file still reads. Text is UTF-8 with undecodable bytes replaced:
binary junk becomes text the sniffer rejects instead of an exception. Lines end at
``\\n``, ``\\r\\n`` or ``\\r`` and are handed out ending in ``\\n`` (the last one
without it when the text does not end with a newline).

Guarantees: with ``max_line_bytes``, memory is bounded by it plus a 1 MiB buffer,
whatever the input (a gzip bomb too): the bytes are read in chunks, a line is only
decoded once its end is seen, and a line past the cap is never held whole. A stream that ends early or is corrupt mid-way
(a gzip cut short) ends the iteration cleanly and leaves the reason, with the line
it happened on, in ``LineReader.error``. Passing a limit (the longest line, the
decompressed bytes, the wall time) raises ``ReadLimitError`` out of the iteration,
so the parser reading the lines stops at once; the caller makes the dump failed.
"""

from __future__ import annotations

import io
import time
import zlib
from itertools import chain
from typing import BinaryIO, Iterator

from transforms.units import human_bytes

GZIP_MAGIC = b"\x1f\x8b"
HEAD_BYTES = 64 * 1024
_BUFFER = 1 << 20

# What a damaged compressed stream raises while reading.
_STREAM_ERRORS = (EOFError, zlib.error, OSError)
# What str.splitlines ends a line at besides "\n" (and "\r", gone by then): a chunk holding none
# of them is cut into lines, newlines kept, by one C call (a substring test each: a regex is slower).
_OTHER_BREAKS = ("\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")


class ReadLimitError(Exception):
    """A limit was passed while reading; ``str()`` is ``line N...: why; how to raise it``.
    ``limit`` names it as ``transforms.parse.ParseLimits`` does."""

    def __init__(self, msg: str, lineno: int, limit: str):
        self.msg, self.lineno, self.limit = msg, lineno, limit
        super().__init__(msg)


class _Borrowed(io.RawIOBase):
    """The caller's stream, read through a buffer of ours; dropping that buffer leaves it open."""

    def __init__(self, src: BinaryIO):
        self._src = src

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        data = self._src.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class _Inflate(io.RawIOBase):
    """gzip decompression that hands out every byte it could decode before failing.

    ``gzip.GzipFile`` raises on a cut stream and drops the chunk it was decoding;
    here the error comes only once all decodable bytes were read, so a cut dump
    keeps its longest prefix. Concatenated gzip members are read in order. Each
    call inflates at most the caller's buffer: a bomb costs no more than a chunk.
    """

    def __init__(self, src: BinaryIO):
        self._src = src
        self._inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        self._pending = b""  # compressed bytes not yet fed

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        while True:
            if not self._pending:
                self._pending = self._src.read(_BUFFER)
                if not self._pending:
                    if self._inflater.eof:
                        return 0
                    raise EOFError("gzip stream ends before its end marker (file cut short?)")
            out = self._inflater.decompress(self._pending, len(buffer))
            self._pending = self._inflater.unconsumed_tail
            if self._inflater.eof:
                rest = self._inflater.unused_data
                if rest.strip(b"\x00"):  # another gzip member follows
                    self._inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
                    self._pending = rest
            if out:
                buffer[: len(out)] = out
                return len(out)


def strip_gz(name: str) -> str:
    return name[:-3] if name.endswith(".gz") else name


class LineReader:
    """Iterate once over the decoded lines of ``raw``; peek at ``head`` first.

    Limits (None: none): ``max_line_bytes``, the longest line in bytes (its newline not
    counted); ``max_bytes``, the bytes of text (after decompression); ``max_seconds``,
    wall time from the reader's creation, checked before each chunk is read (each
    ~1 MiB of text, or one line of at most ``max_line_bytes``).
    """

    def __init__(self, raw: BinaryIO, *, max_line_bytes: int | None = None, max_bytes: int | None = None,
                 max_seconds: float | None = None, head_only: bool = False):
        if not hasattr(raw, "peek"):
            buffered = io.BufferedReader(raw, _BUFFER)  # type: ignore[arg-type]
        elif len(raw.peek(HEAD_BYTES)) < HEAD_BYTES:  # type: ignore[attr-defined]
            # A buffer smaller than the head (open() gives 4-8 KiB): a peek would show only that
            # much, and a dump whose kind shows past it (a long // CHECK header) would be unknown.
            buffered = io.BufferedReader(_Borrowed(raw), _BUFFER)
        else:
            buffered = raw
        self.compressed = buffered.peek(2)[:2] == GZIP_MAGIC
        stream: BinaryIO = buffered
        if self.compressed:
            # ``head_only`` (to tell a dump's kind): inflate a head's worth, not a chunk's;
            # the head is the same either way (one raw read, cut at HEAD_BYTES).
            stream = io.BufferedReader(_Inflate(buffered), HEAD_BYTES if head_only else _BUFFER)  # type: ignore[arg-type]
        self._bytes = stream
        self.max_line_bytes, self.max_bytes = max_line_bytes, max_bytes
        self.max_seconds = max_seconds
        self._deadline = None if max_seconds is None else time.monotonic() + max_seconds
        self.error: str | None = None
        # lines_read: those before the current chunk plus those taken from its list iterator
        self._before, self._chunk_len, self._chunk = 0, 0, iter(())
        self.bytes_read = 0  # text bytes (decompressed) taken from the stream so far
        self.head = self._peek_head()

    def _peek_head(self) -> str:
        try:
            head = self._bytes.peek(HEAD_BYTES)[:HEAD_BYTES]  # type: ignore[attr-defined]
        except _STREAM_ERRORS as exc:
            self.error = f"line 1: unreadable {'gzip ' if self.compressed else ''}stream ({exc})"
            return ""
        # A multi-byte character may be cut at the end of the peek: drop it.
        return head.decode("utf-8", errors="replace").rstrip("\ufffd")

    @property
    def lines_read(self) -> int:
        """Lines handed out so far."""
        return self._before + self._chunk_len - self._chunk.__length_hint__()

    def __iter__(self) -> Iterator[str]:
        # Each chunk's lines are handed out by a list iterator (C), not by one generator step and
        # one concatenation per line; lines_read asks the iterator how many it has left.
        return chain.from_iterable(self._chunks())

    def _lines(self, lines: list[str]) -> Iterator[str]:
        self._before += self._chunk_len
        self._chunk_len, self._chunk = len(lines), iter(lines)
        return self._chunk

    def _chunks(self) -> Iterator[Iterator[str]]:
        if self.error:
            return
        cap = self.max_line_bytes
        # A chunk no longer than the cap: a line that starts and ends inside one chunk is
        # within the cap, so only a line continued from earlier chunks needs measuring.
        size = _BUFFER if cap is None else max(1, min(_BUFFER, cap))
        read = getattr(self._bytes, "read1", self._bytes.read)  # one raw read: a cut gzip keeps every byte
        pending: list[bytes] = []  # the start of a line whose end is not read yet
        pending_len = 0
        after_cr = False  # the last chunk ended a line with "\r": a "\n" opening this one is its second half
        while True:
            self._check_time()
            try:
                chunk = read(size)
            except _STREAM_ERRORS as exc:  # what was read stays read, the line cut short too
                kind = "compressed stream" if self.compressed else "stream"
                self.error = f"line {self.lines_read + 1}: {kind} ends early or is corrupt ({exc})"
                break
            if not chunk:
                break
            self.bytes_read += len(chunk)
            if self.max_bytes is not None and self.bytes_read > self.max_bytes:
                raise ReadLimitError(
                    f"line {self.lines_read + 1}: more than max_dump_bytes ({_size(self.max_bytes)}) of text"
                    f"{' after decompression' if self.compressed else ''}; raise --max-dump-bytes to read it",
                    self.lines_read + 1, "max_dump_bytes")
            if after_cr and chunk[:1] == b"\n":
                chunk, after_cr = chunk[1:], False
                if not chunk:
                    continue
            end = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
            if end < 0:
                pending.append(chunk)
                pending_len += len(chunk)
                after_cr = False
                if cap is not None and pending_len > cap:
                    self._too_long()
                continue
            if pending:
                if cap is not None:
                    first = min(i for i in (chunk.find(b"\n", 0, end + 1), chunk.find(b"\r", 0, end + 1)) if i >= 0)
                    if pending_len + first > cap:
                        self._too_long()
                pending.append(chunk[: end + 1])
                text = b"".join(pending).decode("utf-8", "replace")
            else:
                text = chunk[: end + 1].decode("utf-8", "replace")
            rest = chunk[end + 1 :]
            pending, pending_len = ([rest], len(rest)) if rest else ([], 0)
            after_cr = not rest and chunk[end] == 13
            if "\r" in text:
                text = text.replace("\r\n", "\n").replace("\r", "\n")
            if not any(c in text for c in _OTHER_BREAKS):
                yield self._lines(text.splitlines(True))  # the text ends with a newline: nothing after it
            else:
                lines = text.split("\n")
                lines.pop()  # the text ends with a newline: nothing after it
                yield self._lines([line + "\n" for line in lines])
        if pending:  # the last line has no newline
            yield self._lines([b"".join(pending).decode("utf-8", "replace")])

    def _check_time(self) -> None:
        if self._deadline is not None and time.monotonic() > self._deadline:
            raise ReadLimitError(
                f"line {self.lines_read + 1}: the parse took longer than max_seconds ({self.max_seconds:g} s); "
                "raise --parse-seconds to finish it", self.lines_read + 1, "max_seconds")

    def _too_long(self) -> None:
        n = self.lines_read + 1
        raise ReadLimitError(f"line {n} is longer than max_line_bytes ({_size(self.max_line_bytes)}); "
                             "raise --max-line-bytes to read it", n, "max_line_bytes")


def _size(n: int) -> str:
    return f"{n} bytes" if n < 1024 else f"{human_bytes(n)}, {n:,} bytes"
