"""PyTorch ONNX export reports (``onnx_export_<timestamp>_<outcome>.md``) as tables and metrics.

Input: the lines of the Markdown file ``torch.onnx.export(..., dynamo=True, report=True)``
writes (torch 2.5 to 2.13). ``# PyTorch ONNX Conversion Report`` has a fenced block of
step lines (✅ passed, ❌ failed, ⚪ not run), "## Error messages" (a ``pytb`` block),
"## Exported program", "## ONNX model" (``str(onnx_ir.Model)``), "## Analysis"
(parameters, FX node and operator counts, "## ONNX Conversion Information"),
"## Decomposition comparison", "## Verification results" and "## Profiling result",
each only when that stage ran. ``# PyTorch ONNX Conversion Error Report`` (no capture
strategy worked) has the steps and an "Error message:" ``pytb`` block only.

Output (``parse``): ``TableBatch`` items of the tables in ``TABLES``, then one
``DumpSummary`` (stage ``export``). Its program is the model as the exported program's
signature names it (``program_name``: ``inp+blocks+head(x)``), so several reports in one
folder stay apart whatever their order. A report without an exported program (every capture
strategy failed: torch 2.13 prints the steps and each strategy's traceback, and names no model)
is named by the first frame of the model's own code in those tracebacks, where the exporter
entered the model: ``forward at model.py:9``; with none, ``None`` (the caller names it after
its folder).

Guarantees: a row is yielded only when all its fields are final (ONNX op counts when
the main graph closes; a verification entry when its histograms end), and a report
field or metric is set only when its section is complete, so a cut report yields a
subset of the whole report's rows with equal values. A last line without its newline
(a byte cut) is not read and sets ``truncated``, unless no cut can leave it looking whole
(a closing fence, a closed decomposition op list, the end of a verification entry); so does an unclosed code block, or a
section the step statuses promise but the file lacks (the model when translation
passed, the decomposition comparison unless decomposition failed, one verification
entry per graph output when ONNX Runtime ran). Memory is flat in the file size.
A number no report can hold (a count past what its column holds, a negative difference) is an
error naming its line and is stored as null; a NaN or infinite difference (what torch prints
when an output does not compare) is kept in its row and leaves ``onnx.max_*_diff`` absent. A
line that cannot be read (``records.record_failure``) is an error and skipped.
Raises ``ParseError`` only for empty input or a first line that is not a report title.
"""

from __future__ import annotations

import math
import re
from typing import Iterable

import polars as pl

from transforms.parsers import onnx_report_sections as sec
from transforms.figure_bounds import COUNT, DIFFERENCE, ELEMENTS, Bounds
from transforms.records import (RECORD_FAILURES, DumpKind, DumpSummary, ParseError, ParserOutput, RowBuffer,
                               line_error, record_failure)

# 2: every cut is an error; a whole last line without newline is read.
# 3: the program is named from the exported program's signature (was None: the folder's name).
# 4: a count past its column or a negative difference is an error, stored as null (was: the report failed, or
# it was stored); a NaN or infinite difference leaves onnx.max_*_diff absent (was: a NaN figure).
# 5: a report without an exported program is named by the model's first frame in its tracebacks (was: None,
# the folder's name: the job's, for reports in the job folder).
PARSER_VERSION = 5
PROGRAM_FROM_TEXT = True  # the program is what the dump's text names (transforms.parse.named_at)

_TITLES = {"# PyTorch ONNX Conversion Report": "report", "# PyTorch ONNX Conversion Error Report": "error_report"}
_SECTIONS = {  # heading -> section; its line number goes to the ``lineno_<section>`` column
    "Error messages": "errors",
    "Exported program": "exported_program",
    "ONNX model": "onnx_model",
    "Analysis": "analysis",
    "Model Information": "analysis",
    "ONNX Conversion Information": "onnx_conversion",
    "Decomposition comparison": "decomposition",
    "Verification results": "verification",
    "Profiling result": "profiling",
}
_LINENO_COLS = ("steps", "errors", "exported_program", "onnx_model", "analysis", "onnx_conversion",
                "decomposition", "verification", "profiling")  # fmt: skip
