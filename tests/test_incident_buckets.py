"""The incident buckets parse as designed (tests/incident_buckets, MANIFEST.json).

``data/generate_incident_buckets.py`` made each scenario's nights with the real compilers
and wrote, in ``MANIFEST.json``, the designed changes and the incidents they should give.
These checks parse every dump with the project's driver and assert that the buckets
hold what the manifest says: statuses (only the designed cuts are not ``ok``), program
names, and each designed change visible in the parsed metrics at its night and nowhere
else. They test the fixtures, not an incident feature.
"""

from __future__ import annotations

import gzip
import json
import re
from functools import cache
from pathlib import Path

import pytest

from transforms.parse import parse_dump
from transforms.records import DumpKind, DumpSummary, Status

ROOT = Path(__file__).resolve().parents[1]
BUCKETS = ROOT / "tests" / "incident_buckets"
MANIFEST = json.loads((BUCKETS / "MANIFEST.json").read_text())
SCENARIOS = MANIFEST["scenarios"]
AFTER = "cpu_after_optimizations.txt.gz"
BUFFERS = "cpu_after_optimizations-buffer-assignment.txt.gz"
# Metrics of an ONNX report that float noise moves (verification of ONNX Runtime against PyTorch).
JITTER = frozenset({"onnx.max_abs_diff", "onnx.max_rel_diff"})
_ONNX_STAMP = re.compile(r"^onnx_export_[\d_-]+_")  # the night's time stamp in a report's name


def runs(scenario: str) -> list[str]:
    return [n["run_id"] for n in SCENARIOS[scenario]["nights"]]


@cache
def parsed(path: Path) -> DumpSummary:
    with open(path, "rb") as f:
        return parse_dump(f, str(path.relative_to(BUCKETS))).summary


def dumps(scenario: str, run_id: str) -> dict[str, Path]:
    """Every dump of one night, by its path below the run folder."""
    run = BUCKETS / scenario / run_id
    return {str(p.relative_to(run)): p for p in sorted(run.rglob("*.gz"))}


def metric(scenario: str, run_id: str, job: str, suffix: str, name: str) -> float | None:
    """One metric of the one dump of ``job`` whose name ends with ``suffix``."""
    found = [p for rel, p in dumps(scenario, run_id).items() if rel.startswith(f"{job}/") and rel.endswith(suffix)]
    assert len(found) == 1, (scenario, run_id, job, suffix, found)
    return parsed(found[0]).metrics.get(name)


def series(scenario: str, job: str, suffix: str, name: str) -> list[float | None]:
    return [metric(scenario, r, job, suffix, name) for r in runs(scenario)]


def program_metrics(scenario: str, run_id: str, job: str, program: str) -> dict[str, dict[str, float]]:
    """The metrics of every dump of one program in one night, by file name (ONNX reports: by outcome)."""
    out = {}
    for rel, path in dumps(scenario, run_id).items():
        s = parsed(path)
        if rel.startswith(f"{job}/") and s.program == program:
            out[_ONNX_STAMP.sub("onnx_export_", Path(rel).name)] = dict(s.metrics)
    return out


def test_manifest_and_layout():
    assert set(SCENARIOS) == {"stable", "collective_kept", "blowup_revert", "model_change", "truncated",
                              "failing_export", "two_onnx_models"}
    assert MANIFEST["command"].startswith(".venv-samples/bin/python data/generate_incident_buckets.py")
    for name, sc in SCENARIOS.items():
        assert 5 <= len(sc["nights"]) <= 7, name
        assert sorted(p.name for p in (BUCKETS / name).iterdir()) == runs(name)
        commits = []
        for night in sc["nights"]:
            run = BUCKETS / name / night["run_id"]
            meta = json.loads((run / "run.json").read_text())
            assert meta == {k: night[k] for k in ("started_at", "commit", "tags")}
            commits.append(meta["commit"])
            assert {p.name for p in run.iterdir() if p.is_dir()} == set(night["jobs"])
            for job, entry in night["jobs"].items():
                figures = json.loads((run / job / "compiler_figures.json").read_text())
                assert figures["run_id"] == night["run_id"] and figures["config"]["scenario"] == name
                listed = {f"{job}/{f}" for prog in entry["programs"].values() for f in prog["files"]}
                assert listed == {rel for rel in dumps(name, night["run_id"]) if rel.startswith(f"{job}/")}
        assert len(set(commits)) == len(commits), name
        for inc in sc["expected_incidents"]:
            assert inc["opened"] in runs(name) and list(inc["lifecycle"])[0] == inc["opened"]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_dump_parses_as_designed(scenario: str):
    """ok everywhere but the designed cuts (partial or failed); programs as the manifest names them."""
    for night in SCENARIOS[scenario]["nights"]:
        damaged = {f"{job}/{d['file']}" for job, e in night["jobs"].items() for d in e.get("damaged", {}).values()}
        program_of = {f"{job}/{f}": prog for job, e in night["jobs"].items()
                      for prog, figs in e["programs"].items() for f in figs["files"]}
        for rel, path in dumps(scenario, night["run_id"]).items():
            s = parsed(path)
            assert s.kind is not DumpKind.UNKNOWN, rel
            assert s.program == program_of[rel], rel
            if rel in damaged:
                assert s.status in (Status.PARTIAL, Status.FAILED), rel
                assert s.errors, rel
            else:
                assert s.status is Status.OK, (rel, s.errors)


