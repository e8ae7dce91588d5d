"""Line scanners for the hard sections of a PyTorch ONNX export report.

Used only by ``transforms.parsers.onnx_report``. Each scanner is fed one line at a time
(newline already stripped) and hands back finished rows as tuples in the column
order of that module's schemas; a row is handed back only once every field in it
is final, so a cut report never yields a row that differs from the whole report's.

- ``ModelScanner``: the ONNX model as ``str(onnx_ir.Model)`` prints it: a ``<...>``
  header (ir_version, opset_imports, producer), ``graph(...) {`` with numbered nodes,
  the closing ``}``, then one ``def domain::name(...) {...}`` per local function.
- ``ErrorScanner``: the ``pytb`` block of "Error messages": ``# ⚠️ ...`` headers,
  Python tracebacks (chained ones too) and their exception lines.
- ``VerificationScanner``: the `` `name`: `max_abs_diff=...` `` entries whose
  histograms run over several lines.
"""

from __future__ import annotations

import re

from transforms.figure_bounds import COUNT

ARROW = "⬅️ "
_ANSI = re.compile(r"\x1B[@-_][0-?]*[ -/]*[@-~]")
_FIRST_HEADER = re.compile(r"^    ( *)(\d+) \|  ")
_OPSET = re.compile(r"'([^']*)': (\d+)")
_EXC = re.compile(r"^([A-Za-z_][\w.]*)(?:: ?(.*))?$")
_STRATEGY = re.compile(r"Errors from strategy '([^']*)'")
_VERIF = re.compile(r"^`([^`]*)`: `max_abs_diff=([^`]*)`, `max_rel_diff=([^`]*)`")
_HIST = re.compile(r"(abs|rel)_diff_hist=.*?hist=tensor\(\[([^\]]*)\].*?bin_edges=tensor\(\[([^\]]*)\]", re.S)
_NEXT_ERROR = ("# ⚠️", "Traceback (", "The above exception", "During handling of the above")
_FRAME = re.compile(r'^\s+File "([^"]+)", line (\d{1,9}), in (\S+)')
# Frames of the exporter and its libraries, and of Python itself: a model's own code is in none of them.
_LIBRARY_FRAME = re.compile(r"(?:^|[/\\])(?:torch|functorch|torchgen|onnxscript|onnx_ir|onnxruntime)[/\\]"
                            r"|(?:site|dist)-packages[/\\]onnx[/\\]"
                            r"|[/\\][Ll]ib[/\\]python\d+(?:\.\d+)?[/\\][^/\\]+$|^<")
_MAX_ENTRY_CHARS = 1 << 16  # a verification entry is ~1 KB; never buffer a runaway one

# Exact step texts of torch 2.5 to 2.13 (``_reporting._format_export_status``).
STEP_SLUGS = {
    "Obtain model graph with `torch.export.export`": "torch_export_strict",
    "Obtain model graph with `torch.export.export(..., strict=True)`": "torch_export_strict",
    "Obtain model graph with `torch.export.export(..., strict=False)`": "torch_export_nonstrict",
    "Obtain model graph with `torch.jit.trace`": "jit_trace",
    "Obtain model graph with `torch.export.draft_export`": "draft_export",
    "Decompose operators for ONNX compatibility": "decompose",
    "Translate the graph into ONNX": "translate",
    "Run `onnx.checker` on the ONNX model": "onnx_checker",
    "Execute the model with ONNX Runtime": "onnx_runtime",
    "Validate model output accuracy": "accuracy",
}
STATUS = {"✅": "ok", "❌": "failed", "⚪": "skipped"}
_CAPTURE = ("torch_export_strict", "torch_export_nonstrict", "draft_export", "jit_trace")
# (step, outcome) in the order torch's ``construct_report_file_name`` tests them.
_FAILURE_OUTCOMES = (
    ("decompose", "decomp"),
    ("translate", "conversion"),
    ("onnx_checker", "checker"),
    ("onnx_runtime", "runtime"),
    ("accuracy", "accuracy"),
)


def slug(text: str) -> str:
    """A short stable name: the known one, else one made from the text."""
    known = STEP_SLUGS.get(text)
    if known:
        return known
    made = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")
    return made[:48] or "step"


def outcome(status: dict[str, str]) -> str:
    """The file-name postfix torch gives a report with these step statuses."""
    if not any(status.get(s) == "ok" for s in _CAPTURE):
        return "pt_export"
    for step, name in _FAILURE_OUTCOMES:
        if status.get(step) == "failed":
            return name
    if any(status.get(s) == "failed" for s in _CAPTURE):
        return "strategies"
    return "success"


def _clean(text: str) -> str:
    return _ANSI.sub("", text).strip()