_MODEL_INFO = re.compile(r"^The model has (\d+) parameters and (\d+) buffers")
_FX_NODES = re.compile(r"^The FX graph has (\d+) nodes")
_COUNT_ITEM = re.compile(r"^- `(.*)`: (\d+)$")
_DISPATCH_ITEM = re.compile(r"^- `([^`]*)`:(.*)$")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>")  # "<function sym_ite at 0x7f..>" differs per run
_QUOTED = re.compile(r"'([^']*)'|\"([^\"]*)\"")
_DECOMP = ("Ops exist only in the ExportedProgram before decomposition: ",
           "Ops exist only in the ExportedProgram after decomposition: ")  # fmt: skip
_FILE_NAME = re.compile(r"^onnx_export_[\d_-]+_\w+\.md$")  # onnx_export_<timestamp>_<outcome>.md
_MAX_ERRORS = 50
# The model's name (``program_name``). torch.export names the forward's placeholders
# (torch/_export/utils.py placeholder_prefixes): state as p_ (parameter), b_ (buffer),
# c_ (constant), obj_ (custom object) + its dotted path lowercased with every other
# character as "_"; effect tokens token, token_1...; user inputs by their argument name.
_FORWARD = "def forward(self"
_ARG = re.compile(r'\s*,\s*([^\W\d]\w*)\s*(?::\s*(?:"[^"]*"|[^,)"]*))?')  # ', p_fc_weight: "f32[4, 4]"'
_STATE = ("p_", "b_", "c_", "obj_")
_SYNTHETIC = re.compile(r"^(?:token(?:_\d+)?|c__tensor_constant\d+|c_lifted_tensor_\d+)$")
_MAX_MODULES, _MAX_INPUTS, _MAX_PART, _MAX_SEEN = 8, 4, 40, 1000
_DIRECTORIES = re.compile(r"^.*[/\\]")

REPORTS = pl.Schema(
    {
        "title": pl.String, "report_kind": pl.String, "outcome": pl.String, "torch_version": pl.String,
        "producer_name": pl.String, "producer_version": pl.String, "ir_version": pl.Int32, "opset": pl.Int32,
        "opset_imports": pl.List(pl.String), "graph_name": pl.String, "graph_inputs": pl.Int32,
        "graph_outputs": pl.Int32, "initializers": pl.Int32, "graph_nodes": pl.Int32, "functions": pl.Int32,
        "parameters": pl.Int64, "buffers": pl.Int64, "fx_nodes": pl.Int32, "fx_ops_distinct": pl.Int32,
        "dispatch_failures": pl.Int32, "decomp_only_before": pl.List(pl.String),
        "decomp_only_after": pl.List(pl.String), "verified_outputs": pl.Int32,
        **{f"lineno_{s}": pl.Int32 for s in _LINENO_COLS},
    }
)  # fmt: skip
STEPS = pl.Schema({"step": pl.String, "text": pl.String,
                   "status": pl.Enum(["ok", "failed", "skipped", "unknown"]), "lineno": pl.Int32})  # fmt: skip
OP_COUNTS = pl.Schema({"source": pl.Enum(["fx_target", "fx_node_op", "onnx_main_graph"]), "op": pl.String,
                       "count": pl.Int64, "lineno": pl.Int32})  # fmt: skip
VERIFICATION = pl.Schema({"name": pl.String, "max_abs_diff": pl.Float64, "max_rel_diff": pl.Float64,
                          "abs_diff_hist": pl.List(pl.Float64), "rel_diff_hist": pl.List(pl.Float64),
                          "bin_edges": pl.List(pl.Float64), "lineno": pl.Int32})  # fmt: skip
ERRORS = pl.Schema({"section": pl.String, "source": pl.String, "exception_type": pl.String, "message": pl.String,
                    "frames": pl.Int32, "chained": pl.Boolean, "lineno": pl.Int32})  # fmt: skip
TABLES = {"onnx_reports": REPORTS, "onnx_steps": STEPS, "onnx_op_counts": OP_COUNTS,
          "onnx_verification": VERIFICATION, "onnx_errors": ERRORS}  # fmt: skip

