"""Decoded lines from the raw bytes of one dump, gzip or not, damage reported not raised.

Input: any binary stream (a local file, an fsspec/S3 object). The caller opens and
closes it; this module only reads. gzip is recognised by its magic bytes, not by the
name, so a renamed file still reads. Text is UTF-8 with undecodable bytes replaced:
binary junk becomes text the sniffer rejects instead of an exception.

Guarantees: memory is bounded by the longest line (plus a 1 MiB buffer); a stream
that ends early or is corrupt mid-way (a gzip cut short) ends the iteration cleanly
and leaves the reason, with the line it happened on, in ``LineReader.error``.
"""

from __future__ import annotations

import io
import zlib
from typing import BinaryIO, Iterator

GZIP_MAGIC = b"\x1f\x8b"
HEAD_BYTES = 64 * 1024
_BUFFER = 1 << 20

# What a damaged compressed stream raises while reading.
_STREAM_ERRORS = (EOFError, zlib.error, OSError)


class _Inflate(io.RawIOBase):
    """gzip decompression that hands out every byte it could decode before failing.

    ``gzip.GzipFile`` raises on a cut stream and drops the chunk it was decoding;
    here the error comes only once all decodable bytes were read, so a cut dump
    keeps its longest prefix. Concatenated gzip members are read in order.
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
    """Iterate once over the decoded lines of ``raw``; peek at ``head`` first."""

    def __init__(self, raw: BinaryIO):
        buffered = raw if hasattr(raw, "peek") else io.BufferedReader(raw, _BUFFER)  # type: ignore[arg-type]
        self.compressed = buffered.peek(2)[:2] == GZIP_MAGIC
        stream: BinaryIO = buffered
        if self.compressed:
            stream = io.BufferedReader(_Inflate(buffered), _BUFFER)  # type: ignore[arg-type]
        self._bytes = stream
        self.error: str | None = None
        self.lines_read = 0
        self.head = self._peek_head()

    def _peek_head(self) -> str:
        try:
            head = self._bytes.peek(HEAD_BYTES)[:HEAD_BYTES]  # type: ignore[attr-defined]
        except _STREAM_ERRORS as exc:
            self.error = f"line 1: unreadable {'gzip ' if self.compressed else ''}stream ({exc})"
            return ""
        # A multi-byte character may be cut at the end of the peek: drop it.
        return head.decode("utf-8", errors="replace").rstrip("\ufffd")

    def __iter__(self) -> Iterator[str]:
        if self.error:
            return
        text = io.TextIOWrapper(self._bytes, encoding="utf-8", errors="replace", newline=None)  # type: ignore[arg-type]
        try:
            for line in text:
                self.lines_read += 1
                yield line
        except _STREAM_ERRORS as exc:
            kind = "compressed stream" if self.compressed else "stream"
            self.error = f"line {self.lines_read + 1}: {kind} ends early or is corrupt ({exc})"