class ModelScanner:
    """Counts main-graph nodes of the printed ONNX model; nested graphs are skipped.

    onnx_ir prints node ``i`` of a graph as ``f"{i:>{w}} |  # name"`` indented by 4
    inside its graph, and indents everything inside a node (an If's branches) by
    ``w + 4`` more. So main-graph headers, and only they, have their ``|`` in the
    column of node 0's ``|``, with nothing but spaces and the index before it.
    """

    def __init__(self) -> None:
        self.state = "header"  # -> signature -> body -> functions
        self.ir_version: int | None = None
        self.opsets: dict[str, int] = {}
        self.producer_name: str | None = None
        self.producer_version: str | None = None
        self.graph_name: str | None = None
        self.io = {"inputs": 0, "outputs": 0, "initializers": 0}
        self.io_done = False
        self.block: str | None = None
        self.nodes = 0
        self.bar = 0
        self.pending_op = False
        self.ops: dict[str, list[int]] = {}  # op -> [count, first lineno]
        self.functions = 0
        self.errors: list[tuple[int, str]] = []

    @property
    def graph_closed(self) -> bool:
        return self.state == "functions"

    def feed(self, lineno: int, line: str) -> list[tuple] | None:
        """Returns the op-count rows when the main graph closes, else None."""
        state = self.state
        if state == "body":
            return self._body(lineno, line)
        if state == "functions":
            if line.startswith("def "):
                self.functions += 1
        elif state == "signature":
            self._signature(line)
        elif line == "graph(":
            self.state = "signature"
        elif line.startswith("    ir_version="):
            text = line[15:].rstrip(",").strip()
            self.ir_version = _int(text)
            if self.ir_version is None and text.isdigit():
                self.errors.append((lineno, f"ir_version {text[:20]} is no count a 32-bit column holds; stored as null"))
        elif line.startswith("    opset_imports="):
            self.opsets = {}
            for domain, version in _OPSET.findall(line):
                if (n := _int(version)) is None:
                    self.errors.append((lineno, f"opset {version[:20]} of domain {domain[:80]!r} is no count a 32-bit column holds; left out"))
                else:
                    self.opsets[domain] = n
        elif line.startswith("    producer_name="):
            self.producer_name = line[18:].rstrip(",").strip("'\"")
        elif line.startswith("    producer_version="):
            self.producer_version = line[21:].rstrip(",").strip("'\"")
        return None

    def _signature(self, line: str) -> None:
        if line == ") {":
            self.state, self.io_done = "body", True
        elif line.startswith("    name="):
            self.graph_name = line[9:].rstrip(",")
        elif line in ("    inputs=(", "    outputs=(", "    initializers=("):
            self.block = line[4:-2]
        elif line.startswith("    )"):
            self.block = None
        elif self.block and line.startswith('        %"'):
            self.io[self.block] += 1

    def _body(self, lineno: int, line: str) -> list[tuple] | None:
        if line == "}":
            self.state = "functions"
            return [("onnx_main_graph", op, c, ln) for op, (c, ln) in self.ops.items()]
        bar = self.bar
        if not bar:
            m = _FIRST_HEADER.match(line)
            if m is None:
                return None
            bar = self.bar = m.end(2) + 1
        if line[bar : bar + 4] == "|  #" and line[bar - 1] == " ":
            index = line[: bar - 1].lstrip(" ")
            if index.isdigit():
                if _int(index) != self.nodes and len(self.errors) < 10:
                    self.errors.append((lineno, f"main graph node {index} where {self.nodes} was expected"))
                self.nodes += 1
                self.pending_op = True
                return None
        if self.pending_op:
            at = line.find(ARROW)
            if at >= 0:
                self.pending_op = False
                start = at + len(ARROW)
                end = line.find("(", start)
                op = line[start:end] if end > start else line[start : start + 200]
                op = op[2:] if op.startswith("::") else op
                entry = self.ops.get(op)
                if entry is None:
                    self.ops[op] = [1, lineno]
                else:
                    entry[0] += 1
        return None