_SET_WHEN_COMPLETE = "Null unless its section is complete in the file."
TABLE_DOCS: dict[str, dict[str, str]] = {
    "onnx_reports": {
        "": "One row per PyTorch ONNX export report (torch.onnx.export(..., report=True)). A count past what its "
        "column holds is null, and the report's error (dumps.error) names its line.",
        "title": "The report's title line without '# '.",
        "report_kind": "'report' (a graph was captured) or 'error_report' (every capture strategy failed).",
        "outcome": "Postfix torch gives the file name, recomputed from the steps: success, strategies "
        "(some capture strategy failed), pt_export, decomp, conversion, checker, runtime or accuracy.",
        "torch_version": "producer_version when the ONNX model's producer is torch/pytorch.",
        "producer_name": "producer_name of the ONNX model.",
        "producer_version": "producer_version of the ONNX model.",
        "ir_version": "ONNX IR version of the model.",
        "opset": "Opset version of the default ONNX domain.",
        "opset_imports": "Every opset import as 'domain=version' ('ai.onnx' for the default domain).",
        "graph_name": "Name of the main graph.",
        "graph_inputs": "Inputs of the main graph.",
        "graph_outputs": "Outputs of the main graph.",
        "initializers": "Initializers of the main graph (weights and constants).",
        "graph_nodes": "Nodes of the main graph; nodes inside If/Loop subgraphs and functions are not counted. "
        + _SET_WHEN_COMPLETE,
        "functions": "Local ONNX functions defined after the main graph. " + _SET_WHEN_COMPLETE,
        "parameters": "Parameter elements of the ExportedProgram ('The model has N parameters').",
        "buffers": "Buffer elements of the ExportedProgram.",
        "fx_nodes": "Nodes of the FX graph ('The FX graph has N nodes').",
        "fx_ops_distinct": "Distinct call_function targets of the FX graph. " + _SET_WHEN_COMPLETE,
        "dispatch_failures": "Operators without a registered ONNX decomposition (0 when all have one).",
        "decomp_only_before": "Ops only in the ExportedProgram before decomposition.",
        "decomp_only_after": "Ops only in the ExportedProgram after decomposition.",
        "verified_outputs": "Verification entries (outputs compared with ONNX Runtime). " + _SET_WHEN_COMPLETE,
        **{f"lineno_{s}": f"Line where the {s.replace('_', ' ')} section starts (null if absent)."
           for s in _LINENO_COLS},
    },  # fmt: skip
    "onnx_steps": {
        "": "The export steps at the top of a report, one row per status line.",
        "step": "Stable slug: torch_export_strict, torch_export_nonstrict, jit_trace, draft_export, decompose, "
        "translate, onnx_checker, onnx_runtime, accuracy; an unknown step gets a slug of its text.",
        "text": "The step as printed.",
        "status": "ok (✅), failed (❌), skipped (⚪: not run), unknown (another marker).",
        "lineno": "Source line.",
    },
    "onnx_op_counts": {
        "": "Operator counts: FX call_function targets and node kinds (analysis), ONNX op types of the main graph.",
        "source": "fx_target (a call_function target), fx_node_op (placeholder, call_function, get_attr, output) "
        "or onnx_main_graph (an op type of the main ONNX graph, counted from the printed model).",
        "op": "Target or op type as printed, e.g. aten.add.Tensor; ' at 0x..' addresses removed; ONNX ops of "
        "another domain as 'domain::op'.",
        "count": "Number of nodes.",
        "lineno": "Source line (for ONNX ops: the first node of that type).",
    },
    "onnx_verification": {
        "": "Verification results: one row per output compared between PyTorch and ONNX Runtime.",
        "name": "Output (value) name, e.g. add_76.",
        "max_abs_diff": "Largest absolute difference (NaN when the output did not compare; null when negative, "
        "which no difference is).",
        "max_rel_diff": "Largest relative difference.",
        "abs_diff_hist": "Histogram counts of absolute differences.",
        "rel_diff_hist": "Histogram counts of relative differences.",
        "bin_edges": "Bin edges of the histograms (torch uses the same edges for both).",
        "lineno": "Source line.",
    },
    "onnx_errors": {
        "": "Errors in a report: each exception of 'Error messages' and each operator without an ONNX decomposition.",
        "section": "errors (the Error messages block) or onnx_conversion (a dispatch failure).",
        "source": "Capture strategy (e.g. TorchExportStrategy), a slug of another '# ⚠️' header "
        "(onnx_runtime_error), the operator of a dispatch failure, or null.",
        "exception_type": "Exception class as printed (null for dispatch failures).",
        "message": "First line of the message, colours removed.",
        "frames": "Frames in the exception's traceback (null when none is printed).",
        "chained": "True when printed after 'The above exception was the direct cause' (it wraps the row before).",
        "lineno": "Source line of the exception line.",
    },
}


