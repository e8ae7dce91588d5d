"""The incident buckets parse as designed (tests/incident_buckets, MANIFEST.json).

``data/generate_incident_buckets.py`` made each scenario's nights with the real compilers
and wrote, in ``MANIFEST.json``, the designed changes and the incidents they should give.
These checks parse every dump with the project's driver and assert that the buckets
hold what the manifest says: statuses (only the designed cuts are not ``ok``), program
names, and each designed change visible in the parsed metrics at its night and nowhere
else. They test the fixtures, not an incident feature: the expected incidents of the
scenarios written for the incident model (.briefs/incident_model.md; entries with
``stacked_on``) are checked against a small reference implementation of that model,
``tests/incident_oracle.py``, run on the dumps.
"""

from __future__ import annotations

import gzip
import json
import re
from functools import cache
from pathlib import Path

import pytest

from tests import incident_oracle
from transforms.parse import parse_dump
from transforms.records import DumpKind, DumpSummary, Status
from transforms.trends.series import normalize_program

ROOT = Path(__file__).resolve().parents[1]
BUCKETS = ROOT / "tests" / "incident_buckets"
MANIFEST = json.loads((BUCKETS / "MANIFEST.json").read_text())
SCENARIOS = MANIFEST["scenarios"]
AFTER = "cpu_after_optimizations.txt.gz"
BUFFERS = "cpu_after_optimizations-buffer-assignment.txt.gz"
# Metrics of an ONNX report that float noise moves (verification of ONNX Runtime against PyTorch).
JITTER = frozenset({"onnx.max_abs_diff", "onnx.max_rel_diff"})
_ONNX_STAMP = re.compile(r"^onnx_export_[\d_-]+_")  # the night's time stamp in a report's name
MLP, CONVNET, TAGGER = "inp+blocks+head(x)", "features+head(x)", "embed+attn+head(tokens)"  # ONNX programs
# Scenarios whose expected incidents follow the incident model (every one: an empty list expects none).
MODEL = sorted(n for n, sc in SCENARIOS.items() if all("stacked_on" in e for e in sc["expected_incidents"]))
# Scenarios of series identity (new processes every night, three nights): tests/test_identity.py.
IDENTITY = ("rank_logs", "inductor_two_graphs")


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
                              "failing_export", "two_onnx_models", "stacked_blowup", "overshoot", "dip_and_back",
                              "lost_improvement", "mixed_run", "onnx_three_models", "rank_logs", "inductor_two_graphs",
                              "overshoot_revert", "first_night_failures", "rank_divergence"}
    assert MODEL == sorted(SCENARIOS)  # every scenario's expectations follow the incident model
    assert MANIFEST["command"].startswith(".venv-samples/bin/python data/generate_incident_buckets.py")
    for name, sc in SCENARIOS.items():
        assert 5 <= len(sc["nights"]) <= 7 or name in IDENTITY and len(sc["nights"]) == 3, name
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
                            assert after.get("fusion.count", 0) == figs["fusions"]  # none: left out (batch 0)
                            assert after["hlo.instructions"] == figs["hlo_instructions"]
                        buffers = next((m for n, m in got.items() if n.endswith(BUFFERS)), None)
                        if buffers is not None:
                            assert buffers["memory.temp_bytes"] == figs["temp_size_in_bytes"]
                            assert buffers["memory.parameter_bytes"] == figs["argument_size_in_bytes"]
                    elif "logs" in figs:  # a torch.distributed job's rank logs (TORCH_TRACE)
                        for log, torch_said in figs["logs"].items():
                            assert parsed(files[log]).stage == f"rank_{torch_said['rank']}"
                            assert got[log]["dynamo.compiles"] == torch_said["compiles"]
                            assert got[log]["dynamo.recompiles"] == len(torch_said["recompile_reasons"])
                    elif job == "torch-inductor":
                        post = got["ir_post_fusion.txt.gz"]
                        assert post["inductor.nodes"] == figs["post_fusion_nodes"]
                        assert post.get("fusion.count", 0) == figs["fused_groups"]
                    else:
                        (report,) = got.values()
                        # An error report (every capture strategy failed) has no model to count.
                        assert report.get("onnx.parameters", figs["model_parameters"]) == figs["model_parameters"]
                        assert report.get("onnx.graph_nodes") == figs["onnx_graph_nodes"]
                        assert report.get("onnx.max_abs_diff") == figs["max_abs_diff"]


