"""TORCH_TRACE logs that people shipped (data/corpus/torch_trace: pytorch/tlparse's test inputs,
written by PyTorch builds of 2024-2025, older than the 2.13.0 our own logs come from): each is
there whole, reads as its MANIFEST.json recorded, and its compiles are the log's own
``compilation_metrics`` records. The damaged ones (payloads trimmed when the test inputs were
made, a log that ends inside a compile) read ``partial`` with the line that says why."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
from pathlib import Path

import pytest

from transforms.parse import parse_dump
from transforms.records import DumpKind

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus" / "torch_trace"
ENTRIES = json.loads((CORPUS / "MANIFEST.json").read_text(encoding="utf-8"))["files"]


def test_the_manifest_lists_every_log_once():
    listed = [e["file"] for e in ENTRIES]
    assert sorted(listed) == sorted(set(listed)) == sorted(p.name for p in CORPUS.glob("*.gz"))


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["file"])
def test_a_public_log_reads_as_recorded(entry):
    assert entry["repo"] == "pytorch/tlparse" and entry["licence"] == "BSD-3-Clause"
    assert re.fullmatch(r"[0-9a-f]{40}", entry["commit"]) and re.fullmatch(r"[0-9a-f]{40}", entry["blob"])
    text = gzip.decompress((CORPUS / entry["file"]).read_bytes())
    assert (len(text), hashlib.sha256(text).hexdigest()) == (entry["bytes"], entry["sha256"])

    s = parse_dump(io.BytesIO(text), entry["file"].removesuffix(".gz")).summary
    want = entry["dumpscope_parse"]
    assert s.kind == DumpKind.TORCH_TRACE
    assert (s.stage, s.program, s.status.value, len(s.errors), len(s.programs)) == (
        want["stage"], want["program"], want["status"], want["errors"], want["programs"])
    assert dict(sorted(s.metrics.items())) == want["metrics"]
    # The figure that needs no parser to check: one compile per compilation_metrics record of a
    # log that holds no compile left open.
    if not s.truncated:
        assert s.metrics["dynamo.compiles"] == text.count(b'] {"compilation_metrics": ')
    for error in s.errors:  # each names the log and its line
        assert re.match(rf"{re.escape(entry['file'].removesuffix('.gz'))}: line \d+: ", error), error


def test_what_is_wrong_with_the_damaged_ones_is_said_by_line():
    by_file = {e["file"]: e for e in ENTRIES}
    text = gzip.decompress((CORPUS / "export.log.gz").read_bytes())
    errors = parse_dump(io.BytesIO(text), "export.log").summary.errors
    assert errors[0] == ("export.log: line 60: the payload of exported_program (lines 61-65) does not match the "
                         "record's MD5: lines lost or altered")
    assert by_file["cache_hit_miss.log.gz"]["dumpscope_parse"]["status"] == "partial"
    text = gzip.decompress((CORPUS / "cache_hit_miss.log.gz").read_bytes())
    [error] = parse_dump(io.BytesIO(text), "cache_hit_miss.log").summary.errors
    assert error.startswith("cache_hit_miss.log: line 7541: the log ends inside the lazy backward compile of 1/0 "
                            "(opened at line 3411, no bwd_compilation_metrics)")