def sniff(name: str, head: str) -> bool:
    first = head.lstrip("\ufeff").lstrip("\r\n").split("\n", 1)[0].rstrip("\r ")
    return first in _TITLES


def stage_from_name(name: str) -> str | None:
    return "export" if _FILE_NAME.match(name) else None


def program_name(line: str) -> str | None:
    """The model's name from its exported program's ``def forward(self, ...)`` line: the
    top-level modules that hold its state, in order of first appearance, joined by ``+``,
    then its user inputs: ``inp+blocks+head(x)`` from ``p_inp_weight``, ``p_blocks_0_norm_weight``,
    ``p_head_bias``... and ``x``. No shapes: a wider model, another batch or a layer more
    inside a container keeps the name; another model gets another.

    The placeholder names join the state's dotted path with "_", so a top-level module is
    the first word (``p_lm_head_weight`` → ``lm``): stable, not always the whole attribute
    name; a user input named like state (``b_mask``) reads as state. Numbered top-level
    modules (the model is itself a Sequential) are one ``[i]``. Synthetic placeholders
    (effect tokens, lifted tensor constants) are left out; past 8 modules or 4 inputs the
    rest is counted (``+3_more``), each part cut at 40 characters. None when the line is no
    such signature or names nothing. Linear in the line, whatever its bytes.
    """
    text = line.lstrip()
    if not text.startswith(_FORWARD):
        return None
    modules: dict[str, None] = {}  # ordered sets
    inputs: dict[str, None] = {}
    pos = len(_FORWARD)
    while (m := _ARG.match(text, pos)) is not None:
        pos, name = m.end(), m.group(1)
        if _SYNTHETIC.match(name):
            continue
        prefix = next((p for p in _STATE if name.startswith(p)), None)
        if prefix is None:
            if len(inputs) < _MAX_SEEN:
                inputs.setdefault(name[:_MAX_PART])
            continue
        top = name[len(prefix):].split("_", 1)[0]
        if top and len(modules) < _MAX_SEEN:
            modules.setdefault("[i]" if top.isdigit() else top[:_MAX_PART])
    if not modules and not inputs:
        return None
    return f"{_capped(modules, _MAX_MODULES, '+')}({_capped(inputs, _MAX_INPUTS, ',')})"


def _capped(names: dict[str, None], most: int, sep: str) -> str:
    shown = list(names)[:most]
    more = len(names) - len(shown)
    return sep.join(shown + ([f"{more}_more"] if more else []))


def parse(lines: Iterable[str]) -> ParserOutput:
    p = _Parser()
    yield from p.run(lines)
    yield p.summary()


