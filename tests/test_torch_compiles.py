"""Every compile, guard and artifact of the real TORCH_TRACE logs, against the logs' own records
(issue 46, first part): torch_trace_compiles' ids as tlparse writes them and the phase seconds,
torch_trace_guards and torch_trace_artifacts. The expected side is read here from the log's lines
with json alone (``_records``), never from the parser."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
from pathlib import Path

import polars as pl
import pytest

from transforms.parse import parse_dump

ROOT = Path(__file__).resolve().parents[1]
LOGS = sorted([*ROOT.glob("tests/fixtures/torch_trace/*/*.log.gz"), *ROOT.glob("data/corpus/torch_trace/*.log.gz")])
_ENVELOPE = re.compile(r"^(?:\[rank\d+\]:)?[VIWEC]\d{4} [^\]]*\] (\{.*)$")
_LEAF = re.compile(r"^[| ]*\+- [A-Z][A-Z0-9_]*(?::|$)")  # a guard (not a GuardManager) of dynamo_cpp_guards_str's tree
_NOT_ARTIFACTS = {"chromium_event", "str", "describe_tensor", "describe_storage", "describe_source"}


def _records(text: str) -> list[tuple[int, dict | None, list[str], str]]:
    """(line, JSON of the record or None, its payload lines without their tab, the record's line)."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    out, i = [], 0
    while i < len(lines):
        m = _ENVELOPE.match(lines[i])
        j = i + 1
        while j < len(lines) and lines[j].startswith("\t"):
            j += 1
        if m is not None:
            try:
                rec = json.loads(m[1])
            except ValueError:
                rec = None
            out.append((i + 1, rec, [p[1:] for p in lines[i + 1:j]], lines[i]))
        i = j
    return out


def _tlparse(rec: dict) -> str | None:
    """tlparse's CompileId Display (src/types.rs), written out for the test (null ids are absent ones)."""
    if rec.get("frame_id") is None and rec.get("frame_compile_id") is None:
        return None
    autograd = "" if rec.get("compiled_autograd_id") is None else f"!{rec['compiled_autograd_id']}/"
    attempt = f"_{rec['attempt']}" if rec.get("attempt") else ""
    frame, compile_ = (rec.get(k) for k in ("frame_id", "frame_compile_id"))
    return f"[{autograd}{'-' if frame is None else frame}/{'-' if compile_ is None else compile_}{attempt}]"


_PARSED: dict[Path, tuple] = {}


def _parsed(path: Path):
    if path not in _PARSED:
        text = gzip.decompress(path.read_bytes())
        got = parse_dump(io.BytesIO(text), path.name.removesuffix(".gz"))
        _PARSED[path] = (text.decode(), got.tables)
    return _PARSED[path]


def _table(tables: dict, name: str) -> pl.DataFrame:
    from transforms.parsers import torch_trace

    return tables.get(name, pl.DataFrame(schema=torch_trace.TABLES[name]))


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


@pytest.mark.parametrize("path", LOGS, ids=_id)
def test_a_compile_row_per_metrics_record_with_its_ids_failures_restarts_and_seconds(path):
    text, tables = _parsed(path)
    want = [(_tlparse(rec), m.get("guard_count"), m.get("fail_type"), m.get("restart_reasons"),
             m.get("dynamo_time_before_restart_s"), m.get("entire_frame_compile_time_s"))
            for _, rec, _, _ in _records(text) if rec and (m := rec.get("compilation_metrics")) is not None]
    rows = _table(tables, "torch_trace_compiles").filter(pl.col("phase") == "forward")
    got = list(rows.select("tlparse_id", "guard_count", "fail_type", "restart_reasons", "dynamo_time_before_restart_s",
                           "entire_frame_compile_time_s").iter_rows())
    assert got == want
    backward = [(_tlparse(rec), m.get("backward_cumulative_compile_time_us"))
                for _, rec, _, _ in _records(text) if rec and (m := rec.get("bwd_compilation_metrics")) is not None]
    rows = _table(tables, "torch_trace_compiles").filter(pl.col("phase") == "backward")
    assert [(i, None if s is None else round(s * 1e6)) for i, s in
            rows.select("tlparse_id", "backward_compile_time_s").iter_rows()] == backward


def test_the_ids_restarts_and_failures_of_the_logs_that_have_them():
    """Exact figures: a restart is [0/0_1] (tlparse's id), a recompile [0/1], a failure has no guards."""
    def forward(rel: str) -> pl.DataFrame:
        [path] = [p for p in LOGS if _id(p) == rel or _id(p).startswith(rel)]
        return _table(_parsed(path)[1], "torch_trace_compiles").filter(pl.col("phase") == "forward")

    comp = forward("torch_trace/comp_metrics.log.gz")
    assert comp["tlparse_id"].to_list() == ["[0/0_1]", "[1/0_1]", "[2/0]"]
    assert comp["compile_id"].to_list() == ["0/0", "1/0", "2/0"]
    assert [len(r) for r in comp["restart_reasons"]] == [1, 1, 0]
    assert comp["dynamo_time_before_restart_s"].to_list() == [0.006658077239990234, 0.002626180648803711, 0.0]
    gb = forward("graph_break/")
    assert gb["tlparse_id"].to_list() == ["[0/0_1]", "[1/0]", "[2/0]"]
    assert gb["dynamo_time_before_restart_s"].to_list() == [0.10071253776550293, 0.0, 0.0]
    assert forward("recompile/")["tlparse_id"].to_list() == ["[0/0]", "[0/1]"]
    assert forward("torch_trace/collectives_parity_rank_0.log.gz")["tlparse_id"].to_list() == [
        "[0/0]", "[0/1]", "[0/2]", "[0/3]"]
    failed = forward("compile_failure/")
    assert failed.select("tlparse_id", "fail_type", "guard_count").rows() == [
        ("[0/0]", None, 10), ("[1/0]", "BackendCompilerFailed", None)]
    # The lazily compiled backward, outside entire_frame_compile_time_s: its own seconds.
    plain = _table(_parsed(next(p for p in LOGS if p.parent.name == "plain"))[1], "torch_trace_compiles")
    assert plain.select("phase", "tlparse_id", "backward_compile_time_s").rows() == [
        ("forward", "[0/0]", None), ("backward", "[0/0]", 1.506609)]


@pytest.mark.parametrize("path", LOGS, ids=_id)
def test_a_guard_row_per_guard_the_log_shows(path):
    """Rows per compile: the entries of its dynamo_guards payload, the leaves of its
    dynamo_cpp_guards_str tree, its specialisation and guard_added records."""
    text, tables = _parsed(path)
    want: dict[tuple, int] = {}
    for _, rec, payload, _ in _records(text):
        if not rec:
            continue
        name = next(iter(rec))
        key = _tlparse(rec)
        if name == "dynamo_guards":
            n = len(json.loads("\n".join(payload)))
            source = "dynamo_guards"
        elif name == "dynamo_cpp_guards_str":
            n, source = sum(1 for p in payload if _LEAF.match(p)), "cpp_guard"
        elif name in ("symbolic_shape_specialization", "guard_added", "guard_added_fast"):
            n, source = 1, {"symbolic_shape_specialization": "shape_specialization"}.get(name, name)
        else:
            continue
        if n:
            want[(key, source)] = want.get((key, source), 0) + n
    guards = _table(tables, "torch_trace_guards")
    got = guards.group_by("tlparse_id", pl.col("source").cast(pl.String)).len().rows()
    assert {(i, source): n for i, source, n in got} == want


def test_guard_rows_are_not_guard_count_and_say_why():
    """torch's guard_count counts Guard objects (len(output.guards)); the log shows their code parts:
    plain's tree has 53 leaves for 45 guards, comp_metrics' dynamo_guards 3 entries for 9."""
    plain = _parsed(next(p for p in LOGS if p.parent.name == "plain"))[1]
    assert _table(plain, "torch_trace_guards").height == 53
    assert _table(plain, "torch_trace_compiles")["guard_count"].to_list() == [45, None]
    comp = _parsed(next(p for p in LOGS if p.name == "comp_metrics.log.gz"))[1]
    assert _table(comp, "torch_trace_guards").group_by("tlparse_id", maintain_order=True).len().rows() == [
        ("[0/0_1]", 3), ("[1/0_1]", 3), ("[2/0]", 3)]
    assert _table(comp, "torch_trace_compiles")["guard_count"].to_list() == [9, 9, 6]


def test_a_tree_guard_has_its_type_source_user_line_and_no_process_id():
    text, tables = _parsed(next(p for p in LOGS if p.parent.name == "recompile"))
    guards = _table(tables, "torch_trace_guards")
    first = guards.filter(pl.col("tlparse_id") == "[0/0]")
    assert first.filter(pl.col("guard_type") == "ID_MATCH").row(0, named=True) | {"dump_id": None} == {
        "dump_id": None, "parser_version": 8, "compile_id": "0/0", "frame_id": 0, "frame_compile_id": 0, "attempt": 0,
        "tlparse_id": "[0/0]", "source": "cpp_guard", "guard_type": "ID_MATCH",
        "guard": "___check_obj_id(G['torch'], <id>), type=<class 'module'>", "guarded": "G['torch']", "reason": None,
        "user_code": "h = torch.relu(self.l1(x))", "user_filename": "mp/dumpscope-torch-trace/src/dumpscope_model.py",
        "user_lineno": 20, "user_function": "forward", "lineno": 3437}
    assert text.split("\n")[3436].endswith("___check_obj_id(G['torch'], 140271777332848), type=<class 'module'>  # h = "
                                           "torch.relu(self.l1(x))  # mp/dumpscope-torch-trace/src/dumpscope_model.py:20 "
                                           "in forward")
    # The recompile's guards differ from the first compile's in the batch size only (4 -> 6), ids normalised.
    second = guards.filter(pl.col("tlparse_id") == "[0/1]")
    changed = set(second["guard"]) ^ set(first["guard"])
    assert {g[:70] for g in changed} == {
        "check_tensor(L['x'], Tensor, DispatchKeySet(CPU, BackendSelect, ADInplaceOrView, Autogr"[:70]}
    assert not any(re.search(r"\d{9,}", g) for g in guards["guard"])
    # 5 tensors (x, two Linear layers' weight and bias): a TENSOR_MATCH and 5 DIMENSION_DYNAMIC_MARKING_GUARDs each.
    assert first.group_by("guard_type").len().sort("guard_type").rows() == [
        ("DEFAULT_DEVICE", 1), ("DICT_CONTAINS", 2), ("DIMENSION_DYNAMIC_MARKING_GUARD", 25), ("GLOBAL_STATE", 1),
        ("ID_MATCH", 6), ("LAMBDA_GUARD", 1), ("TENSOR_MATCH", 5), ("TORCH_FUNCTION_MODE_STACK", 1), ("TYPE_MATCH", 11)]


def test_a_guard_added_has_its_user_line_as_tlparse_shows_it():
    """tlparse's export_guard_added input: the guard, the symbol's source and the user's frame."""
    _, tables = _parsed(next(p for p in LOGS if p.name == "export_guard_added.log.gz"))
    [row] = _table(tables, "torch_trace_guards").drop("dump_id", "parser_version").rows(named=True)
    assert row == {
        "compile_id": None, "frame_id": None, "frame_compile_id": None, "attempt": None, "tlparse_id": None,
        "source": "guard_added", "guard_type": None, "guard": "Eq(s0, 3)", "guarded": "s0: L['args'][0][0].size()[0]",
        "reason": "eval", "user_code": "assert a.shape[0] == 3",
        "user_filename": "/data/users/angelayi/pytorch/test/export/test_draft_export.py", "user_lineno": 297,
        "user_function": "forward", "lineno": 27}


@pytest.mark.parametrize("path", LOGS, ids=_id)
def test_an_artifact_row_per_record_with_where_to_read_it(path):
    """Kind, compile, the lines it spans, its payload's bytes and lines, whether its MD5 holds."""
    text, tables = _parsed(path)
    want = []
    for lineno, rec, payload, line in _records(text):
        if not rec or (name := next(iter(rec))) in _NOT_ARTIFACTS:
            continue
        kind = rec[name].get("name") if name == "artifact" else name
        body = "\n".join(payload).encode()
        md5 = rec.get("has_payload")
        want.append((_tlparse(rec), name, kind, lineno, lineno + len(payload),
                     len(line.encode()), len(body) if md5 else 0, len(payload) if md5 else 0,
                     (bool(payload) and hashlib.md5(body).hexdigest() == md5) if md5 else None))
    got = _table(tables, "torch_trace_artifacts").sort("lineno").select(
        "tlparse_id", "record", "kind", "lineno", "end_lineno", "record_bytes", "payload_bytes", "payload_lines",
        "complete").rows()
    assert got == want


@pytest.mark.parametrize("path", LOGS, ids=_id)
def test_a_collective_row_per_op_of_each_compiles_schedule(path):
    """Each inductor_collective_schedule artifact's JSON list, an op a row, in order (parser version 7)."""
    text, tables = _parsed(path)
    want = [(_tlparse(rec), position, op, lineno + 2 + position)  # the list's "[" is the payload's first line
            for lineno, rec, payload, _ in _records(text)
            if rec and rec.get("artifact", {}).get("name") == "inductor_collective_schedule"
            for position, op in enumerate(json.loads("\n".join(payload)))]
    got = _table(tables, "torch_trace_collectives").select("tlparse_id", "position", "op", "lineno").rows()
    assert got == want


def test_the_collective_schedules_of_tlparses_ranks():
    """tlparse's multi_rank_schedule: rank 1's first compile issues no reduce_scatter (its report flags it)."""
    def schedules(name: str) -> dict[str, list[str]]:
        rows = _table(_parsed(next(p for p in LOGS if p.name == name))[1], "torch_trace_collectives")
        return {cid: ops.to_list() for (cid,), ops in
                ((k, g.sort("position")["op"]) for k, g in rows.group_by("tlparse_id", maintain_order=True))}

    ops = "torch.ops._c10d_functional.{}.default".format
    both = [ops("all_reduce_"), ops("wait_tensor")]
    assert schedules("dedicated_log_torch_trace_rank_0_6u3fubwl.log.gz") == {
        "[0/0]": [*both, ops("all_gather_into_tensor"), ops("reduce_scatter_tensor"), ops("wait_tensor"),
                  ops("wait_tensor")], "[1/0]": both}
    assert schedules("dedicated_log_torch_trace_rank_1_n8zycf07.log.gz") == {
        "[0/0]": [*both, ops("all_gather_into_tensor"), ops("wait_tensor")], "[1/0]": both}


def test_the_artifacts_of_a_compile_as_tlparse_lists_them():
    """graph_break's compile [2/0]: the Dynamo graph, AOT graphs, post-grad graphs, output code and metrics."""
    _, tables = _parsed(next(p for p in LOGS if p.parent.name == "graph_break"))
    arts = _table(tables, "torch_trace_artifacts").filter(pl.col("tlparse_id") == "[2/0]")
    kinds = arts["kind"].to_list()
    for kind in ("dynamo_output_graph", "aot_joint_graph", "aot_forward_graph", "aot_backward_graph",
                 "inductor_post_grad_graph", "inductor_output_code", "compilation_metrics", "bwd_compilation_metrics",
                 "dynamo_cpp_guards_str"):
        assert kind in kinds, kind
    assert arts.filter(pl.col("kind") == "inductor_output_code").height == 2  # forward and lazy backward
    assert arts.filter(pl.col("payload_lines") > 0)["complete"].all()


def test_a_hostile_guard_line_is_bounded_and_costs_only_its_payloads_md5():
    """plain's tree with its GLOBAL_STATE leaf 200,000 characters long (runs of '  # ' that a regex
    search for the user line would backtrack over): its row's texts are cut at 1,000 characters, the other
    52 rows are the log's, and the payload's MD5 no longer holding is an error naming its line."""
    path = next(p for p in LOGS if p.parent.name == "plain")
    lines = gzip.decompress(path.read_bytes()).decode().split("\n")
    at = next(i for i, line in enumerate(lines) if "+- GLOBAL_STATE: " in line)
    lines[at] = lines[at] + "  # x" * 40_000
    got = parse_dump(io.BytesIO("\n".join(lines).encode()), "a.log")
    guards = got.tables["torch_trace_guards"]
    assert guards.height == 53
    [(state, user_code)] = guards.filter(pl.col("guard_type") == "GLOBAL_STATE").select("guard", "user_code").rows()
    assert state.startswith("___check_global_state() against {") and state.endswith('"torch_function_all_disabled":false}')
    assert user_code == ("x  # " * 200)[:1000]  # what follows the code, cut
    record = next(i for i in range(at, 0, -1) if "dynamo_cpp_guards_str" in lines[i]) + 1
    end = next(i for i in range(record, len(lines)) if not lines[i].startswith("\t"))  # the payload's last line
    assert [e for e in got.summary.errors if "does not match" in e] == [
        f"a.log: line {record}: the payload of dynamo_cpp_guards_str (lines {record + 1}-{end}) does not "
        "match the record's MD5: lines lost or altered"]
    assert got.tables["torch_trace_artifacts"].filter(pl.col("record") == "dynamo_cpp_guards_str")["complete"].to_list() == [False]


def test_a_dynamo_guards_entry_that_is_not_json_is_an_error_naming_its_line():
    path = next(p for p in LOGS if p.name == "comp_metrics.log.gz")
    lines = gzip.decompress(path.read_bytes()).decode().split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith('\t{"code": "utils_device'))
    lines[at] = lines[at][:40]
    got = parse_dump(io.BytesIO("\n".join(lines).encode()), "a.log")
    assert f"a.log: line {at + 1}: a dynamo_guards entry of compile 0/0 is not a JSON object; skipped" in got.summary.errors
    assert got.tables["torch_trace_guards"].group_by("tlparse_id", maintain_order=True).len().rows() == [
        ("[0/0_1]", 2), ("[1/0_1]", 3), ("[2/0]", 3)]


