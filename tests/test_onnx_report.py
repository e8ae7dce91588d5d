"""PyTorch ONNX export report parser: exact figures from the torch 2.5 seed and torch 2.13 reports.

The 2.13 figures are checked against ``onnx.load`` of the exported model
(tests/fixtures/onnx_report/<case>/onnx_load.json, see ORIGIN.md there).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import collect
from transforms.parsers import onnx_report as onnx
from transforms.records import DumpKind, DumpSummary, ParseError

FIX = Path(__file__).parent / "fixtures"
SEEDS = FIX / "seeds"
SEED = SEEDS / "000_d1eac3fb69f76648.txt"
CASES = sorted((FIX / "onnx_report").glob("*/onnx_export_*.md"))
CASE = {p.parent.name: p for p in CASES}


def _lines(text: str) -> list[str]:
    """Lines as iterating a text file yields them (split on \\n only, newline kept)."""
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def run(lines) -> tuple[dict[str, pl.DataFrame], DumpSummary]:
    tables, summary = collect(onnx, lines, all_tables=True)
    assert summary.kind is DumpKind.ONNX_REPORT
    return tables, summary


def run_file(path: Path):
    with open(path, encoding="utf-8") as f:
        return run(f)


@pytest.fixture(scope="module")
def seed():
    return run_file(SEED)


def _ops(tables, source: str) -> dict[str, int]:
    df = tables["onnx_op_counts"].filter(pl.col("source") == source)
    return dict(zip(df["op"], df["count"]))


def test_seed_steps(seed):
    tables, summary = seed
    steps = tables["onnx_steps"]
    assert list(zip(steps["step"], steps["status"])) == [
        ("torch_export_strict", "failed"),
        ("torch_export_nonstrict", "ok"),
        ("jit_trace", "skipped"),
        ("translate", "ok"),
        ("onnx_checker", "ok"),
        ("onnx_runtime", "ok"),
        ("accuracy", "failed"),
    ]
    assert steps["lineno"].to_list() == list(range(4, 11))
    m = summary.metrics
    assert {k: v for k, v in m.items() if k.startswith("onnx.step.")} == {
        "onnx.step.torch_export_strict": 0,
        "onnx.step.torch_export_nonstrict": 1,
        "onnx.step.translate": 1,
        "onnx.step.onnx_checker": 1,
        "onnx.step.onnx_runtime": 1,
        "onnx.step.accuracy": 0,
    }
    assert tables["onnx_reports"]["outcome"].to_list() == ["accuracy"]


def test_seed_figures(seed):
    tables, summary = seed
    assert summary.errors == [] and not summary.truncated
    assert summary.stage == "export"
    assert summary.program == "encoder+decoder+tencoder+tdecoder+freq+channel+crosstransformer(mix,spec)"
    m = summary.metrics
    assert m["onnx.parameters"] == 41984456
    assert m["onnx.fx_nodes"] == 1702
    assert m["onnx.fx_ops_distinct"] == 45
    assert m["onnx.graph_nodes"] == 4315
    assert m["onnx.opset"] == 18
    assert m["onnx.ir_version"] == 9
    assert m["onnx.functions"] == 324  # `def pkg.onnxscript.torch_lib::...` blocks after the main graph
    assert m["onnx.initializers"] == 533
    assert m["onnx.errors"] == 1
    assert m["onnx.max_abs_diff"] == 2.128993
    assert m["onnx.max_rel_diff"] == 3.286579e05
    fx = _ops(tables, "fx_target")
    assert len(fx) == 45 and sum(fx.values()) == 1166
    assert fx["aten.view.default"] == 182 and fx["<built-in function getitem>"] == 52 and fx["aten.cat.default"] == 1
    assert _ops(tables, "fx_node_op") == {"placeholder": 535, "call_function": 1166, "output": 1}
    graph_ops = _ops(tables, "onnx_main_graph")
    assert sum(graph_ops.values()) == 4315
    assert graph_ops["pkg.onnxscript.torch_lib::aten_add"] >= 1 and "Identity" in graph_ops
    r = tables["onnx_reports"].row(0, named=True)
    assert r["producer_name"] == "torch" and r["producer_version"] == "2.5.0.dev20240828+cpu"
    assert r["torch_version"] == "2.5.0.dev20240828+cpu"
    assert r["opset_imports"] == ["ai.onnx=18", "pkg.onnxscript.torch_lib=1", "pkg.onnxscript.torch_lib.common=1"]
    assert (r["graph_name"], r["graph_inputs"], r["graph_outputs"]) == ("main_graph", 2, 2)
    assert (r["buffers"], r["dispatch_failures"], r["verified_outputs"]) == (0, 0, 2)
    assert r["title"] == "PyTorch ONNX Conversion Report" and r["report_kind"] == "report"
    assert len(r["decomp_only_before"]) == 10 and r["decomp_only_after"][-1] == "prims.convert_element_type.default"
    assert (r["lineno_errors"], r["lineno_onnx_model"], r["lineno_verification"]) == (13, 2549, 21477)


def test_seed_verification_and_errors(seed):
    tables, _ = seed
    v = tables["onnx_verification"]
    assert v["name"].to_list() == ["add_76", "add_77"]
    assert v["max_abs_diff"].to_list() == [2.128993, 0.01667315]
    assert v["max_rel_diff"].to_list() == [3.286579e05, 5.604292e03]
    assert v["abs_diff_hist"][0].to_list()[:2] == [896.0, 7702.0] and len(v["abs_diff_hist"][0]) == 8
    assert v["bin_edges"][1].to_list() == [0.0, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0]
    e = tables["onnx_errors"].row(0, named=True)
    assert len(tables["onnx_errors"]) == 1
    assert (e["section"], e["source"], e["exception_type"], e["frames"], e["lineno"]) == (
        "errors", "TorchExportStrategy", "AssertionError", 65, 215)  # fmt: skip
    assert e["message"].startswith("Dynamo attempts to add additional input during export: value=0")


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.parent.name)
def test_torch_213_reports_match_onnx_load(path):
    tables, summary = run_file(path)
    fig = json.loads((path.parent / "onnx_load.json").read_text())
    r = tables["onnx_reports"].row(0, named=True)
    assert summary.errors == [] and not summary.truncated
    assert r["outcome"] == re.fullmatch(r"onnx_export_[\d-]+_[\d-]+_(\w+)", path.stem).group(1)
    if r["report_kind"] == "report":
        assert summary.metrics["onnx.parameters"] == fig["parameters"]
    if "graph_nodes" not in fig:  # export failed before there was a model
        assert r["graph_nodes"] is None and _ops(tables, "onnx_main_graph") == {}
        return
    m = summary.metrics
    assert m["onnx.graph_nodes"] == fig["graph_nodes"]
    assert m["onnx.opset"] == fig["opset_import"][""]
    assert m["onnx.ir_version"] == fig["ir_version"]
    assert m["onnx.functions"] == fig["functions"]
    assert m["onnx.initializers"] == fig["initializers"]
    assert r["opset_imports"] == [f"{d or 'ai.onnx'}={v}" for d, v in fig["opset_import"].items()]
    assert (r["producer_name"], r["producer_version"]) == (fig["producer_name"], fig["producer_version"])
    assert r["torch_version"] == fig["torch"] == "2.13.0+cpu"
    assert (r["graph_inputs"], r["graph_outputs"]) == (fig["graph_inputs"], fig["graph_outputs"])
    assert _ops(tables, "onnx_main_graph") == fig["op_types"]
    assert r["verified_outputs"] == fig["graph_outputs"] == len(tables["onnx_verification"])


def test_torch_213_steps_and_errors():
    tables, summary = run_file(CASE["datadep_draft"])
    steps = dict(zip(tables["onnx_steps"]["step"], tables["onnx_steps"]["status"]))
    assert steps == {
        "torch_export_nonstrict": "failed", "torch_export_strict": "failed", "draft_export": "ok",
        "decompose": "ok", "translate": "ok", "onnx_checker": "ok", "onnx_runtime": "ok", "accuracy": "ok",
    }  # fmt: skip
    errs = tables["onnx_errors"]
    assert errs["source"].to_list() == [
        "TorchExportNonStrictStrategy", "TorchExportStrictStrategy", "TorchExportDraftExportStrategy"]  # fmt: skip
    assert errs["exception_type"].to_list() == [
        "torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode",
        "torch._dynamo.exc.Unsupported",
        "RuntimeError",
    ]
    assert errs["frames"].to_list() == [54, 18, None]
    assert errs["message"][2].startswith("WARNING: 1 issue(s) found during export")
    assert summary.metrics["onnx.errors"] == 3 and summary.metrics["onnx.step.draft_export"] == 1
    fx = _ops(tables, "fx_target")
    assert fx["<function sym_ite>"] == 2 and sum(fx.values()) == 18  # "at 0x.." addresses dropped

    tables, summary = run_file(CASE["datadep"])
    r = tables["onnx_reports"].row(0, named=True)
    assert (r["report_kind"], r["outcome"], r["parameters"]) == ("error_report", "pt_export", None)
    assert tables["onnx_errors"]["frames"].to_list() == [54, 18]
    assert summary.metrics == {"onnx.step.torch_export_nonstrict": 0, "onnx.step.torch_export_strict": 0,
                               "onnx.errors": 2}  # fmt: skip

    tables, summary = run_file(CASE["custom"])
    errs = tables["onnx_errors"]
    assert errs["exception_type"].to_list() == [
        "torch.onnx._internal.exporter._errors.DispatchError",
        "torch.onnx._internal.exporter._errors.ConversionError",
        None,
    ]
    assert errs["chained"].to_list() == [False, True, False] and errs["source"][2] == "dumpscope.mystery.default"
    assert errs["section"].to_list() == ["errors", "errors", "onnx_conversion"]
    assert tables["onnx_reports"]["dispatch_failures"].to_list() == [1] and summary.metrics["onnx.errors"] == 3

    tables, summary = run_file(CASE["bigmm"])
    assert summary.metrics["onnx.step.accuracy"] == 0 and summary.metrics["onnx.max_abs_diff"] == 1.0
    assert tables["onnx_verification"]["max_rel_diff"].to_list() == [2.880338e-04]


def test_nested_subgraphs_are_not_main_graph_nodes():
    tables, summary = run_file(CASE["nestedcond"])
    assert summary.metrics["onnx.graph_nodes"] == 18
    ops = _ops(tables, "onnx_main_graph")
    assert ops["If"] == 1 and "Cos" not in ops and "Sigmoid" not in ops  # those live in the If branches


# --- The model's name (program): from the exported program's ``def forward(self, ...)`` ---

BUCKETS = Path(__file__).parent / "incident_buckets"
SAMPLES = Path(__file__).resolve().parents[1] / "data" / "sample_bucket"


def _program(path: Path) -> str | None:
    import gzip

    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text(encoding="utf-8")
    return run(_lines(text))[1].program


@pytest.mark.parametrize("case, name", [
    ("mlp", "conv+bn+fc1+fc2(x)"),  # conv, bn (parameters and buffers), fc1, fc2: in the order they hold state
    ("nestedcond", "fc+fc2(x)"),
    ("bigmm", "fc(x)"),
    ("custom", "fc(x)"),  # failed at translate: the exported program is there, and names it
    ("datadep_draft", "fc(x)"),  # draft_export's program
    # Every capture strategy failed (torch 2.13's error report names no model and holds no exported
    # program): the model's own frame where the exporter entered it, `if y.sum() > 0:` in DataDep.forward
    # (make_reports.py:59). Main named it None, so its series took the folder's name (the job's).
    ("datadep", "forward at make_reports.py:59"),
])
def test_the_program_is_the_model_the_exported_program_names(case, name):
    assert _program(CASE[case]) == name


def test_a_report_without_a_model_frame_has_no_name():
    """An error report whose tracebacks show only the exporter's and Python's own frames names nothing
    (the folder's name applies): frames under torch/, site-packages/onnx/ and Python's lib are no model."""
    text = CASE["datadep"].read_text(encoding="utf-8")
    model_frames = [line for line in text.splitlines() if "make_reports.py" in line and line.lstrip().startswith("File ")]
    assert len(model_frames) == 3
    for line in model_frames:
        text = text.replace(line, '  File "/usr/lib/python3.11/contextlib.py", line 81, in inner')
    assert run(_lines(text))[1].program is None


def test_the_program_of_real_reports_in_buckets():
    corpus = _program(CORPUS_REPORT)
    assert corpus == "qkv+proj+norm(x)"
    # The samples' MLP: 64 wide x 2 blocks, 96 x 2, 96 x 3 with a median that fails to translate,
    # 128 x 3 with batch 32: one name every night, shapes and a block more inside `blocks` aside.
    nights = sorted(SAMPLES.glob("*/torch-onnx/onnx_export_*.md.gz"))
    assert [p.name.rsplit("_", 1)[1] for p in nights] == ["success.md.gz", "success.md.gz", "conversion.md.gz",
                                                          "success.md.gz"]
    assert {_program(p) for p in nights} == {"inp+blocks+head(x)"}
    # Two models of one job: the conv net keeps its name when it grows (8 -> 12 channels, 2 -> 3 convs).
    two = BUCKETS / "two_onnx_models"
    assert {_program(p) for p in two.glob("*/torch-onnx/convnet/*.md.gz")} == {"features+head(x)"}
    assert {_program(p) for p in two.glob("*/torch-onnx/mlp/*.md.gz")} == {"inp+blocks+head(x)"}


def test_program_name_rules():
    sig = '        def forward(self, {}):'
    assert onnx.program_name(sig.format('p_fc_weight: "f32[4, 4]", p_fc_bias: "f32[4]", x: "f32[2, 4]"')) == "fc(x)"
    # Buffers and constants name their module too; effect tokens and lifted constants are no module.
    assert onnx.program_name(sig.format(
        'token: "f32[0]", p_a_w: "f32[2]", b_norm_running_mean: "f32[2]", c_lifted_tensor_0: "i64[]", '
        'c__tensor_constant0: "f32[]", c_table_x: "f32[3]", obj_cache: "FakeScriptObject", ids: "i64[2]", '
        'mask: "b8[2]"')) == "a+norm+table+cache(ids,mask)"
    # A model that is itself a Sequential: its numbered children are one entry, whatever their number.
    assert onnx.program_name(sig.format('p_0_weight: "f32[4, 4]", p_2_weight: "f32[4, 4]", input: "f32[2, 4]"')) \
        == "[i](input)"
    assert onnx.program_name(sig.format(", ".join(f'p_m{i}_w: "f32[2]"' for i in range(11)) + ', x: "f32[2]"')) \
        == "m0+m1+m2+m3+m4+m5+m6+m7+3_more(x)"
    assert onnx.program_name(sig.format(", ".join(f'in{i}: "f32[2]"' for i in range(6)))) == "(in0,in1,in2,in3,2_more)"
    # Symbolic sizes and unquoted annotations are no names; a signature without arguments names nothing.
    assert onnx.program_name(sig.format('p_fc_w: "f32[s0, 4]", n: "Sym(s0)", flag: bool')) == "fc(n,flag)"
    assert onnx.program_name("        def forward(self):") is None
    assert onnx.program_name("    return (add,)") is None


@pytest.mark.parametrize("line", [
    "def forward(self, ",  # cut
    'def forward(self, p_fc_weight: "f32[4, 4], x',  # an open quote swallows the rest
    "def forward(self, <script>alert(1)</script>, x)",  # stops at what is no identifier
    "def forward(self, " + "p_" * 100_000 + "x)",
    "def forward(self, " + ", ".join(f"p_m{i}_w" for i in range(200_000)) + ", x)",  # many modules: counted
    "def forward(self, " + "a" * 1_000_000 + ": 'f32', y)",
    'def forward(self, p_a_w: "' + "," * 1_000_000 + '", x)',
    "def forward(self, *args, **kwargs)",
    "def forward(self, p_модуль_вес, x\u2028y, é)",
    "def forward(self, \x00, p_\x1b[31m_w)",
])
@pytest.mark.slow
def test_hostile_signatures_never_crash_and_stay_short(line):
    name = onnx.program_name(line)  # its time is a benchmark's figure (no timed assertion here: load made it fail)
    assert name is None or (len(name) < 500 and "\n" not in name and "<" not in name and "\x00" not in name)
    # In a report: whatever the line, the report parses and the program is that name.
    text = CASE["nestedcond"].read_text(encoding="utf-8")
    start = text.index("        def forward(self, p_fc_weight")
    end = text.index("\n", start)
    _, summary = run(_lines(text[:start] + "        " + line + text[end:]))
    assert summary.program == name and not summary.truncated


def test_sniff():
    for path in [SEED, *CASES]:
        assert onnx.sniff(path.name, path.read_text(encoding="utf-8")[:65536])
    for path in sorted(SEEDS.glob("00[1-9]_*.txt")):
        assert not onnx.sniff(path.name, path.read_text(encoding="utf-8")[:65536])
    assert not onnx.sniff("x.md", "# PyTorch ONNX notes\n")
    assert onnx.sniff("x.md", "\ufeff# PyTorch ONNX Conversion Report\r\n\r\n```\n")
    # The name claims the file (an empty or binary one is then a failed report), the stage is the text's.
    assert all(onnx.stage_from_name(p.name) == "export" for p in CASES)
    assert onnx.stage_from_name("notes.md") is None and onnx.stage_from_name(SEED.name) is None


def test_not_a_report_raises():
    with pytest.raises(ParseError):
        run([])
    with pytest.raises(ParseError):
        run(["\n", "  \n"])
    with pytest.raises(ParseError) as err:
        run(["\n", "HloModule jit_f\n", "# PyTorch ONNX Conversion Report\n"])
    assert err.value.lineno == 2


def test_variants_of_line_endings_give_the_same_rows(seed):
    text = CASE["nestedcond"].read_text(encoding="utf-8")
    full, summary = run(_lines(text))
    for variant in (text.split("\n"), _lines(text.replace("\n", "\r\n"))):
        tables, s = run(variant)
        assert s.metrics == summary.metrics and not s.truncated
        for t in onnx.TABLES:
            assert tables[t].equals(full[t])


def test_junk_unknown_steps_and_huge_lines():
    text = CASE["mlp"].read_text(encoding="utf-8")
    text = text.replace("✅ Translate the graph", "🟡 Translate the graph")
    text = text.replace("✅ Run `onnx.checker`", "✅ Run a brand new checker\n✅ Run `onnx.checker`")
    text = text.replace("## Analysis\n", "## Something new\n\n" + "x" * 5_000_000 + "\n\n## Analysis\n")
    text = text.replace("    return %\"softmax\"", "    " + "y" * 5_000_000 + "\n    return %\"softmax\"")
    tables, summary = run(_lines(text + "trailing junk line\n"))
    steps = dict(zip(tables["onnx_steps"]["step"], tables["onnx_steps"]["status"]))
    assert steps["translate"] == "unknown" and "onnx.step.translate" not in summary.metrics
    assert summary.metrics["onnx.step.run_a_brand_new_checker"] == 1
    assert summary.metrics["onnx.graph_nodes"] == 7 and summary.metrics["onnx.parameters"] == 16986


def _rowset(df: pl.DataFrame) -> set:
    return {tuple(tuple(v) if isinstance(v, list) else v for v in row) for row in df.iter_rows()}


_FULL: dict[str, tuple] = {}


def _check_cut(name: str, path: Path, cut_text: str) -> None:
    if name not in _FULL:
        text = path.read_text(encoding="utf-8")
        _FULL[name] = (text, *run(_lines(text)))
    text, full, full_summary = _FULL[name]
    try:
        tables, summary = run(_lines(cut_text))
    except ParseError:
        return
    for t in onnx.TABLES:
        if t == "onnx_reports":
            cut_row, full_row = tables[t].row(0, named=True), full[t].row(0, named=True)
            assert {k: v for k, v in cut_row.items() if v is not None}.items() <= full_row.items()
        else:
            assert _rowset(tables[t]) <= _rowset(full[t]), t
    assert summary.metrics.items() <= full_summary.metrics.items()
    assert summary.program in (None, full_summary.program)  # a cut never renames the model
    if cut_text.rstrip() != text.rstrip():  # the cut removed content
        assert summary.truncated or summary.errors


TRUNCATION_CASES = {"seed": SEED, "nestedcond": CASE["nestedcond"], "datadep": CASE["datadep"],
                    "custom": CASE["custom"]}  # fmt: skip


@pytest.mark.parametrize("name", TRUNCATION_CASES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frac=st.floats(0, 1), mid_line=st.booleans())
@pytest.mark.slow
def test_truncation_never_invents_rows(name, frac, mid_line):
    path = TRUNCATION_CASES[name]
    data = path.read_bytes()
    cut = int(len(data) * frac)
    if not mid_line:  # cut at a line boundary
        cut = data.rfind(b"\n", 0, cut) + 1
    _check_cut(name, path, data[:cut].decode("utf-8", errors="ignore"))


def test_truncation_at_every_section_boundary():
    path = SEED
    text = path.read_text(encoding="utf-8")
    for marker in ("## Error messages", "## Exported program", "## ONNX model", "\n}\n", "## Analysis",
                   "## ONNX Conversion", "## Decomposition", "Ops exist only in the ExportedProgram after",
                   "## Verification", "`add_77`"):  # fmt: skip
        at = text.index(marker)
        _check_cut("seed", path, text[:at])
        tables, summary = run(_lines(text[:at]))
        assert summary.truncated, marker


# --- The corpus report (data/corpus/inductor_onnx, generated with torch 2.13.0: MANIFEST.json) ---

CORPUS_REPORT = (Path(__file__).resolve().parents[1] / "data" / "corpus" / "inductor_onnx"
                 / "onnx_export_2026-11-23_13-38-30-924547_success.md.gz")


def test_the_attention_report_of_the_corpus():
    import gzip

    text = gzip.decompress(CORPUS_REPORT.read_bytes()).decode()
    tables, s = run(_lines(text))
    assert (s.errors, s.truncated) == ([], False)
    # Independent figures: parameters from the model's definition (make_files.py): LayerNorm(16)
    # 2*16, Linear(16, 48) 16*48+48, Linear(16, 16) 16*16+16.
    assert s.metrics["onnx.parameters"] == 2 * 16 + (16 * 48 + 48) + (16 * 16 + 16) == 1120
    # Main-graph nodes: the numbered node lines of the printed model ("    11 |  # node_add").
    assert s.metrics["onnx.graph_nodes"] == len(re.findall(r"^ +\d+ \|  # ", text, re.M)) == 12
    # Initializers: the `%"name"<FLOAT,[...]>{...}` lines of the initializers block.
    block = text.split("initializers=(", 1)[1].split("),\n) {", 1)[0]
    assert s.metrics["onnx.initializers"] == len(re.findall(r'^ +%"[^"]+"<FLOAT,\[[\d,]*\]>\{', block, re.M)) == 7
    # FX nodes: 6 parameters + x placeholders, 13 call_function, 1 output; 9 distinct targets listed.
    assert s.metrics["onnx.fx_nodes"] == 7 + 13 + 1
    assert s.metrics["onnx.fx_ops_distinct"] == 9 == len(_ops(tables, "fx_target"))
    assert sum(_ops(tables, "fx_target").values()) == 13
    assert _ops(tables, "onnx_main_graph") == {"LayerNormalization": 1, "MatMul": 4, "Add": 3, "Split": 1,
                                               "Transpose": 1, "Div": 1, "Softmax": 1}
    from collections import Counter  # the same, counted from the node lines' `⬅️ ::<Op>(`
    assert _ops(tables, "onnx_main_graph") == dict(Counter(re.findall(r"⬅️ ::(\w+)\(", text)))
    assert tables["onnx_verification"].height == 1 and s.metrics["onnx.step.accuracy"] == 1
    # Without its final newline (as pasted): the same.
    tables2, s2 = run(_lines(text.rstrip("\n")))
    assert (s2.errors, s2.metrics) == ([], s.metrics)
