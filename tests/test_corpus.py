"""The public HLO corpus (data/corpus): every file its MANIFEST.json lists is there, whole, and parses.

Each entry records where the module came from (repo, path, commit, licence) and the
sha256 and size of its uncompressed text; the benchmark workload
(benchmarks/scale_workload.py) is built from these files, so a changed or cut file
would silently change what the benchmark measures.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
from pathlib import Path

import pytest

from transforms.parse import parse_dump
from transforms.records import DumpKind, Status

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"
MANIFEST = json.loads((CORPUS / "MANIFEST.json").read_text(encoding="utf-8"))
ENTRIES = MANIFEST["files"]


def test_manifest_lists_every_file_once():
    listed = [e["file"] for e in ENTRIES]
    assert len(listed) == len(set(listed))
    assert sorted(listed) == sorted(p.name for p in CORPUS.glob("*.gz"))


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["file"])
def test_entry_matches_its_file_and_parses(entry):
    for key in ("repo", "path", "licence", "what"):
        assert entry[key], key
    assert re.fullmatch(r"[0-9a-f]{40}", entry["commit"])
    text = gzip.decompress((CORPUS / entry["file"]).read_bytes())
    assert len(text) == entry["bytes"]
    assert hashlib.sha256(text).hexdigest() == entry["sha256"]

    parsed = parse_dump(io.BytesIO(text), entry["file"].removesuffix(".gz"))
    s = parsed.summary
    assert s.kind == DumpKind.XLA_HLO
    assert s.status.value == entry["dumpscope_parse"]["status"]
    assert s.status == Status.OK, s.errors
    assert s.stage == entry["dumpscope_parse"]["stage"]
    assert parsed.tables["hlo_instructions"].height > 0