class ErrorScanner:
    """One row per exception line in the ``pytb`` block of "Error messages".

    Row: (section, source, exception_type, message, frames, chained, lineno). The
    message is the exception line's text; when that is empty (a message that
    starts on the next line, as draft_export's), the first line with words after it.
    ``model_frame``: the first frame of the model's own code any traceback shows.
    """

    def __init__(self) -> None:
        self.source: str | None = None
        self.expecting = False
        self.tb_start = 0
        self.frames = 0
        self.chained = False
        self.pending: list | None = None  # a row waiting for its message line
        # (file, line, function) of the first traceback frame in no library: the model's own code, where the
        # exporter entered it (a model's forward); what names a model no exported program names.
        self.model_frame: tuple[str, int, str] | None = None

    def feed(self, lineno: int, line: str) -> tuple | None:
        if self.pending is not None:
            if line.startswith(_NEXT_ERROR):  # the next error began: this one keeps ""
                row, self.pending = self.pending, None
                self._col0(lineno, line)
                return tuple(row)
            words = _clean(line[:2000]).strip("#=-* ")
            if not words:
                return None
            row, self.pending = self.pending, None
            row[3] = words[:1000]
            return tuple(row)
        if not line or line[0] in " \t":
            if self.expecting and self.tb_start and line.startswith("  File "):
                self.frames += 1
            if self.model_frame is None and (m := _FRAME.match(line)) and not _LIBRARY_FRAME.search(m.group(1)):
                self.model_frame = (m.group(1), int(m.group(2)), m.group(3))
            return None
        return self._col0(lineno, line)

    def _col0(self, lineno: int, line: str) -> tuple | None:
        if line.startswith("# ⚠️"):
            m = _STRATEGY.search(line)
            self.source = m.group(1) if m else slug(line[4:].strip(" -"))
            self.expecting, self.tb_start, self.frames, self.chained = True, 0, 0, False
        elif line.startswith("Traceback (most recent call last)"):
            if not self.expecting and not self.chained:
                self.source = None  # not under a header: decomposition/checker error
            self.expecting, self.tb_start, self.frames = True, lineno, 0
        elif line.startswith(_NEXT_ERROR[2:]):
            self.chained = True
        elif self.expecting and (m := _EXC.match(line)):
            self.expecting = False
            frames = self.frames if self.tb_start else None
            row = ["errors", self.source, m.group(1)[:200], _clean((m.group(2) or "")[:2000])[:1000], frames,
                   self.chained, lineno]  # fmt: skip
            self.chained = False
            if row[3] or m.group(2) is None:
                return tuple(row)
            self.pending = row
        return None

    def close(self) -> tuple | None:
        """The block ended: a row still waiting for its message goes out as it is."""
        row, self.pending = self.pending, None
        return tuple(row) if row else None


class VerificationScanner:
    """Rows (name, max_abs_diff, max_rel_diff, abs_hist, rel_hist, bin_edges, lineno).

    An entry is `` `name`: `max_abs_diff=..`, `max_rel_diff=..`, `abs_diff_hist=..`, ... ``
    over several lines; it is complete when its backticks pair up and it ends with one
    (histogram reprs hold no backticks), which a cut inside it never leaves.
    """

    def __init__(self) -> None:
        self.entry: list | None = None  # [name, abs, rel, lineno, parts, size, backticks, ends_with_tick]

    def feed(self, lineno: int, line: str) -> tuple | None:
        m = _VERIF.match(line) if line.startswith("`") else None
        if m:
            done = self.close()
            self.entry = [m.group(1), _float(m.group(2)), _float(m.group(3)), lineno, [], 0, 0, False]
        elif self.entry is None:
            return None
        else:
            done = None
        entry = self.entry
        if entry[5] < _MAX_ENTRY_CHARS:
            entry[4].append(line)
        entry[5] += len(line)
        entry[6] += line.count("`")
        entry[7] = line.rstrip().endswith("`") if line.strip() else entry[7]
        return done

    def close(self) -> tuple | None:
        """The finished entry's row, or None when there is none or it is cut short."""
        entry, self.entry = self.entry, None
        if entry is None or entry[6] % 2 or not entry[7]:
            return None
        name, abs_diff, rel_diff, lineno, parts, size = entry[:6]
        hists = {}
        if size <= _MAX_ENTRY_CHARS:  # a runaway entry keeps its diffs, not its histograms
            hists = {kind: (_floats(h), _floats(e)) for kind, h, e in _HIST.findall("\n".join(parts))}
        abs_h, edges = hists.get("abs", (None, None))
        return (name, abs_diff, rel_diff, abs_h, hists.get("rel", (None,))[0], edges, lineno)


def larger(a: float, b: float | None) -> float:
    """Larger of two diffs; a NaN diff wins, since it means the outputs did not compare."""
    if b is None or a != a:
        return a
    return b if (b != b or b > a) else a


def _int(text: str) -> int | None:
    """A count or version as printed; None when it is none (or past what its 32-bit column holds)."""
    text = text.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 10):
        return None
    return n if COUNT.problem(n := int(text)) is None else None


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _floats(text: str) -> list[float] | None:
    try:
        return [float(x) for x in text.replace("\n", " ").split(",") if x.strip()]
    except ValueError:
        return None
