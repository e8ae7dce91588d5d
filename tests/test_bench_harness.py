"""benchmarks/harness.py: what it measures is what a benchmark reports (fast: a few seconds)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import harness

# A child that holds ``MIB`` MiB (written, so resident) in itself and, with "tree", in a grandchild too.
_HOLD = r"""
import subprocess, sys, time
mib, tree = int(sys.argv[1]), sys.argv[2] == "tree"
held = b"x" * (mib << 20)
if tree:
    subprocess.run([sys.executable, "-c", "import time; b = b'y' * (%d << 20); time.sleep(0.6)" % mib], check=True)
else:
    time.sleep(0.3)
print('{"held": %d}' % mib)
"""


def test_best_of_picks_the_least_of_n_calls():
    waits = iter([0.06, 0.01, 0.04])
    got = harness.best_of(lambda: time.sleep(next(waits)) or "done", 3)
    assert len(got["walls_s"]) == 3 and got["result"] == "done"
    assert 0.01 <= got["wall_s"] < 0.035
    assert got["cpu_s"] == min(got["cpus_s"])
    assert harness.best([{"wall_s": 2.0, "k": "a"}, {"wall_s": 1.0, "k": "b"}])["k"] == "b"


@pytest.mark.integration
def test_a_childs_allocation_is_its_peak_and_a_grandchilds_counts_in_the_tree():
    printed, m = harness.run_json([sys.executable, "-c", _HOLD, "80", "tree"])
    assert printed == {"held": 80}
    assert m["returncode"] == 0 and m["max_processes"] >= 2
    assert m["peak_rss_mib"] >= 80  # the largest single process: at least one 80 MiB holder
    assert m["peak_rss_tree_mib"] >= 160  # both holders at once, summed over the tree
    assert m["cpu_s"] > 0 and m["wall_s"] >= 0.6


@pytest.mark.integration
def test_a_child_does_not_inherit_the_benchmarks_peak():
    """Linux keeps ru_maxrss across fork and exec: a child of a process that grew must still
    report its own peak, not the parent's."""
    grown = b"z" * (300 << 20)
    m = harness.run([sys.executable, "-c", "pass"])
    del grown
    assert m["returncode"] == 0
    assert m["peak_rss_mib"] < 150, m


@pytest.mark.integration
def test_timeout_kills_the_command_and_exit_codes_pass_through():
    m = harness.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
    assert m["timed_out"] and m["returncode"] != 0 and m["wall_s"] < 10
    assert harness.run([sys.executable, "-c", "raise SystemExit(3)"])["returncode"] == 3
    out = harness.run([sys.executable, "-c", "import sys; print('a'); print('b', file=sys.stderr)"], capture=True,
                      stderr=subprocess.STDOUT)
    assert out["stdout"].split() == ["a", "b"]


def test_json_round_trips(tmp_path: Path):
    figures = {"wall_s": 1.25, "runs": [{"peak_rss_mib": 12.0}], "path": Path("x/y")}
    path = harness.write_json(tmp_path / "deep" / "bench.json", figures)
    assert json.loads(path.read_text()) == figures | {"path": "x/y"}