def test_the_same_job_in_another_process_has_the_same_guards():
    """ranked's two ranks, and plain against plain_warm, are the same job in two processes: 17 of the
    53 leaves of their trees differ as written (object ids), none of their guard rows does (but the
    line it is on)."""
    def leaves(path: Path) -> list[str]:
        return [p for _, rec, payload, _ in _records(_parsed(path)[0]) if rec and "dynamo_cpp_guards_str" in rec
                for p in payload if _LEAF.match(p)]

    def guards(path: Path) -> pl.DataFrame:
        return _table(_parsed(path)[1], "torch_trace_guards").drop("dump_id", "parser_version", "lineno")  # not where

    for case in ("ranked", "plain"):
        first, second = (sorted(p for p in LOGS if p.parent.name in (case, case + "_warm"))[:2] if case == "plain"
                         else sorted(p for p in LOGS if p.parent.name == case))
        a, b = leaves(first), leaves(second)
        assert (len(a), sum(x != y for x, y in zip(a, b))) == (53, 17)
        assert guards(first).equals(guards(second))


def test_shape_specialisations_and_guards_added_with_their_user_lines():
    """The dynamic case (torch 2.13, dynamic=True): 'if x.shape[0] > 2' guards the batch size, and
    'h.view(4, 32)' specialises it to 4; tlparse shows these on the compile's metrics page with
    their user stack. The three guard_added_fast rows are the compile's shape_env_guard_count."""
    _, tables = _parsed(next(p for p in LOGS if p.parent.name == "dynamic"))
    guards = _table(tables, "torch_trace_guards")
    shape = guards.filter(pl.col("source") != "cpp_guard").select(
        "tlparse_id", "source", "guard", "guarded", "reason", "user_code", "user_lineno", "user_function").rows()
    model = "h = h.view(4, 32)  # a fixed size: the batch size specialises to 4"
    linear = "return F.linear(input, self.weight, self.bias)"
    assert shape == [
        ("[0/0]", "guard_added_fast", "Eq(s27, 16)", None, None, linear, 134, "forward"),
        ("[0/0]", "shape_specialization", "s27 = 16", "L['x'].size()[1]", "range_refined_to_singleton", linear, 134,
         "forward"),
        ("[0/0]", "guard_added_fast", "s77 > 2", None, None, "if x.shape[0] > 2:  # a guard on the symbolic batch size",
         21, "forward"),
        ("[0/0]", "guard_added_fast", "Eq(32*s77, 128)", None, None, model, 23, "forward"),
        ("[0/0]", "shape_specialization", "s77 = 4", "L['x'].size()[0]", "range_refined_to_singleton", model, 23,
         "forward")]
    assert guards.filter(pl.col("source") == "guard_added_fast")["user_filename"][1] == (
        "/tmp/dumpscope-torch-trace/src/dumpscope_model.py")
    compiles = _table(tables, "torch_trace_compiles")
    assert compiles.select("tlparse_id", "guard_count", "shape_env_guard_count").rows() == [("[0/0]", 46, 3)]
