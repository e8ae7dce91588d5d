"""`dumpscope parse` end to end, as a user runs it."""

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import SEEDS

ROOT = Path(__file__).parents[1]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_parse_json_of_a_seed():
    out = run("parse", "--json", str(SEEDS / "001_a0c5460ce1af2dbe.txt"))
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert set(got) == {"path", "kind", "stage", "program", "status", "errors", "metrics"}
    assert (got["kind"], got["stage"], got["program"], got["status"]) == ("xla_hlo", "after_optimizations", "SyncTensorsGraph.2143", "ok")
    assert got["metrics"]["hlo.instructions"] == 1886 and got["metrics"]["kernel.launches"] == 124


def test_parse_json_with_a_table(tmp_path):
    gz = tmp_path / "ba.txt.gz"
    gz.write_bytes(gzip.compress((SEEDS / "002_5960cad812240b69.txt").read_bytes()))
    got = json.loads(run("parse", "--json", "--table", "buffer_allocations", "--limit", "3", str(gz)).stdout)
    assert got["kind"] == "xla_buffer_assignment" and got["metrics"]["memory.allocations"] == 54
    assert got["table"]["name"] == "buffer_allocations" and len(got["table"]["rows"]) == 3


def test_parse_human_output_and_unknown_table():
    out = run("parse", str(SEEDS / "003_f2a980d458b1ffe8.txt"))
    assert out.returncode == 0 and "inductor_ir" in out.stdout and "inductor.nodes" in out.stdout
    bad = run("parse", "--table", "nope", str(SEEDS / "003_f2a980d458b1ffe8.txt"))
    assert bad.returncode == 2 and "unknown table 'nope'" in bad.stderr


def test_parse_many_files_as_json_lines(tmp_path):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(os.urandom(4096))
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    out = run("parse", "--json", str(junk), str(empty), str(SEEDS / "000_d1eac3fb69f76648.txt"))
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["kind"] for r in rows] == ["unknown", "unknown", "onnx_report"]
    assert out.returncode == 0


def test_parse_does_not_import_prefect():
    code = "import sys; from flows.cli import app; from transforms.parse import parse_dump; print('prefect' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.strip() == "False"


def test_parse_takes_the_limits(tmp_path):
    dump = tmp_path / "module_0001.long.after_optimizations.txt"
    dump.write_text("HloModule long\n\nENTRY main {\n  ROOT p = f32[8] parameter(0), metadata={op_name=\"" + "x" * 4096 + "\"}\n}\n")
    assert run("parse", "--json", str(dump)).returncode == 0
    capped = run("parse", "--json", "--max-line-bytes", "1024", str(dump))
    got = json.loads(capped.stdout)
    assert capped.returncode == 1 and got["status"] == "failed"
    assert "line 4 is longer than max_line_bytes" in got["errors"][0] and "--max-line-bytes" in got["errors"][0]