def test_stable_nothing_changes_but_float_noise():
    sc = "stable"
    first, *rest = runs(sc)
    for job, program in (("jax-jit", "jit_train_step"), ("torch-onnx", MLP)):
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
    for run_id in r:  # named by their exported programs (the folders say mlp/ and convnet/)
        assert sorted(parsed(p).program for p in dumps(sc, run_id).values()) == [CONVNET, MLP]
    mlp = [program_metrics(sc, run_id, "torch-onnx", MLP) for run_id in r]
    conv = [program_metrics(sc, run_id, "torch-onnx", CONVNET) for run_id in r]
    assert all(m == mlp[0] for m in mlp)
    texts = {gzip.decompress(p.read_bytes()) for r_ in r for rel, p in dumps(sc, r_).items() if "/mlp/" in rel}
    assert len(texts) == 1  # the MLP's report is the same text every night (only its name has the date)
    assert conv[0] == conv[1] == conv[2] and conv[3] == conv[4] and conv[2] != conv[3]
    (before,), (after,) = conv[2].values(), conv[3].values()
    assert after["onnx.parameters"] > before["onnx.parameters"]
    assert after["onnx.graph_nodes"] > before["onnx.graph_nodes"]
    # Its figures that move have no worse direction: a change, reported in trends and diffs, no incident.
    assert SCENARIOS[sc]["expected_incidents"] == []


# --- The scenarios of the incident model ---


@pytest.mark.parametrize("scenario", MODEL)
def test_expected_incidents_are_what_the_incident_model_gives(scenario):
    """Every expected incident, exactly (kind, closing, stacked_on, status at each run, metrics and
    steps with baseline -> value), and no other: the reference implementation on the dumps."""
    expected = SCENARIOS[scenario]["expected_incidents"]
    key = {e["name"]: (e["job"], normalize_program(e["program"]), e["opened"], e["kind"] == "improvement")
           for e in expected}
    want = {key[e["name"]]: {
        "kind": e["kind"], "closed": e["closed"], "closed_as": e["closed_as"],
        "stacked_on": [key[e["stacked_on"]]] if e["stacked_on"] else [], "lifecycle": e["lifecycle"],
        "metrics": e["metrics"], "steps": sorted((s["series"], s["metric"], s["before"], s["after"]) for s in e["steps"]),
    } | ({"reopened": e["reopened"]} if e.get("reopened") else {}) | ({"reverted": True} if e.get("reverted") else {})
        for e in expected}
    assert incident_oracle.incidents(BUCKETS / scenario) == want


def test_the_oracle_walks_the_spec_example():
    """The incident model's own example: 100K 200K 2M 200K 100K 50K of one figure."""
    values = list(enumerate([100e3, 200e3, 2e6, 200e3, 100e3, 50e3]))
    steps = incident_oracle.walk(values, "memory.temp_bytes", job="j", program="p", series="s")
    assert [(s.kind, s.opened, s.baseline, s.value, s.closed, s.how, s.below and s.below.opened) for s in steps] == [
        ("regression", 1, 100e3, 200e3, 4, "fixed", None),
        ("regression", 2, 200e3, 2e6, 3, "fixed", 1),
        ("improvement", 5, 100e3, 50e3, None, None, None)]
    # Overshoot, dip and back, a partial recovery, a creep below the floor (counts: floor 1; bytes: 1 KiB and 2 %).
    fusions = incident_oracle.walk(list(enumerate([7, 0, 10])), "fusion.count", job="j", program="p", series="s")
    assert [(s.kind, s.baseline, s.value, s.how) for s in fusions] == [("regression", 7, 0, "fixed"),
                                                                      ("improvement", 7, 10, None)]
    creep = incident_oracle.walk(list(enumerate([100e3, 101e3, 101.9e3, 103e3, 50e3, 200e3, 150e3])),
                                 "memory.temp_bytes", job="j", program="p", series="s")
    assert [(s.kind, s.opened, s.baseline, s.value, s.closed) for s in creep] == [
        ("regression", 3, 100e3, 103e3, 4), ("improvement", 4, 100e3, 50e3, 5), ("regression", 5, 100e3, 200e3, None)]


