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
from transforms.records import DumpKind, lost_match

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


# --- damage costs only the figures read from it (DumpSummary.lost; issue 44, item 4) ---

FIRST = "multi_rank_runtime_rank_0.first.log.gz"  # whole: one function compiled twice


def _garbled(lineno: int) -> bytes:
    """The whole log with its line ``lineno`` (1-based) cut in the middle of its JSON, newline kept."""
    lines = gzip.decompress((CORPUS / FIRST).read_bytes()).split(b"\n")
    lines[lineno - 1] = lines[lineno - 1][: len(lines[lineno - 1]) // 2]
    return b"\n".join(lines)


def _whole() -> dict[str, float]:
    return parse_dump(io.BytesIO(gzip.decompress((CORPUS / FIRST).read_bytes())), "a.log").summary.metrics


@pytest.mark.parametrize(("lineno", "record", "lost"), [
    (56, "describe_tensor", ()),  # read by no figure
    (1340, "inductor_output_code", ("kernel.*",)),  # its kernels are counted from its payload
    (3132, "compilation_metrics", None),  # a compile's figures: every one in doubt
])
def test_a_garbled_record_costs_what_its_kind_feeds(lineno, record, lost):
    text = _garbled(lineno)
    assert text.split(b"\n")[lineno - 1].split(b"] ", 1)[1].startswith(b'{"' + record.encode())
    s = parse_dump(io.BytesIO(text), "a.log").summary
    assert s.status.value == "partial" and s.lost == lost
    assert s.errors[0].startswith(f"a.log: line {lineno}: record is not valid JSON")
    if lost is None:  # the rule before: nothing stands (the figures stay, for people, never judged)
        assert not s.figures_stand
        return
    assert s.figures_stand
    whole = _whole()
    assert s.metrics == {k: v for k, v in whole.items() if not lost_match(k, lost)}
    assert s.metrics["dynamo.recompiles"] == 1 and s.metrics["dynamo.compiles"] == 2


def test_a_log_cut_short_stands_behind_nothing():
    text = gzip.decompress((CORPUS / "cache_hit_miss.log.gz").read_bytes())
    s = parse_dump(io.BytesIO(text), "cache_hit_miss.log").summary
    assert s.truncated and s.lost is None and not s.figures_stand
    # Payloads whose MD5 does not match, read by no figure: every figure stands.
    text = gzip.decompress((CORPUS / "multi_rank_runtime_rank_0.log.gz").read_bytes())
    s = parse_dump(io.BytesIO(text), "rank_0.log").summary
    assert (s.status.value, len(s.errors), s.lost, s.figures_stand) == ("partial", 4, (), True)
    assert (s.metrics["dynamo.recompiles"], s.metrics["kernel.generated"]) == (3, 11)
    # Payload lines with no record before them: which record is gone is not known, nothing stands.
    text = gzip.decompress((CORPUS / "export.log.gz").read_bytes())
    s = parse_dump(io.BytesIO(text), "export.log").summary
    assert (s.status.value, s.lost, s.figures_stand) == ("partial", None, False)
