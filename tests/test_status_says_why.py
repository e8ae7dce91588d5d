"""Status and errors agree, for every format: ``partial`` and ``failed`` always say why.

Every real dump here (the seeds, tests/fixtures, the data/ sample bucket and the corpora under
data/corpus) is cut at a deterministic sweep of points (byte offsets that split a line, and the
line ends before them) and parsed through the driver, as the nightly run does. Each result is
either ``ok``, or ``partial``/``failed`` with at least one error naming the file; a dump cut
short (``truncated``) has an error naming the line it ends on. And a whole dump reads the same
without its final newline or final blank lines (text pasted or captured from logs): same
status, errors, metrics and records.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import re
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, SEEDS
from transforms.parse import kind_of, parse_dump
from transforms.records import DumpKind, Status

ROOT = Path(__file__).resolve().parents[1]
SOURCES = (SEEDS, Path("/work/shared/seeds"), FIXTURES, ROOT / "data" / "sample_bucket", ROOT / "data" / "corpus")
CUTS = 7  # byte offsets per dump (i/8 of its length), each also cut back to the line end before it
_MIN_CUT_BYTES = 2048  # smaller dumps get a cut after every line instead


def _real_dumps() -> dict[str, bytes]:
    """Every dump any parser claims, decompressed, by its path under its source (each content once)."""
    out: dict[str, bytes] = {}
    seen: set[str] = set()
    for root in SOURCES:
        if not root.is_dir():
            continue
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            data = path.read_bytes()
            data = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
            name = f"{root.name}/{path.relative_to(root)}".removesuffix(".gz")
            digest = hashlib.sha256(data).hexdigest()
            if digest in seen or kind_of(name, data[:65536].decode(errors="replace")) is DumpKind.UNKNOWN:
                continue
            seen.add(digest)
            out[name] = data
    return out


REAL = _real_dumps()
KINDS = {name: kind_of(name, data[:65536].decode(errors="replace")) for name, data in REAL.items()}
CORPUS = ROOT / "data" / "corpus" / "inductor_onnx"


def _parse(data: bytes, name: str):
    return parse_dump(io.BytesIO(data), name)


def _cuts(data: bytes) -> list[int]:
    if len(data) < _MIN_CUT_BYTES:
        return [i + 1 for i, b in enumerate(data) if b == 0x0A][:-1] + [len(data) // 2]
    cuts = set()
    for i in range(1, CUTS + 1):
        cut = len(data) * i // (CUTS + 1)
        cuts.update((cut, data.rfind(b"\n", 0, cut) + 1))
    return sorted(c for c in cuts if 0 < c < len(data))


def _last_line(text: bytes) -> int:
    """The line the reader ends on: the count of newlines, plus a last line without one."""
    return text.count(b"\n") + (not text.endswith(b"\n"))


def test_every_format_and_the_new_corpus_are_here():
    assert set(KINDS.values()) == set(DumpKind) - {DumpKind.UNKNOWN}
    assert {n for n in REAL if n.startswith("corpus/inductor_onnx/")} == {
        "corpus/inductor_onnx/torch_logs_ir_post_fusion.log",
        "corpus/inductor_onnx/older_torch_test_debug_trace/ir_pre_fusion.txt",
        "corpus/inductor_onnx/older_torch_test_debug_trace/ir_post_fusion.txt",
        "corpus/inductor_onnx/onnx_export_2026-11-23_13-38-30-924547_success.md"}


@pytest.mark.parametrize("kind", sorted(set(DumpKind) - {DumpKind.UNKNOWN}))
def test_every_cut_of_every_real_dump_is_ok_or_says_why(kind):
    checked = 0
    for name in sorted(n for n, k in KINDS.items() if k is kind):
        data = REAL[name]
        for cut in _cuts(data):
            s = _parse(data[:cut], name).summary
            checked += 1
            where = (name, cut, s.status, s.errors[:3])
            if s.status is Status.OK:
                assert not s.truncated and not s.failed, where
                continue
            assert s.errors, where
            assert all(e.startswith(f"{name}: ") for e in s.errors), where
            assert any(re.match(rf"^{re.escape(name)}: (line \d+|the file is)", e) for e in s.errors), where
            if s.truncated:
                last = _last_line(data[:cut])
                assert any(f"line {last}:" in e or f"line {last} " in e for e in s.errors), (last, where)
    assert checked > 0


KNOWN_NEWLINE_CASES: dict[str, str] = {}  # none left


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=KNOWN_NEWLINE_CASES[n]))
                                  if n in KNOWN_NEWLINE_CASES else n for n in sorted(REAL)])
def test_a_whole_dump_reads_the_same_without_its_final_newline(name):
    data = REAL[name]
    body = data.rstrip(b"\r\n")
    whole = _parse(data, name)
    if name.startswith("fixtures/"):  # the test fixtures are whole, well-formed dumps
        assert whole.status is Status.OK, whole.summary.errors
    for variant in (body + b"\n", body):
        again = _parse(variant, name)
        a, b = whole.summary, again.summary
        assert (b.status, b.metrics, b.stage) == (a.status, a.metrics, a.stage), (variant[-40:], b.errors)
        # The same complaints, if any (a parser may word a cut differently at another line: none here).
        assert [e.split(": ", 2)[-1] for e in b.errors] == [e.split(": ", 2)[-1] for e in a.errors]
        assert sorted(again.tables) == sorted(whole.tables)
        for table, frame in whole.tables.items():
            assert again.tables[table].equals(frame), table


def test_a_file_under_an_ir_name_that_is_not_ir_fails_naming_the_file():
    """Not unknown: the name promises Inductor IR, so the verdict says why it is not (a TORCH_LOGS
    capture whose lines are all from other loggers, saved under the IR's file name)."""
    log = gzip.decompress((CORPUS / "torch_logs_ir_post_fusion.log.gz").read_bytes())
    foreign = b"".join(line for line in log.splitlines(keepends=True) if b"[__ir_post_fusion]" not in line)
    assert foreign.count(b"\n") == 2  # the UserWarning torch prints first: two lines
    name = "night/torchinductor/model__0_forward_1.0/ir_post_fusion.txt"
    s = _parse(foreign, name).summary
    assert (s.kind, s.status) == (DumpKind.INDUCTOR_IR, Status.FAILED)
    assert s.errors == [f"{name}: line 1: not an Inductor scheduler IR dump: no node header found"]
    # The same capture with the log records of another artifact only: told apart from a non-log file.
    other = log.replace(b"[__ir_post_fusion]", b"[__graph_code]")
    s = _parse(other, name).summary
    assert (s.kind, s.status) == (DumpKind.INDUCTOR_IR, Status.FAILED)
    assert s.errors == [f"{name}: line 1: a log capture without a scheduler node in an ir_pre_fusion or "
                        "ir_post_fusion record (TORCH_LOGS=ir_post_fusion prints them)"]