def test_compiler_figures_match_parsed_metrics():
    """The manifest's key figures (from the compilers' APIs) are what the parser reads in the dumps."""
    for name, sc in SCENARIOS.items():
        for night in sc["nights"]:
            damaged = {d["file"] for e in night["jobs"].values() for d in e.get("damaged", {}).values()}
            for job, entry in night["jobs"].items():
                for program, figs in entry["programs"].items():
                    files = {Path(f).name: BUCKETS / name / night["run_id"] / job / f for f in figs["files"]}
                    got = {n: parsed(p).metrics for n, p in files.items() if n not in damaged}
                    if job.startswith("jax-"):
                        after = next((m for n, m in got.items() if n.endswith(AFTER)), None)
                        if after is not None:
                            assert after.get("kernel.collective.all-reduce", 0) == figs["all_reduce"]
                            assert after["fusion.count"] == figs["fusions"]
                            assert after["hlo.instructions"] == figs["hlo_instructions"]
                        buffers = next((m for n, m in got.items() if n.endswith(BUFFERS)), None)
                        if buffers is not None:
                            assert buffers["memory.temp_bytes"] == figs["temp_size_in_bytes"]
                            assert buffers["memory.parameter_bytes"] == figs["argument_size_in_bytes"]
                    elif job == "torch-inductor":
                        post = got["ir_post_fusion.txt.gz"]
                        assert post["inductor.nodes"] == figs["post_fusion_nodes"]
                        assert post.get("fusion.count", 0) == figs["fused_groups"]
                    else:
                        (report,) = got.values()
                        assert report["onnx.parameters"] == figs["model_parameters"]
                        assert report.get("onnx.graph_nodes") == figs["onnx_graph_nodes"]
                        assert report.get("onnx.max_abs_diff") == figs["max_abs_diff"]


def test_stable_nothing_changes_but_float_noise():
    sc = "stable"
    first, *rest = runs(sc)
    for job, program in (("jax-jit", "jit_train_step"), ("torch-onnx", "torch-onnx")):
        base = program_metrics(sc, first, job, program)
        for run_id in rest:
            now = program_metrics(sc, run_id, job, program)
            assert now.keys() == base.keys()
            for f in base:
                assert {k: v for k, v in now[f].items() if k not in JITTER} == \
                       {k: v for k, v in base[f].items() if k not in JITTER}, (run_id, f)
    # The JAX dumps are the same bytes every night.
    jax = [{rel: p.read_bytes() for rel, p in dumps(sc, r).items() if rel.startswith("jax-jit/")} for r in runs(sc)]
    assert all(d == jax[0] for d in jax)
    diffs = series(sc, "torch-onnx", ".md.gz", "onnx.max_abs_diff")
    assert len(set(diffs)) > 1, diffs  # it does jitter
    assert all(0 < d < 1e-6 for d in diffs), diffs
    assert max(diffs) - min(diffs) < 1e-6


def test_collective_kept_adds_an_all_reduce_at_night_3():
    sc = "collective_kept"
    assert series(sc, "jax-pmap", AFTER, "kernel.collectives") == [1, 1, 2, 2, 2, 2]
    assert series(sc, "jax-pmap", AFTER, "kernel.collective.all-reduce") == [1, 1, 2, 2, 2, 2]
    # Before optimizations the program has its psums and pmean apart (XLA combines them later).
    before = series(sc, "jax-pmap", "before_optimizations.txt.gz", "kernel.collectives")
    assert before[0] == before[1] < before[2] == before[-1]