def _same_bytes(sc: str, a: int, b: int, job: str) -> bool:
    """Whether nights ``a`` and ``b`` (1-based) hold the same dump bytes for ``job`` (Inductor's run
    folder carries the night's stamp: compared by the path below it)."""
    def files(night: int) -> dict[str, bytes]:
        return {re.sub(r"run_[\d_]+-pid_\d+", "run", rel): p.read_bytes()
                for rel, p in dumps(sc, runs(sc)[night - 1]).items() if rel.startswith(f"{job}/")}
    return files(a) == files(b)


def test_stacked_blowup_multiplies_temp_memory_on_the_wider_model_then_reverts():
    sc = "stacked_blowup"
    jit, pmap = (series(sc, job, BUFFERS, "memory.temp_bytes") for job in ("jax-jit", "jax-pmap"))
    assert jit[0] < jit[1] == jit[3] == jit[4] and 9 < jit[2] / jit[1] < 12
    assert pmap[0] < pmap[1] == pmap[3] == pmap[4] and 20 < pmap[2] / pmap[1] < 30
    assert all(_same_bytes(sc, 2, 4, job) and _same_bytes(sc, 4, 5, job) for job in ("jax-jit", "jax-pmap"))


def test_overshoot_lost_improvement_dip_and_back_and_mixed_run_figures():
    temp = series("overshoot", "jax-jit", BUFFERS, "memory.temp_bytes")
    assert temp[3] == temp[4] < temp[0] == temp[1] < temp[2]  # up, then below where it started
    temp = series("lost_improvement", "jax-jit", BUFFERS, "memory.temp_bytes")
    assert temp[2] < temp[0] == temp[1] == temp[3] == temp[4] and _same_bytes("lost_improvement", 2, 4, "jax-jit")
    sc = "dip_and_back"
    assert _same_bytes(sc, 2, 4, "jax-jit") and _same_bytes(sc, 3, 5, "jax-jit")
    for program in ("model__0_forward_1.0", "model__0_backward_3.1"):
        by_night = [program_metrics(sc, r, "torch-inductor", program) for r in runs(sc)]
        assert by_night[1] == by_night[3] != by_night[2] == by_night[4], program
    sc = "mixed_run"
    temp, launches = series(sc, "jax-jit", BUFFERS, "memory.temp_bytes"), series(sc, "jax-jit", AFTER, "kernel.launches")
    assert temp[2] < temp[1] and launches[2] > launches[1]  # one run: less memory, more launches


def test_onnx_three_models_in_one_folder_are_told_apart_by_content():
    sc = "onnx_three_models"
    orders, texts, outcomes = [], {}, {}
    for run_id in runs(sc):
        reports = dumps(sc, run_id)
        assert all(rel.count("/") == 1 for rel in reports)  # every report in the job folder itself
        programs = [parsed(p).program for p in reports.values()]  # in file (= export) order
        assert sorted(programs) == sorted([MLP, CONVNET, TAGGER])
        orders.append(tuple(programs))
        for rel, p in reports.items():
            texts.setdefault(parsed(p).program, set()).add(gzip.decompress(p.read_bytes()))
            outcomes.setdefault(parsed(p).program, []).append(rel.rsplit("_", 1)[1].removesuffix(".md.gz"))
    assert len(set(orders)) == len(orders)  # the file order differs every night
    assert len(texts[TAGGER]) == 1  # the same report every night, wherever it stands in the order
    assert outcomes[CONVNET] == ["success", "conversion", "conversion", "success", "success"]
    params = [program_metrics(sc, r, "torch-onnx", MLP) for r in runs(sc)]
    assert [next(iter(m.values()))["onnx.parameters"] for m in params] == [11338, 11338, 23146, 23146, 23146]