class _Parser:
    def __init__(self) -> None:
        self.buf = {t: RowBuffer(t, s) for t, s in TABLES.items()}
        self.report = dict.fromkeys(REPORTS.names())
        self.status: dict[str, str] = {}
        self.errors: list[str] = []
        self.truncated = False
        self.section = "top"
        self.fence: str | None = None  # section of the open code block
        self.steps_done = self.errors_done = self.program_done = False
        self.model: sec.ModelScanner | None = None
        self.model_done = False
        self.err = sec.ErrorScanner()
        self.verif = sec.VerificationScanner()
        self.list_kind: str | None = None  # which "- `x`: n" list the analysis is in
        self.fx_targets = 0
        self.dispatch, self.dispatch_done = 0, False
        self.block_errors = 0  # exceptions in the Error messages block
        self.max_abs = self.max_rel = float("-inf")
        self.program: str | None = None
        self.forward_seen = False  # the exported program's first ``def forward`` (nested ones follow)

    def add(self, table: str, row: tuple | None):
        if row is not None and (batch := self.buf[table].add(row)) is not None:
            yield batch

    def error(self, lineno: int, msg: str) -> None:
        if len(self.errors) < _MAX_ERRORS:
            self.errors.append(line_error(lineno, msg))

    def run(self, lines: Iterable[str]):
        lineno, newlines = 0, None
        numbered = enumerate(lines, start=1)  # one iterator: after a line that raises, the next one
        while True:  # a line that raises costs itself only: the loop goes on after it (no cost per line)
            try:
                for lineno, raw in numbered:
                    if raw.endswith("\n"):
                        newlines, line = True, raw[:-1].rstrip("\r")
                    elif newlines and not self._whole_last(raw.rstrip("\r")):  # only a cut last line lacks
                        self.truncated = True  # the newline the others have, unless it ends the file whole
                        self.error(lineno, "last line cut mid-way (no newline); dropped")
                        break
                    else:
                        newlines, line = False, raw.rstrip("\r")
                    if self.section == "top":
                        self._title(lineno, line)
                    elif (fence := self.fence) == "exported_program" and not line.startswith("```"):
                        if not self.forward_seen and line.lstrip().startswith(_FORWARD):
                            self.forward_seen, self.program = True, program_name(line)
                        continue  # the bulk of a report; nothing else in it is read
                    elif fence == "onnx_model" and self.model is not None and not line.startswith("```"):
                        for row in self.model.feed(lineno, line) or ():  # the graph closed: op counts
                            yield from self.add("onnx_op_counts", row)
                    elif fence is not None:
                        yield from self._fenced(lineno, line)
                    elif line.startswith("```"):
                        self._open_fence(lineno)
                    elif line.startswith("## "):
                        yield from self._heading(lineno, line[3:].strip())
                    elif line == "Error message:":  # the error report has no heading
                        self.section, self.report["lineno_errors"] = "errors", lineno
                    else:
                        yield from self._text(lineno, line)
                break
            except RECORD_FAILURES as exc:
                if (why := record_failure(exc)) is None:
                    raise
                self.error(lineno, f"line {why}; skipped")
        if self.section == "top":
            raise ParseError("empty input: no report title", lineno or None)
        yield from self._finish(lineno)
        for buf in self.buf.values():
            if (batch := buf.flush()) is not None:
                yield batch

    def _whole_last(self, line: str) -> bool:
        """A last line without newline that no cut can fake: the closing fence of an open code
        block, a decomposition line whose op list closes, or the line that ends a verification
        entry's second histogram (a lone space may be the start of any line)."""
        if self.fence is not None:
            return line.rstrip() == "```"
        if self.section == "decomposition" and line.startswith(_DECOMP):
            return line.endswith("]`")  # the op list closes the line
        entry = self.verif.entry if self.section == "verification" else None
        # An entry's last line closes its second histogram: "...]))`" after "rel_diff_hist=".
        return entry is not None and line.endswith("))`") and any("rel_diff_hist=" in p for p in (*entry[4], line))

    def _title(self, lineno: int, line: str) -> None:
        line = line.lstrip("\ufeff").rstrip()
        if not line:
            return
        if line not in _TITLES:
            raise ParseError("not a PyTorch ONNX export report (no '# PyTorch ONNX Conversion' title)", lineno)
        self.section = "steps"
        self.report["title"], self.report["report_kind"] = line[2:], _TITLES[line]

    def _open_fence(self, lineno: int) -> None:
        self.fence = self.section
        if self.section == "steps":
            self.report["lineno_steps"] = lineno
        elif self.section == "onnx_model" and self.model is None:
            self.model = sec.ModelScanner()

    def _fenced(self, lineno: int, line: str):
        fence = self.fence
        if line.rstrip() == "```":
            self.fence = None
            if fence == "steps" and not self.steps_done:
                self.steps_done, self.section = True, "after_steps"
                self.report["outcome"] = sec.outcome(self.status)
            elif fence == "errors" and not self.errors_done:
                yield from self._error_row(self.err.close())
                self.errors_done = True
            elif fence == "exported_program":
                self.program_done = True
            elif fence == "onnx_model" and self.model is not None:
                self.model_done = True
        elif fence == "errors" and not self.errors_done:
            yield from self._error_row(self.err.feed(lineno, line))
        elif fence == "steps" and line.strip():
            yield from self._step(lineno, line)

    def _step(self, lineno: int, line: str):
        marker, _, text = line.partition(" ")
        status = sec.STATUS.get(marker, "unknown")
        if status == "unknown" and text.strip() not in sec.STEP_SLUGS:  # a new marker may precede a known step
            text = line
        text = text.strip()
        step = sec.slug(text)
        self.status[step] = status
        yield from self.add("onnx_steps", (step, text, status, lineno))

    def _error_row(self, row: tuple | None):
        if row is not None:
            self.block_errors += row[0] == "errors"
            yield from self.add("onnx_errors", row)

    def _heading(self, lineno: int, title: str):
        if self.list_kind == "fx_target":
            self.report["fx_ops_distinct"] = self.fx_targets  # the target list ends at the next heading
        self.dispatch_done |= self.list_kind == "dispatch"
        self.list_kind = None
        if self.section == "verification":
            yield from self.add("onnx_verification", self._verified(self.verif.close()))
        self.section = _SECTIONS.get(title, "other")
        col = f"lineno_{self.section}"
        if col in self.report and self.report[col] is None:
            self.report[col] = lineno

    def _text(self, lineno: int, line: str):
        section = self.section
        if section == "verification":
            yield from self.add("onnx_verification", self._verified(self.verif.feed(lineno, line)))
        elif section == "analysis":
            yield from self._analysis(lineno, line)
        elif section == "onnx_conversion":
            if line.startswith("All operators in the model have registered"):
                self.report["dispatch_failures"] = 0
            elif line.startswith("Errors grouped by operator"):
                self.list_kind = "dispatch"
            elif self.list_kind == "dispatch" and (m := _DISPATCH_ITEM.match(line)):
                self.dispatch += 1
                row = ("onnx_conversion", m.group(1), None, m.group(2).strip()[:1000], None, False, lineno)
                yield from self._error_row(row)
        elif section == "decomposition":
            for i, prefix in enumerate(_DECOMP):
                if line.startswith(prefix):
                    ops = [a or b for a, b in _QUOTED.findall(line[len(prefix) :])]
                    self.report["decomp_only_after" if i else "decomp_only_before"] = ops

    def _number(self, lineno: int, text: str, bounds: Bounds, what: str) -> int | None:
        """A count the report prints, None (and an error) when no report can hold it."""
        n = int(text) if len(text) <= 30 else None  # int() refuses past 4,300 digits
        if (why := f"has {len(text)} digits" if n is None else bounds.problem(n)) is not None:
            self.error(lineno, f"{what} {why}; stored as null")
            return None
        return n

    def _analysis(self, lineno: int, line: str):
        if m := _MODEL_INFO.match(line):
            self.report["parameters"] = self._number(lineno, m.group(1), ELEMENTS, "the model's parameters")
            self.report["buffers"] = self._number(lineno, m.group(2), ELEMENTS, "the model's buffers")
        elif m := _FX_NODES.match(line):
            self.report["fx_nodes"] = self._number(lineno, m.group(1), COUNT, "the FX graph's nodes")
            self.list_kind = "fx_node_op"
        elif line.startswith("Of the call_function nodes"):
            self.list_kind = "fx_target"
        elif line.startswith(("Inputs:", "Outputs:")):
            self.list_kind = None
        elif self.list_kind and (m := _COUNT_ITEM.match(line)):
            self.fx_targets += self.list_kind == "fx_target"
            op = _ADDRESS.sub(">", m.group(1))
            row = (self.list_kind, op, self._number(lineno, m.group(2), COUNT, f"the count of {op[:80]}"), lineno)
            yield from self.add("onnx_op_counts", row)

    def _verified(self, row: tuple | None) -> tuple | None:
        if row is None:
            return None
        name, diffs, lineno = row[0], list(row[1:3]), row[-1]
        for i, what in enumerate(("max_abs_diff", "max_rel_diff")):  # NaN, inf: an output that did not compare
            if diffs[i] is not None and math.isfinite(diffs[i]) and (why := DIFFERENCE.problem(diffs[i])) is not None:
                self.error(lineno, f"verification of {name[:80]}: {what} {why}; stored as null and not counted")
                diffs[i] = None
        self.report["verified_outputs"] = (self.report["verified_outputs"] or 0) + 1
        self.max_abs, self.max_rel = sec.larger(self.max_abs, diffs[0]), sec.larger(self.max_rel, diffs[1])
        return (name, *diffs, *row[3:])

    def _finish(self, lineno: int):
        report = self.report
        if self.section == "verification":  # the entry checks itself for a cut
            yield from self.add("onnx_verification", self._verified(self.verif.close()))
        if self.fence is not None:
            self.truncated = True
            self.error(lineno, f"report ends inside the {self.fence.replace('_', ' ')} code block")
        if (m := self.model) is not None:
            self._model_fields(m)
        missing = self._missing()
        if missing:
            self.truncated = True
            self.error(lineno, "report ends before the " + ", ".join(missing))
        if self.dispatch_done or (self.dispatch and not self.truncated):
            report["dispatch_failures"] = self.dispatch
        if "verification results" in missing:
            report["verified_outputs"] = None
        yield from self.add("onnx_reports", tuple(report.values()))

    def _model_fields(self, m: sec.ModelScanner) -> None:
        report = self.report
        report.update(ir_version=m.ir_version, opset=m.opsets.get(""), producer_name=m.producer_name,
                      producer_version=m.producer_version, graph_name=m.graph_name)  # fmt: skip
        report["opset_imports"] = [f"{d or 'ai.onnx'}={v}" for d, v in m.opsets.items()] or None
        if m.producer_name in ("torch", "pytorch"):
            report["torch_version"] = m.producer_version
        if m.io_done:
            report.update(graph_inputs=m.io["inputs"], graph_outputs=m.io["outputs"],
                          initializers=m.io["initializers"])  # fmt: skip
        if m.graph_closed:
            report["graph_nodes"] = m.nodes
        if self.model_done:
            report["functions"] = m.functions
        for ln, msg in m.errors:
            self.error(ln, msg)

    def _missing(self) -> list[str]:
        """Sections the step statuses promise that the file does not complete."""
        r, status = self.report, self.status
        need = [("steps", self.steps_done), ("error messages", self.errors_done)]
        if r["report_kind"] == "report":
            need.append(("exported program", self.program_done))
            if status.get("translate") == "ok":
                need.append(("ONNX model", self.model_done and self.model is not None and self.model.graph_closed))
            need.append(("ONNX conversion information", r["dispatch_failures"] == 0 or self.dispatch > 0))
            if status.get("decompose") != "failed":
                need.append(("decomposition comparison", r["decomp_only_after"] is not None))
            if status.get("onnx_runtime") == "ok":
                need.append(("verification results", (r["verified_outputs"] or 0) >= (r["graph_outputs"] or 1)))
        return [name for name, done in need if not done]

    def summary(self) -> DumpSummary:
        r = self.report
        metrics: dict[str, float] = {f"onnx.step.{s}": int(v == "ok") for s, v in self.status.items()
                                     if v in ("ok", "failed")}  # fmt: skip
        for key in ("parameters", "fx_nodes", "graph_nodes", "opset", "ir_version", "functions",
                    "initializers", "fx_ops_distinct"):  # fmt: skip
            if r[key] is not None:
                metrics[f"onnx.{key}"] = r[key]
        if r["verified_outputs"]:
            for name, value in (("max_abs_diff", self.max_abs), ("max_rel_diff", self.max_rel)):
                if math.isfinite(value):  # NaN: an output did not compare (onnx.step.accuracy says so)
                    metrics[f"onnx.{name}"] = value
        dispatch = 0 if r["report_kind"] == "error_report" else r["dispatch_failures"]
        if self.errors_done and dispatch is not None:
            metrics["onnx.errors"] = self.block_errors + dispatch
        return DumpSummary(kind=DumpKind.ONNX_REPORT, stage="export", program=self.program or self._frame_name(),
                           metrics=metrics, errors=self.errors, truncated=self.truncated)  # fmt: skip

    def _frame_name(self) -> str | None:
        """A report without an exported program (every capture strategy failed) names its model by the
        first frame of the model's own code its tracebacks show: ``forward at model.py:9`` (the file's
        name, as a TORCH_TRACE program's), None when they show none."""
        if self.report["report_kind"] != "error_report" or self.err.model_frame is None:
            return None
        path, line, function = self.err.model_frame
        file = _DIRECTORIES.sub("", path)
        return f"{function[:_MAX_PART]} at {file[:_MAX_PART]}:{line}"