def test_blowup_revert_temp_bytes_jump_then_return():
    sc = "blowup_revert"
    temp = series(sc, "jax-jit", BUFFERS, "memory.temp_bytes")
    assert temp[0] == temp[1] == temp[3] == temp[4]
    assert temp[2] > 10 * temp[1]
    # Night 4 is night 2's program again, byte for byte (run.json aside).
    n1, n2, n3, n4, n5 = (dumps(sc, r) for r in runs(sc))
    assert {k: p.read_bytes() for k, p in n4.items()} == {k: p.read_bytes() for k, p in n2.items()}
    assert {k: p.read_bytes() for k, p in n3.items()} != {k: p.read_bytes() for k, p in n2.items()}


def test_model_change_moves_many_metrics_of_few_programs():
    sc = "model_change"
    r = runs(sc)
    programs = {("jax-jit", "jit_train_step"), ("torch-inductor", "model__0_forward_1.0"),
                ("torch-inductor", "model__0_backward_3.1")}
    assert {(i["job"], i["program"]) for i in SCENARIOS[sc]["expected_incidents"]} == programs
    changed_pairs = 0
    for job, program in programs:
        by_night = [program_metrics(sc, run_id, job, program) for run_id in r]
        assert by_night[0] == by_night[1] and by_night[2] == by_night[3] == by_night[4], program
        moved = {(f, k) for f in by_night[1] for k in by_night[1][f] | by_night[2][f]
                 if by_night[1][f].get(k) != by_night[2][f].get(k)}
        assert len({f for f, _ in moved}) >= 3, (program, moved)  # in several files of the program
        changed_pairs += len(moved)
    assert changed_pairs >= 30
    params = series(sc, "jax-jit", AFTER, "memory.entry_parameter_bytes")
    assert params[0] == params[1] < params[2] == params[4]


def test_truncated_night_3_is_cut_and_nothing_else_moves():
    sc = "truncated"
    n1, n2, n3, n4, n5 = (dumps(sc, r) for r in runs(sc))
    cut = {k for k in n3 if k.endswith((AFTER, BUFFERS))}
    assert len(cut) == 2
    for k in cut:
        assert parsed(n3[k]).status in (Status.PARTIAL, Status.FAILED)
        assert n3[k].read_bytes() != n2[k].read_bytes()
    # The cut .gz is a prefix of night 2's; the other is night 2's text cut mid-line.
    (ba,) = [k for k in cut if k.endswith(BUFFERS)]
    assert n2[ba].read_bytes().startswith(n3[ba].read_bytes())
    for k in n3.keys() - cut:
        assert n3[k].read_bytes() == n2[k].read_bytes(), k
    for k in n4:
        assert n4[k].read_bytes() == n2[k].read_bytes(), k


def test_failing_export_fails_from_night_3():
    sc = "failing_export"
    assert series(sc, "torch-onnx", ".md.gz", "onnx.step.translate") == [1, 1, 0, 0, 0]
    names = [next(iter(dumps(sc, r))) for r in runs(sc)]
    assert [n.rsplit("_", 1)[1] for n in names] == ["success.md.gz"] * 2 + ["conversion.md.gz"] * 3
    assert series(sc, "torch-onnx", ".md.gz", "onnx.graph_nodes")[2:] == [None] * 3


def test_two_onnx_models_are_two_programs_and_only_one_changes():
    sc = "two_onnx_models"
    r = runs(sc)
    for run_id in r:
        assert sorted(parsed(p).program for p in dumps(sc, run_id).values()) == ["convnet", "mlp"]
    mlp = [program_metrics(sc, run_id, "torch-onnx", "mlp") for run_id in r]
    conv = [program_metrics(sc, run_id, "torch-onnx", "convnet") for run_id in r]
    assert all(m == mlp[0] for m in mlp)
    texts = {gzip.decompress(p.read_bytes()) for r_ in r for rel, p in dumps(sc, r_).items() if "/mlp/" in rel}
    assert len(texts) == 1  # the MLP's report is the same text every night (only its name has the date)
    assert conv[0] == conv[1] == conv[2] and conv[3] == conv[4] and conv[2] != conv[3]
    (before,), (after,) = conv[2].values(), conv[3].values()
    assert after["onnx.parameters"] > before["onnx.parameters"]
    assert after["onnx.graph_nodes"] > before["onnx.graph_nodes"]
    (inc,) = SCENARIOS[sc]["expected_incidents"]
    assert (inc["program"], inc["opened"]) == ("convnet", r[3])
