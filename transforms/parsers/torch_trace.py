"""torch.compile structured traces (``TORCH_TRACE=<dir>``: ``dedicated_log_torch_trace_[rank_<n>_]*.log``).

Input: the lines of one log as torch 2.13 writes it (``torch/_logging/_internal.py``): one record
per envelope line, ``<glog prefix>] <JSON object>``, e.g.
``V1127 10:40:26.672000 16479 torch/_dynamo/convert_frame.py:303] {"dynamo_start": {...},
"frame_id": 0, "frame_compile_id": 0, "attempt": 0}``. The first key names the record; the
compile it belongs to is in ``frame_id``/``frame_compile_id`` (``compiled_autograd_id``,
``attempt``), ``rank`` when torch.distributed is initialised. A record with a payload carries
``has_payload`` (the MD5 of the payload) and is followed by the payload, one tab-indented line
per payload line. Read here: ``compilation_metrics`` (one per frame compile, at its end),
``bwd_compilation_metrics`` (a backward graph compiled lazily, at the first backward call),
``*_runtime`` variants (rows only), ``dynamo_start`` (a compile begins), ``inductor_output_code``
(the generated module, fed line by line to ``inductor_code``'s parser), and the
``artifact`` ``dynamo_graph_break_reason`` (one per graph break), and the guards of a compile
(``torch_trace_guards``): each entry of ``dynamo_guards`` (a JSON list, one entry a line), each leaf
of ``dynamo_cpp_guards_str`` (the guard manager's tree, with the source of the manager above it and
the user line torch prints after it), each ``symbolic_shape_specialization``, ``guard_added`` and
``guard_added_fast`` (their user frame from the stack, file names from the ``str`` records), texts
normalised by ``transforms.volatile`` (ids, addresses). Every record but ``chromium_event``, ``str``
and ``describe_*`` is a row of ``torch_trace_artifacts``: kind, compile, bytes and lines of its
payload, the lines where to read it, and for the kinds a compile view shows (``KEPT_TEXTS``) its text,
normalised: the payload's first ``ARTIFACT_TEXT_BYTES`` (cut at a line's end), a metrics record's
JSON, dynamo_start's stack as a traceback; ``LOG_TEXT_BYTES`` of a log, in log order. Every record is counted in ``torch_trace_records``; the
payloads not read above are only hashed. Compile ids are written as torch prints them
(``compile_id``: ``0/0``) and as tlparse does (``tlparse_id``: ``[0/0_1]`` for attempt 1).

Programs: one log holds many compiled functions. A program is ``<co_name> at
<co_filename>:<co_firstlineno>``. A resume function Dynamo makes at a graph break is named
``torch_dynamo_resume_in_<parent co_name>_at_<line of the break>`` (nested resumes repeat the
prefix), in the parent's file; it belongs to the program of the parent: the function of that
name and file compiled earlier in the log whose first line is the greatest one not after the
break line (when the log has no such function, the resume function is a program of its own).
Recompiles share the program of their frame; a lazily compiled backward, that of its forward.
``DumpSummary.metrics`` holds the log's totals (figures in docs/metrics.md), ``programs`` each
program's, ``program`` names the log's program when it has exactly one; ``stage`` is a rank's
log's rank, ``rank_<n>``: the rank its name holds (``stage_from_name``), else the one its records
carry (a log opened before torch.distributed started has no rank in its name), else ``trace``.
Never the random part of the name: it names nothing, and changes every run.

Guarantees: memory is flat in the log's size: one record, one payload line at a time (other
payloads are hashed in blocks of lines), rows of at most one batch, a few hundred bytes
per compile and per program seen, and at most ``LOG_TEXT_BYTES`` of kept texts. A compile's figures count once its metrics record arrives; a log that
ends inside a compile (a record names it, its ``compilation_metrics`` or, after a lazily
compiled output code, its ``bwd_compilation_metrics`` never comes), inside a payload (the MD5
does not match) or mid-line is ``truncated``, with an error naming the last line, and its open
compiles count nowhere. Damage inside the log (a record that is not JSON, payload lines
without a record, a payload whose MD5 does not match, an output code the inductor parser
finds cut) is an error naming the line, and costs only the figures read from it
(``DumpSummary.lost``): a payload whose MD5 does not match costs nothing (the figures are the
records') but an output code's ``kernel.*``; a garbled record what its kind feeds (a compile's
metrics, a record of no kind known: every figure); the other figures stand. A record costs only itself: one nested deeper than
``_MAX_DEPTH`` is refused before ``json.loads`` (torch's nest 4 deep), and any failure while one
record is read (``records.OneRecord``) skips it and its payload with an error naming its line.
A metrics record holding a figure no compile can have (``_FIELD_BOUNDS``: a negative, NaN or
infinite time, one above a week, a count past 32 bits, a text where a number goes) is an error
naming its line; its row keeps that field null and the compile counts nowhere, as one the log
ends inside. Raises ``ParseError`` only when the log holds no readable record.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Iterable, Iterator, NamedTuple

import polars as pl
import pyarrow as pa

from transforms.parsers import inductor_code
from transforms.volatile import normalise, normalise_text
from transforms.figure_bounds import COUNT, SECONDS
from transforms.records import (BATCH_ROWS, DumpKind, DumpSummary, OneRecord, ParseError, ParserOutput, RowBuffer,
                               TableBatch, line_error)

# 2: the staged summary and the warehouse hold each program's figures (DumpSummary.programs: one set of
# metric rows per program; a content staged or loaded by version 1 holds only the totals and is parsed
# again), and torch_trace_graph_breaks.end_lineno (the payload's last line: a break's evidence).
# 3: a figure no compile can have is an error and its compile counts nowhere (was counted: 1e308 s, NaN,
# negative guards); a record nested too deep or that fails is skipped alone (was: the log failed).
# 4: a rank's log by its rank: from a name without a random part (..._rank_0.log) or, when the name has
# none, from its records (was: stage trace, and ranks told apart by file order).
# 5: damage costs the figures read from it (DumpSummary.lost): a payload whose MD5 does not match costs
# nothing but an output code's kernel.* (its record carries the rest), a garbled record what its kind feeds
# (was: every figure of the log in doubt, the program a failure)
# 6: torch_trace_guards and torch_trace_artifacts (every guard and artifact of each compile), tlparse_id (the
# compile id as tlparse writes it: [0/0_1] a restart), dynamo_time_before_restart_s and backward_compile_time_s
# 7: torch_trace_collectives (each compile's collective schedule, the inductor_collective_schedule artifact: ranks
# are compared on it)
# 8: the text of the artifacts a compile view shows (torch_trace_artifacts.text: graphs, output code, guards, metrics,
# dynamo_start's stack), the first ARTIFACT_TEXT_BYTES of each and LOG_TEXT_BYTES of a log, normalised
PARSER_VERSION = 8

_PREFIX = re.compile(r"(?:\[rank\d+\]:)?[VIWEC]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^\]\n]*:\d+\] (?=\{)")
# torch names a log dedicated_log_torch_trace_[rank_<n>_]<random>.log (tempfile.mkstemp: 8 random characters
# after the prefix); copies shipped without the random part (tlparse's inputs: ..._rank_0.log) keep the rank.
_FILE_NAME = re.compile(r"^dedicated_log_torch_trace_(?:rank_(\d+)(?:_[\w.-]*)?|[\w.-]*)\.log$")
_RESUME = re.compile(r"^torch_dynamo_resume_in_(.+)_at_(\d+)$")
_AOT_ID = re.compile(r"^# AOT ID: \['([^']*)'\]")
_FILE_LINE = re.compile(r'^\s*File "(.*)", line (\d+), in (.*)$')
_GB_HEAD = "Graph break in user code at "
_GB_ID = re.compile(r"/gb/(gb\d+)\.html")
_EXC_LINE = re.compile(r"^[\w.]+: (.+)$")
_REL_LINE = re.compile(r"^line (\d+): (.*)$", re.S)
_MAX_ERRORS, _TEXT, _SMALL_BATCH, _HASH_BLOCK = 50, 1000, 4096, 1 << 20
# Deepest nesting of a record's JSON read (torch's records nest 4 deep: dynamo_start's stack frames).
# Refused before json.loads: the C decoder would take ~1,000 levels and raise RecursionError past
# them, and what it took would reach code that recurses again (str() of a reason).
_MAX_DEPTH = 32
# What a record that cannot be read costs (DumpSummary.lost), by the name its line starts with:
# the figures of that kind of record, None for every figure (a compile's metrics, a record of no
# kind we know: its compile may count nowhere). Records of other known kinds feed no figure.
_RECORD_NAME = re.compile(r'\{\s*"(\w+)"')
_FEEDS = {"inductor_output_code": ("kernel.*",), "compilation_metrics": None, "bwd_compilation_metrics": None}
_GRAPH_BREAK_ARTIFACT = '"dynamo_graph_break_reason"'
# Inductor's collective schedule of a compile (torch/_inductor/debug.py: the collective ops of the
# scheduled graph, in the order the output code issues them): a JSON list, one op a payload line.
_COLLECTIVE_SCHEDULE = "inductor_collective_schedule"
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\[\s\S])*+(?:"|\\?\Z)')  # linear: an unclosed one runs to the end
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")  # bytes.translate drops them, in C
_LONG_ROWS = ("torch_trace_compiles", "torch_trace_graph_breaks", "torch_trace_kernels", "torch_trace_extern_calls")
# Guards and artifacts: a row per tree line or record, tens per compile; in batches of 1,024 the peak RSS of a
# 200 MB log is +9 MiB, not +24 MiB as in 4,096 (the native high-water of building the frames), and the batches
# cost little CPU (256: +0.1 s, a frame's fixed cost each; docs/speed.md).
_FEW_ROWS = {"torch_trace_guards": 1024, "torch_trace_artifacts": 1024, "torch_trace_collectives": 1024}
# An artifacts batch also goes out once its rows hold this many characters of kept texts (a log's first batches hold
# its LOG_TEXT_BYTES), and Arrow builds our columns in the system allocator: Arrow's own (mimalloc) kept the pages
# of each batch of texts (1,024 rows held 1.5 MB of them), 133 MiB peak on the 200 MB log against 112 so (docs/speed.md).
_BATCH_TEXT = 256 * 1024
_MEMORY_POOL = pa.system_memory_pool()
# Records that are no artifact of a compile (tlparse folds them into other pages): no torch_trace_artifacts row.
_NOT_ARTIFACTS = frozenset({"chromium_event", "str", "describe_tensor", "describe_storage", "describe_source"})
_SHAPE_GUARDS = {"symbolic_shape_specialization": "shape_specialization", "guard_added": "guard_added",
                 "guard_added_fast": "guard_added_fast"}
# A node of dynamo_cpp_guards_str's tree: "| | +- <NAME>: <text>"; a guard is a leaf whose name is in capitals
# (TENSOR_MATCH), a GuardManager (and its Dict/Root kinds, KeyValueManager ...) holds guards of its source.
_CPP_NODE = re.compile(r"((?:\| )*)\+- (\w+):? ?(.*)")  # "." stops at the line's newline
_GUARD_TYPE = re.compile(r"^[A-Z][A-Z0-9_]*$")
# A leaf ends "<code>  # <user code>  # <file>:<line> in <function>" (the user code when torch has it), read
# from the last "  # " by string search: a regex searching a hostile line for it would backtrack quadratically.
_CPP_WHERE = re.compile(r"(\S+):(\d+) in (\S+)(?: \(HINT: [^)]*\))?")
_CPP_LINE = 1 << 16  # of a tree's line read (torch's longest, GLOBAL_STATE's, is ~600 characters)
_MAX_STRINGS = 100_000  # interned file names (str records) kept: torch interns one per source file
_MAX_IDS = 100_000  # id columns remembered (one per compile attempt), then forgotten and made again
_METRICS = {"compilation_metrics": "forward", "bwd_compilation_metrics": "backward",
            "compilation_metrics_runtime": "forward_runtime", "bwd_compilation_metrics_runtime": "backward_runtime"}
# The artifacts whose text is kept (torch_trace_artifacts.text): what a compile view shows one click away, as
# tlparse does (the graphs, the output code, the guards, the metrics, the stack that led to the compile, a graph
# break's message). Cache keys, configs and bytecode dumps (fx_graph_cache_miss: 74 KB each) are not.
KEPT_TEXTS = frozenset({
    "dynamo_start", "dynamo_output_graph", "aot_joint_graph", "aot_forward_graph", "aot_backward_graph",
    "aot_inference_graph", "inductor_post_grad_graph", "inductor_output_code", "dynamo_cpp_guards_str", "dynamo_guards",
    "compilation_metrics", "bwd_compilation_metrics", "dynamo_graph_break_reason", "dynamo_error"})  # fmt: skip
# Bytes of text kept: of one artifact (its first lines, cut at a line's end), and of one log (in log order; then
# none). A log's kept texts stay in memory until their batch is handed out, so the log's bound is also the parser's.
ARTIFACT_TEXT_BYTES = 64 * 1024
LOG_TEXT_BYTES = 4 * 1024 * 1024
# Strings of a metrics record left out of its text: torch's whole configs, ~60 KB of each record, the same every compile.
_CONFIG_STRINGS = frozenset({"dynamo_config", "inductor_config", "compiler_config", "functorch_config"})
KNOWN_RECORDS = frozenset({
    *_METRICS, "str", "dump_file", "dynamo_start", "dynamo_output_graph", "dynamo_guards", "dynamo_cpp_guards_str",
    "chromium_event", "artifact", "inductor_output_code", "inductor_post_grad_graph", "inductor_input_graph",
    "graph_dump", "aot_joint_graph", "aot_forward_graph", "aot_backward_graph", "aot_inference_graph",
    "optimize_ddp_split_graph", "optimize_ddp_split_child", "compiled_autograd_graph", "propagate_real_tensors",
    "propagate_real_tensors_provenance", "guard_added", "guard_added_fast", "create_symbol", "create_unbacked_symbol",
    "expression_created", "symbolic_shape_specialization", "guard_on_data_dependent_error", "describe_storage",
    "describe_tensor", "describe_source", "link", "export", "exported_program", "missing_fake_kernel",
    "mismatched_fake_kernel"})  # fmt: skip
BASE_METRICS = ("dynamo.compiles", "dynamo.compile_seconds", "dynamo.failures", "dynamo.graph_breaks",
                "dynamo.recompiles", "dynamo.guards", "inductor.compile_seconds", "inductor.cache_hits",
                "inductor.cache_misses")  # fmt: skip

_ID = {"compile_id": pl.String, "frame_id": pl.Int32, "frame_compile_id": pl.Int32, "attempt": pl.Int32,
       "tlparse_id": pl.String}
PHASE = pl.Enum(["forward", "backward", "forward_runtime", "backward_runtime"])
COMPILES = pl.Schema({
    **_ID, "phase": PHASE, "program": pl.String, "co_name": pl.String, "co_filename": pl.String,
    "co_firstlineno": pl.Int32, "entire_frame_compile_time_s": pl.Float64, "backend_compile_time_s": pl.Float64,
    "inductor_compile_time_s": pl.Float64, "code_gen_time_s": pl.Float64, "dynamo_time_before_restart_s": pl.Float64,
    "backward_compile_time_s": pl.Float64, "guard_count": pl.Int32,
    "shape_env_guard_count": pl.Int32, "graph_op_count": pl.Int32, "graph_node_count": pl.Int32,
    "graph_input_count": pl.Int32, "graph_breaks": pl.Int32, "output_codes": pl.Int32, "fail_type": pl.String,
    "fail_reason": pl.String, "fail_user_frame_filename": pl.String, "fail_user_frame_lineno": pl.Int32,
    "restart_reasons": pl.List(pl.String), "recompile_reason": pl.String, "cache_size": pl.Int32,
    "has_guarded_code": pl.Boolean, "fx_cache_hits": pl.Int32, "fx_cache_misses": pl.Int32,
    "aotautograd_cache_hits": pl.Int32, "aotautograd_cache_misses": pl.Int32, "rank": pl.Int32, "lineno": pl.Int32,
})  # fmt: skip
_INT_FIELDS = ("co_firstlineno",)
_FLOAT_FIELDS = ("entire_frame_compile_time_s", "backend_compile_time_s", "inductor_compile_time_s", "code_gen_time_s",
                 "dynamo_time_before_restart_s", "backward_compile_time_s")
# Seconds torch writes in microseconds only (read as seconds, like the others).
_US_FIELDS = {"backward_compile_time_s": "backward_cumulative_compile_time_us"}
_COUNT_FIELDS = ("guard_count", "shape_env_guard_count", "graph_op_count", "graph_node_count", "graph_input_count")
_CACHE_FIELDS = tuple(f"{c}_{w}_cache_{k}_count" for c in ("inductor_fx", "aotautograd") for k in ("hit", "miss")
                      for w in ("local", "remote"))
# The figures of a metrics record, checked before they are read (figure_bounds.FIGURE_BOUNDS: one place for ranges).
_FIELD_BOUNDS = {**dict.fromkeys(_FLOAT_FIELDS, SECONDS), **dict.fromkeys(
    (*_INT_FIELDS, *_COUNT_FIELDS, *_CACHE_FIELDS, "cache_size", "fail_user_frame_lineno"), COUNT)}
GRAPH_BREAKS = pl.Schema({
    **_ID, "program": pl.String, "kind": pl.Enum(["graph_break", "skip", "other"]), "reason": pl.String,
    "gb_id": pl.String, "explanation": pl.String, "user_filename": pl.String, "user_lineno": pl.Int32,
    "user_function": pl.String, "lineno": pl.Int32, "end_lineno": pl.Int32,
})  # fmt: skip
OUTPUT_CODE = pl.Schema({
    **_ID, "phase": PHASE, "graph": pl.String, "kernels": pl.Int32, "extern_calls": pl.Int32,
    "fallback_calls": pl.Int32, "complete": pl.Boolean, "lineno": pl.Int32, "end_lineno": pl.Int32,
})  # fmt: skip
_CODE_COLS = {"compile_id": pl.String, "output_code_lineno": pl.Int32}
KERNELS = pl.Schema({**_CODE_COLS, **inductor_code.TABLES["inductor_kernels"]})
EXTERN_CALLS = pl.Schema({**_CODE_COLS, **inductor_code.TABLES["inductor_extern_calls"]})
GUARD_SOURCE = pl.Enum(["dynamo_guards", "cpp_guard", "shape_specialization", "guard_added", "guard_added_fast"])
GUARDS = pl.Schema({
    **_ID, "source": GUARD_SOURCE, "guard_type": pl.String, "guard": pl.String, "guarded": pl.String,
    "reason": pl.String, "user_code": pl.String, "user_filename": pl.String, "user_lineno": pl.Int32,
    "user_function": pl.String, "lineno": pl.Int32,
})  # fmt: skip
ARTIFACTS = pl.Schema({
    **_ID, "record": pl.String, "kind": pl.String, "lineno": pl.Int32, "end_lineno": pl.Int32,
    "record_bytes": pl.Int64, "payload_bytes": pl.Int64, "payload_lines": pl.Int32, "complete": pl.Boolean,
    "text": pl.String, "text_lines": pl.Int32, "text_cut": pl.Boolean,
})  # fmt: skip
COLLECTIVES = pl.Schema({**_ID, "position": pl.Int32, "op": pl.String, "lineno": pl.Int32})
# Positions in an artifact row (ARTIFACTS' columns) filled once its payload has ended.
_END_LINENO, _PAYLOAD_BYTES, _TEXT_AT = 8, 10, 13
RECORDS = pl.Schema({"record": pl.String, "artifact": pl.String, "known": pl.Boolean, "records": pl.Int64,
                     "payload_lines": pl.Int64, "first_lineno": pl.Int32})  # fmt: skip
TABLES = {"torch_trace_compiles": COMPILES, "torch_trace_graph_breaks": GRAPH_BREAKS,
          "torch_trace_output_code": OUTPUT_CODE, "torch_trace_kernels": KERNELS,
          "torch_trace_extern_calls": EXTERN_CALLS, "torch_trace_guards": GUARDS, "torch_trace_artifacts": ARTIFACTS,
          "torch_trace_collectives": COLLECTIVES, "torch_trace_records": RECORDS}  # fmt: skip

_ID_DOCS = {
    "compile_id": "Compile id as torch prints it: '<frame_id>/<frame_compile_id>', '!<compiled_autograd_id>/...' "
    "under compiled autograd; null for a record outside any compile.",
    "frame_id": "Dynamo's id of the frame (code object) compiled.",
    "frame_compile_id": "Compile of that frame, from 0; above 0 a recompile.",
    "attempt": "Attempt of the compile the record was written in (Dynamo restarts analysis after a graph break).",
    "tlparse_id": "The record's compile id as tlparse writes it: '[<frame_id>/<frame_compile_id>]', "
    "'[<frame_id>/<frame_compile_id>_<attempt>]' when the attempt is not 0 (a restart), '[!<compiled_autograd_id>/...]' "
    "under compiled autograd, '-' for an id the record lacks; null for a record outside any compile.",
}
_PHASE_DOC = ("forward (compilation_metrics: Dynamo's compile of a frame, Inductor included), backward "
              "(bwd_compilation_metrics: a backward graph compiled lazily at the first backward call), "
              "forward_runtime / backward_runtime (the *_runtime records: work done when the code runs).")
TABLE_DOCS: dict[str, dict[str, str]] = {
    "torch_trace_compiles": {
        "": "One row per compilation metrics record of a TORCH_TRACE log (torch._dynamo.utils.CompilationMetrics). A "
        "field holding a value no compile can have (a time negative, NaN or above a week, a count past 32 bits: "
        "docs/metrics.md) is null, and the record's error (dumps.error) names its line.",
        **_ID_DOCS, "phase": _PHASE_DOC,
        "program": "'<co_name> at <co_filename>:<co_firstlineno>' of the compiled function; resume functions and "
        "backward phases take the program of the frame they belong to (module docstring).",
        "co_name": "Name of the compiled code object (torch_dynamo_resume_in_<f>_at_<line> for a resume function).",
        "co_filename": "File of the code object.", "co_firstlineno": "First line of the code object.",
        "entire_frame_compile_time_s": "Seconds Dynamo spent on the frame, Inductor included.",
        "backend_compile_time_s": "Seconds in the backend (AOTAutograd and Inductor).",
        "inductor_compile_time_s": "Seconds in Inductor (null when it did not run, e.g. a cache hit).",
        "code_gen_time_s": "Seconds of Inductor's code generation.",
        "dynamo_time_before_restart_s": "Seconds Dynamo spent on the attempts it restarted (part of "
        "entire_frame_compile_time_s; 0 when it did not restart).",
        "backward_compile_time_s": "Seconds of a backward graph compiled lazily at the first backward call "
        "(backward_cumulative_compile_time_us, on backward rows; outside entire_frame_compile_time_s).",
        "guard_count": "Guards installed on the compiled code (null when the compile failed).",
        "shape_env_guard_count": "Guards on symbolic shapes.",
        "graph_op_count": "Calls (ops) in the captured FX graph.", "graph_node_count": "Nodes of that graph.",
        "graph_input_count": "Inputs (placeholders) of that graph.",
        "graph_breaks": "dynamo_graph_break_reason records of this compile.",
        "output_codes": "inductor_output_code records of this compile and phase.",
        "fail_type": "Exception class when the compile failed (e.g. BackendCompilerFailed), else null.",
        "fail_reason": "The exception's message.", "fail_user_frame_filename": "User file the failure points at.",
        "fail_user_frame_lineno": "Line in that file.",
        "restart_reasons": "Why Dynamo restarted the analysis (graph break messages), empty when it did not.",
        "recompile_reason": "The first failed guard that caused this recompile, else null.",
        "cache_size": "Compiled entries of this frame before this compile.",
        "has_guarded_code": "Whether the compile installed code.",
        "fx_cache_hits": "Inductor FX graph cache hits, local and remote (inductor_fx_*_cache_hit_count).",
        "fx_cache_misses": "Inductor FX graph cache misses, local and remote.",
        "aotautograd_cache_hits": "AOTAutograd cache hits, local and remote.",
        "aotautograd_cache_misses": "AOTAutograd cache misses, local and remote.",
        "rank": "torch.distributed rank of the record, null without distributed.",
        "lineno": "Line of the metrics record in the log.",
    },
    "torch_trace_graph_breaks": {
        "": "One row per dynamo_graph_break_reason artifact: a graph break Dynamo reported.",
        **_ID_DOCS, "program": "Program of the compile (null when the log ends before the compile does).",
        "kind": "graph_break ('Graph break in user code at ...': Dynamo split the graph and resumes after it), "
        "skip (Dynamo could not resume and runs the rest of the frame eagerly) or other.",
        "reason": "The graph break type (first line of Dynamo's message, e.g. 'Data-dependent branching').",
        "gb_id": "Id of the graph break in torch's registry (gb0170 in the message's graph-break-site link).",
        "explanation": "The message's 'Explanation:' line.",
        "user_filename": "User file of the break.", "user_lineno": "Line of the break in that file.",
        "user_function": "Function of the innermost user frame of the break.",
        "lineno": "Line of the artifact record in the log.", "end_lineno": "Last line of its payload.",
    },
    "torch_trace_output_code": {
        "": "One row per inductor_output_code record: a module Inductor generated (forward, backward or inference graph).",
        **_ID_DOCS, "phase": "Phase of the compile the code belongs to (forward also holds a backward graph "
        "compiled eagerly or loaded from a cache).",
        "graph": "AOT graph id from the code's first line ('0_forward', '0_backward', '1_inference').",
        "kernels": "kernel.generated of the code (as inductor_code counts it).",
        "extern_calls": "kernel.extern_calls of the code.", "fallback_calls": "kernel.fallback_calls of the code.",
        "complete": "The payload matched its MD5 and the inductor parser found the module whole.",
        "lineno": "Line of the record.", "end_lineno": "Last line of its payload.",
    },
    "torch_trace_kernels": {
        **inductor_code.TABLE_DOCS["inductor_kernels"],
        "": "Kernels of the traced output code (the inductor_kernels rows of each inductor_output_code payload).",
        "compile_id": _ID_DOCS["compile_id"], "output_code_lineno": "Line of the inductor_output_code record.",
        "lineno": "Line of the kernel's definition in the log.",
    },
    "torch_trace_extern_calls": {
        **inductor_code.TABLE_DOCS["inductor_extern_calls"],
        "": "Extern kernel and ATen fallback calls of the traced output code (inductor_extern_calls rows).",
        "compile_id": _ID_DOCS["compile_id"], "output_code_lineno": "Line of the inductor_output_code record.",
        "lineno": "Line of the call in the log.",
    },
    "torch_trace_guards": {
        "": "One row per guard the log shows for a compile: each entry of a dynamo_guards payload, each guard (a leaf, "
        "not a GuardManager) of a dynamo_cpp_guards_str tree, each symbolic_shape_specialization, guard_added and "
        "guard_added_fast record. Not one row per guard_count: torch counts Guard objects "
        "(len(output.guards)), which the tree shows as more leaves (a tensor's TENSOR_MATCH and its "
        "DIMENSION_DYNAMIC_MARKING_GUARDs) and dynamo_guards as fewer (only guards with Python code). Ids and "
        "addresses in the texts are normalised (transforms/volatile.py: ___check_obj_id(X, <id>)).",
        **_ID_DOCS,
        "source": "Where the row comes from: dynamo_guards (an entry of that payload), cpp_guard (a leaf of the "
        "dynamo_cpp_guards_str tree), shape_specialization (symbolic_shape_specialization: a symbolic size fixed to "
        "a constant), guard_added / guard_added_fast (a guard on symbolic shapes added while tracing).",
        "guard_type": "The leaf's guard type in the tree (TENSOR_MATCH, ID_MATCH, TYPE_MATCH, ...); null for the others.",
        "guard": "The guard, normalised: its code (dynamo_guards, the tree), '<symbol> = <value>' (a specialisation), "
        "the expression (guard_added*). At most 1,000 characters.",
        "guarded": "What it guards: the source of the tree's GuardManager that holds the leaf (L['x'], G['torch']); "
        "the sources of the specialised symbol; '<symbol>: <source>' pairs of a guard_added.",
        "reason": "A specialisation's reason, a guard_added's prefix (eval, ...); else null.",
        "user_code": "The user's line of code the guard comes from, when the log prints it.",
        "user_filename": "File of the innermost user frame the guard comes from (as the log writes it: the tree "
        "prints the last folders only).",
        "user_lineno": "Line in that file.", "user_function": "Function of that frame.",
        "lineno": "Line of the guard in the log (the payload line of a dynamo_guards entry or tree leaf, else the record's).",
    },
    "torch_trace_artifacts": {
        "": "One row per record of the log that tlparse shows as an artifact of a compile (every record but "
        "chromium_event, str and describe_*): its kind, compile, size and the lines where to read it.",
        **_ID_DOCS,
        "record": "Record name (the first key of the envelope's JSON).",
        "kind": "What it is: the artifact's name for 'artifact' records (dynamo_graph_break_reason, ...), else the "
        "record name (dynamo_output_graph, aot_forward_graph, inductor_output_code, compilation_metrics, ...).",
        "lineno": "Line of the record in the log.", "end_lineno": "Last line of its payload (lineno when it has none).",
        "record_bytes": "Bytes of the record's line (its JSON, glog prefix included).",
        "payload_bytes": "Bytes of the payload as torch wrote it (the text its MD5 is of, without the tabs); 0 "
        "without a payload.",
        "payload_lines": "Lines of the payload (0 without one).",
        "complete": "The payload matched its record's MD5; null without a payload.",
        "text": "The artifact's text as a compile view shows it, for the kinds a view shows (graphs, output code, "
        "guards, compilation metrics, a graph break's or a compile error's message: transforms/parsers/torch_trace.py "
        "KEPT_TEXTS): the payload's first lines, at most 65,536 bytes of it (cut at a line's end), and at most 4 MiB "
        "of text a log, in log order; a metrics record's JSON without torch's four config strings; dynamo_start's stack "
        "as a Python traceback ('File \"f.py\", line 12, in fn' then its code). Ids, addresses and path prefixes "
        "normalised (transforms/volatile.py). Null for other kinds, and when the log's 4 MiB were spent.",
        "text_lines": "Lines of the payload the text holds (its first ones; payload_lines when whole); the "
        "text's lines for a record without a payload; 0 without a text.",
        "text_cut": "The text stops before the artifact's end (its 65,536 bytes, or the log's 4 MiB, reached: "
        "the whole is lines lineno to end_lineno of the log); true with a null text when the log's 4 MiB were spent "
        "before it; null for a kind whose text is not kept.",
    },
    "torch_trace_collectives": {
        "": "One row per op of each compile's collective schedule (the inductor_collective_schedule artifact: the "
        "collective ops of the graph Inductor scheduled, in the order its output code issues them). tlparse compares "
        "ranks on it: ranks whose schedules differ can hang or exchange the wrong tensors.",
        **_ID_DOCS,
        "position": "Place of the op in the schedule, from 0.",
        "op": "The op as torch names it (torch.ops._c10d_functional.all_reduce_.default), at most 1,000 characters.",
        "lineno": "Line of the op in the log (a payload line of the artifact).",
    },
    "torch_trace_records": {
        "": "What the log holds: one row per record name (and artifact name).",
        "record": "Record name (the first key of the envelope's JSON).",
        "artifact": "The artifact's name for 'artifact' records, else null.",
        "known": "Whether torch 2.13 writes this record name (others come from newer torch; not errors).",
        "records": "Records of this name.", "payload_lines": "Payload lines after them.",
        "first_lineno": "Line of the first one.",
    },
}


def sniff(name: str, head: str) -> bool:
    """The first line that is not blank is a glog-prefixed JSON record."""
    for line in head.splitlines()[:5]:
        if line.strip():
            return _PREFIX.match(line) is not None
    return False


def stage_from_name(name: str) -> str | None:
    """``rank_<n>`` for a log whose name has its rank, ``trace`` for another TORCH_TRACE log (its
    records may still say its rank: ``DumpSummary.stage``), None for other names."""
    if (m := _FILE_NAME.match(name)) is None:
        return None
    return f"rank_{m[1]}" if m[1] is not None else "trace"


def parse(lines: Iterable[str]) -> ParserOutput:
    trace = _Trace()
    yield from trace.run(iter(lines))
    yield trace.summary()


def _int(v: object) -> int | None:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) and -2**31 <= v < 2**31 else None


def _line_number(text: str) -> int | None:
    """A line number printed in a payload (``File "x.py", line 12``), None past what the column holds."""
    return int(text) if text.isascii() and text.isdigit() and len(text) < 10 else None


def _nests_deeper(text: str, most: int) -> bool:
    """Whether the JSON ``text`` nests more than about ``most`` levels deep, brackets inside its
    strings not counted (a pass may peel two levels, so up to twice that is let through). Linear,
    in C: the brackets are counted, then peeled with their strings (cheap: a long record of torch
    nests 4 deep), and only a text that looks deeper is peeled again without its strings. Strings
    of brackets can hide depth from the first peel: the decoder's RecursionError then costs the
    record alone (``OneRecord``), as any failure of a record does."""
    if text.count("[") + text.count("{") <= most:
        return False
    return _peels_past(text, most) and _peels_past(_JSON_STRING.sub("", text), most)


def _peels_past(text: str, most: int) -> bool:
    """Whether the brackets of ``text`` still hold pairs after ``most`` passes that each drop the
    innermost ones (those that do not pair are json.loads' to tell)."""
    brackets = text.encode().translate(None, _NOT_BRACKETS)
    for _ in range(most):
        inner = brackets.replace(b"[]", b"").replace(b"{}", b"")
        if not inner or inner == brackets:
            return False
        brackets = inner
    return True


def _checked(m: dict) -> tuple[dict[str, int | float | None], list[str]]:
    """The figures of a metrics record (``_FIELD_BOUNDS``, null when absent), and what is wrong
    with those no compile can have (then null here)."""
    figures: dict[str, int | float | None] = {}
    wrong: list[str] = []
    for name, bounds in _FIELD_BOUNDS.items():
        v = m.get(name)
        if name in _US_FIELDS and (us := m.get(_US_FIELDS[name])) is not None:
            v = us / 1e6 if isinstance(us, (int, float)) and not isinstance(us, bool) else us
        if v is not None and (why := bounds.problem(v)) is not None:
            wrong.append(f"{name} {why}")
            v = None
        figures[name] = v
    return figures, wrong


def _cache_counts(figures: dict, wrong: list[str], kind: str, what: str) -> int | None:
    """Hits or misses of one cache, local and remote (None when their sum is past a count)."""
    n = sum(figures[f"{kind}_{w}_cache_{what}_count"] or 0 for w in ("local", "remote"))
    if (why := COUNT.problem(n)) is not None:
        wrong.append(f"{kind} cache {what}s (local and remote) {why}")
        return None
    return n


def _ids(cid: str | None, rec: dict) -> tuple:
    """The id columns (``_ID``) of a row of ``rec``'s compile ``cid``."""
    return cid, _int(rec.get("frame_id")), _int(rec.get("frame_compile_id")), _int(rec.get("attempt")), _tlparse_id(rec)


def _tlparse_id(rec: dict) -> str | None:
    """The record's compile id as tlparse prints it (``CompileId``'s Display in its src/types.rs):
    ``[!<autograd>/<frame>/<compile>_<attempt>]``, the autograd part only under compiled autograd,
    ``_<attempt>`` only when the attempt is not 0, ``-`` for an id the record lacks."""
    autograd, frame, compile_, attempt = (_u32(rec.get(k)) for k in (
        "compiled_autograd_id", "frame_id", "frame_compile_id", "attempt"))
    if frame is None and compile_ is None:
        return None
    head = "" if autograd is None else f"!{autograd}/"
    tail = f"_{attempt}" if attempt else ""
    return f"[{head}{'-' if frame is None else frame}/{'-' if compile_ is None else compile_}{tail}]"


def _u32(v: object) -> int | None:
    """An id tlparse reads (a u32) that the Int32 columns hold, else None (tlparse then reads no id)."""
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**31 else None


def _guard(v: object) -> str | None:
    """A guard's text, bounded, with its process-specific values normalised (ids, addresses)."""
    return None if v is None else normalise(str(v)[:_TEXT])


def _str(v: object) -> str | None:
    return None if v is None else v if isinstance(v, str) else str(v)


def _add(into: dict[str, float], figures: dict[str, float]) -> None:
    for k, v in figures.items():
        into[k] = into.get(k, 0) + v


class _Compile:
    """One compile (key: compiled-autograd id, frame id, frame compile id) while the log is read.
    ``phase``: forward (open until compilation_metrics), closed, backward (an output code came
    after the close: open until bwd_compilation_metrics)."""

    __slots__ = ("cid", "program", "phase", "open_line", "figures", "breaks", "codes", "impossible")

    def __init__(self, cid: str, lineno: int):
        self.cid, self.program, self.phase, self.open_line = cid, None, "forward", lineno
        self.figures: dict[str, float] = {}  # of the open phase, counted when its metrics record comes
        self.breaks: list[list] = []  # graph-break rows waiting for the program
        self.codes = 0
        self.impossible = False  # a metrics record of it held a figure no compile can have: it counts nowhere


class _CodeBatch(NamedTuple):
    table: str
    rows: list[tuple]


class _CodeRows(RowBuffer):
    """Where the inductor parser puts the rows of an output code (``inductor_code.parse(into=)``): its
    batches stay Python rows, made ours at once (``_Trace._code_rows``). A polars frame each, made and
    read back, cost ~0.4 ms an output code: 0.46 of the 200 MB benchmark log's 3.3 CPU s. Batched as
    the parser's own (rows it reads before it finds the code is no Inductor module are dropped alike)."""

    __slots__ = ()

    def flush(self) -> _CodeBatch | None:  # type: ignore[override]
        rows, self.rows = self.rows, []
        return _CodeBatch(self.table, rows) if rows else None


class _Trace:
    def __init__(self) -> None:
        # Rows wait here as Python tuples: smaller batches for those with long texts (fail and restart
        # reasons) or many of them (kernels).
        self.buf = {t: RowBuffer(t, s, _FEW_ROWS.get(t, _SMALL_BATCH if t in _LONG_ROWS else BATCH_ROWS),
                                 memory_pool=_MEMORY_POOL) for t, s in TABLES.items()}
        self.batch_text = 0  # characters of text in the artifacts batch (_BATCH_TEXT)
        self.errors: list[str] = []
        self.n_errors = self.lineno = self.good = 0
        self.truncated = self.newlines = False  # newlines: a line so far ended with one (then a last without is cut)
        self.held: str | None = None  # the line a payload reader read past, still to handle
        self.pbuf: list[str] = []  # payload lines not hashed yet
        self.md5 = None  # hash of the payload being read
        self.want = self.payload_of = ""  # its record's MD5, and what the record is
        self.payload_start = self.payload_lines = self.payload_bytes = 0
        self.artifact: list | None = None  # the artifact row of the record whose payload is being read
        self.finished: list[tuple] = []  # artifact rows whose payload has ended, to hand out
        self.strings: dict[int, str] = {}  # interned file names (str records), for the guards' user frames
        self.ids: dict[tuple, tuple] = {}  # the id columns of each (compile id, ids of the record) seen
        self.orphan = False  # in payload lines no record owns (reported once per run of them)
        self.records: dict[tuple[str, str | None], list] = {}  # (name, artifact) -> [records, payload lines, first]
        self.stats: list = [0, 0, 0]  # the entry of the record whose payload is being read
        self.compiles: dict[tuple, _Compile] = {}
        self.functions: dict[tuple[str, str], set[int]] = {}  # (co_name, co_filename) -> first lines
        self.totals: dict[str, float] = dict.fromkeys(BASE_METRICS, 0)
        self.programs: dict[str, dict[str, float]] = {}
        self.ranks: set[int] = set()
        self.record_line = 0  # the line of the record being read
        self.lost: set[str] | None = set()  # the figures the damage so far cost (None: every one)
        # The text kept of the payload being read (KEPT_TEXTS): its parts so far, None when none is kept.
        self.text_parts: list[bytes] | None = None
        self.text_room = self.text_size = 0  # bytes it may hold, bytes it holds
        self.text_started = self.text_full = False  # a line kept; more came than it may hold
        self.log_text_left = LOG_TEXT_BYTES

    def _ids(self, cid: str | None, rec: dict) -> tuple:
        """``_ids``, once per compile and attempt (every record of a compile asks for the same)."""
        key = (cid, rec.get("compiled_autograd_id"), rec.get("frame_id"), rec.get("frame_compile_id"), rec.get("attempt"))
        try:
            return self.ids[key]
        except KeyError:
            if len(self.ids) >= _MAX_IDS:
                self.ids.clear()
            ids = self.ids[key] = _ids(cid, rec)
            return ids
        except TypeError:  # an id that is a list or an object: no key, and no id read from it
            return _ids(cid, rec)

    def error(self, lineno: int, msg: str) -> None:
        self.n_errors += 1
        if len(self.errors) < _MAX_ERRORS:
            self.errors.append(line_error(lineno, msg))

    def costs(self, figures: Iterable[str] | None) -> None:
        """The damage just reported costs these figures (patterns; None: every one)."""
        if figures is None:
            self.lost = None
        elif self.lost is not None:
            self.lost.update(figures)

    def add(self, table: str, row: tuple) -> Iterator[TableBatch]:
        if (batch := self.buf[table].add(row)) is not None:
            yield batch

    def _artifact(self, row: tuple) -> Iterator[TableBatch]:
        """An artifact row; its batch goes out full, or once its texts reach ``_BATCH_TEXT`` characters."""
        rows = self.buf["torch_trace_artifacts"]
        self.batch_text += len(row[_TEXT_AT] or "")
        if (batch := rows.add(row)) is None and self.batch_text >= _BATCH_TEXT:
            batch = rows.flush()
        if batch is not None:
            self.batch_text = 0
            yield batch

    # --- lines and payloads ---

    def run(self, it: Iterator[str]) -> Iterator[TableBatch]:
        n, size, pbuf, guard = 0, 0, self.pbuf, OneRecord(self._unreadable)
        for raw in it:  # the hot loop: payload lines are only collected, then hashed in blocks of ~1 MiB
            n += 1
            if raw[:1] == "\t":
                pbuf.append(raw)
                size += len(raw)
                if size > _HASH_BLOCK:
                    self._hash(n)
                    size = 0
                continue
            self.lineno = self.record_line = n
            with guard:  # a record that raises costs itself and its payload only
                yield from self._record(raw, it)
            while (held := self.held) is not None:
                self.held, self.record_line = None, self.lineno
                with guard:
                    yield from self._record(held, it)
            n, size = self.lineno, 0
        self.lineno = n
        self._hash(n)
        self._end_payload(at_end=True)
        if not self.good:
            raise ParseError("not a TORCH_TRACE log: no readable glog-prefixed JSON record", n or 1)
        yield from self._finish()

    def _unreadable(self, why: str) -> None:
        self.error(self.record_line, f"record {why}; it and its payload are skipped")
        self.costs(None)  # read halfway: what it counted already, and which compile, is not known
        self.md5, self.orphan = None, True  # what is left of its payload goes with it, unreported
        self.artifact = self.text_parts = None

    def _hash(self, last: int) -> None:
        """Hash the collected payload lines (``last``: the line of the last one)."""
        pbuf = self.pbuf
        if not pbuf:
            return
        if self.md5 is None:
            if not self.orphan:
                self.orphan = True
                self.error(last - len(pbuf) + 1, "payload line without a record before it (the record is lost or "
                                                 "the log starts mid-payload); skipped up to the next record")
                self.costs(None)  # the log's start, or a record whose kind is unknown, is gone
        else:
            if pbuf[0][-1:] == "\n":  # payload line k is "\t" + line k + "\n": drop the tabs, keep the last "\n" back
                text = "".join(pbuf)[1:].replace("\n\t", "\n")
            else:  # lines handed over without their newlines
                text = "\n".join(p[1:] for p in pbuf) + "\n"
            data = (text[:-1] if text[-1:] == "\n" else text).encode()
            if self.text_parts is not None:
                self._keep(data)
            if self.payload_lines:
                self.md5.update(b"\n")
                self.payload_bytes += 1
            self.md5.update(data)
            self.payload_bytes += len(data)
            self.payload_lines += len(pbuf)
        pbuf.clear()

    def _end_payload(self, at_end: bool = False) -> bool:
        """Whether the payload just read matches the MD5 its record announced (errors if not)."""
        if self.md5 is None:
            return True
        md5, self.md5 = self.md5, None
        self.stats[1] += self.payload_lines
        whole = bool(self.payload_lines) and md5.hexdigest() == self.want
        if (row := self.artifact) is not None:  # its record's artifact row, now that its size is known
            self.artifact = None
            row[_END_LINENO] = self.payload_start + self.payload_lines
            row[_PAYLOAD_BYTES:_TEXT_AT] = [self.payload_bytes, self.payload_lines, whole]
            if self.text_parts is not None:
                self._kept_text(row)
            self.finished.append(tuple(row))
        self.text_parts = None
        if whole:
            return True
        last = self.lineno if at_end else self.lineno - 1
        if at_end:
            self.truncated = True
            self.error(last, f"the log ends inside the payload of {self.payload_of} (line {self.payload_start}): "
                             f"{self.payload_lines} lines read, their MD5 is not the record's (cut short?)")
        else:
            self.error(self.payload_start, f"the payload of {self.payload_of} (lines {self.payload_start + 1}-{last}) "
                                           "does not match the record's MD5: lines lost or altered")
            # Only an output code's kernels are read from a payload; a record's counts stand.
            self.costs(("kernel.*",) if self.payload_of == "inductor_output_code" else ())
        return False

    def _payload(self, it: Iterator[str]) -> Iterator[str]:
        """The payload's lines without their tab (newline kept), hashed on the way; the line
        after the payload is left in ``held``."""
        md5 = self.md5
        for raw in it:
            self.lineno += 1
            if raw[:1] != "\t":
                self.held = raw
                return
            if self.payload_lines:
                md5.update(b"\n")
                self.payload_bytes += 1
            text = raw[1:]
            data = (text[:-1] if text[-1:] == "\n" else text).encode()
            if self.text_parts is not None:
                self._keep(data)
            md5.update(data)
            self.payload_bytes += len(data)
            self.payload_lines += 1
            # A log's last line "\t" without its newline is an empty line (the MD5 says whether it was cut).
            yield "\n" if not text and self.newlines else text

    def _record(self, raw: str, it: Iterator[str]) -> Iterator[TableBatch]:
        lineno = self.lineno
        self._hash(lineno - 1)
        self._end_payload()
        if self.finished:
            for row in self.finished:
                yield from self._artifact(row)
            self.finished.clear()
        self.orphan = False
        whole = raw[-1:] == "\n"
        self.newlines = self.newlines or whole
        m = _PREFIX.match(raw)
        rec = None
        if m is None:
            if not raw.strip():
                return
            msg = "not a TORCH_TRACE record (no glog prefix before a JSON object)"
        elif _nests_deeper(text := raw[m.end():], _MAX_DEPTH):
            msg = f"record nests deeper than {_MAX_DEPTH} levels (torch's nest 4 deep)"
        else:
            try:
                rec = json.loads(text)
                msg = "" if isinstance(rec, dict) and rec else "record is not a JSON object with a name"
            except ValueError as exc:
                msg = f"record is not valid JSON ({exc})"
        if msg:
            self.orphan = True  # its payload, if any, goes with it
            if not whole and self.newlines:
                self.truncated = True
                self.error(lineno, "the log ends mid-line (its last line has no newline and is not a whole record)")
            else:
                self.error(lineno, f"{msg}; it and its payload are skipped")
                self.costs(_garbled_costs(raw))
            return
        self.good += 1
        name = next(iter(rec))
        body = rec[name] if isinstance(rec[name], dict) else {}
        artifact = _str(body.get("name")) if name == "artifact" else None
        if (rank := _int(rec.get("rank"))) is not None:
            self.ranks.add(rank)
        if (stats := self.records.get((name, artifact))) is None:
            stats = self.records[(name, artifact)] = [0, 0, lineno]
        stats[0] += 1
        if isinstance(want := rec.get("has_payload"), str):
            self.stats, self.md5, self.want = stats, hashlib.md5(), want
            self.payload_of = name if artifact is None else f"artifact {artifact}"
            self.payload_start, self.payload_lines, self.payload_bytes = lineno, 0, 0
        key = (rec.get("compiled_autograd_id"), rec.get("frame_id"), rec.get("frame_compile_id"))
        comp = self._compile(key, name, lineno)
        if name not in _NOT_ARTIFACTS:
            row = [*self._ids(comp.cid if comp is not None else None, rec), name, artifact or name, lineno, lineno,
                   len(raw.encode()) - whole, 0, 0, None, None, 0, None]
            kept = (artifact or name) in KEPT_TEXTS
            if self.md5 is not None:  # its size (and text) are known at the payload's end
                self.artifact = row
                if kept:
                    self._start_text(row)
            else:  # a text made of the record only while the log's bound has room (a metrics record's JSON costs)
                if kept and self._room(row) > 0 and (text := _record_text(name, body, self.strings)) is not None:
                    self._whole_text(row, text)
                yield from self._artifact(tuple(row))
        if name == "str":
            self._string(rec[name])
        elif name in _METRICS:
            yield from self._metrics(name, rec, body, key, comp, lineno)
        elif name == "inductor_output_code" and self.md5 is not None:
            yield from self._output_code(rec, comp, lineno, it)
        elif artifact == "dynamo_graph_break_reason" and self.md5 is not None:
            yield from self._graph_break(rec, comp, lineno, it)
        elif artifact == _COLLECTIVE_SCHEDULE and self.md5 is not None:
            yield from self._collectives(rec, comp, it)
        elif name == "dynamo_guards" and self.md5 is not None:
            yield from self._python_guards(rec, comp, lineno, it)
        elif name == "dynamo_cpp_guards_str" and self.md5 is not None:
            yield from self._cpp_guards(rec, comp, it)
        elif name in _SHAPE_GUARDS:
            yield from self._shape_guard(name, rec, body, comp, lineno)

    # --- the texts kept (KEPT_TEXTS) ---

    def _room(self, row: list) -> int:
        """Bytes of text the artifact of ``row`` may keep (0: the log's were spent: text_cut, no text)."""
        room = min(ARTIFACT_TEXT_BYTES, self.log_text_left)
        if room <= 0:
            row[_TEXT_AT + 2] = True
        return room

    def _start_text(self, row: list) -> None:
        if (room := self._room(row)) > 0:
            self.text_parts, self.text_room, self.text_size = [], room, 0
            self.text_started = self.text_full = False

    def _keep(self, data: bytes) -> None:
        """The next line(s) of the payload being read (``data``: joined, without the last newline),
        as far as its text may hold them."""
        if self.text_full:
            return
        sep = b"\n" if self.text_started else b""
        self.text_started = True
        room = self.text_room - self.text_size
        if len(sep) + len(data) > room:
            data, self.text_full = (sep + data[:room])[:room], True
        elif sep:
            data = sep + data
        self.text_parts.append(data)
        self.text_size += len(data)

    def _kept_text(self, row: list, lines: int | None = None) -> None:
        """The text kept into its row: cut at the last line's end when the payload went on (a first
        line longer than the text may hold is cut inside it); ``lines``: of a whole text."""
        raw = b"".join(self.text_parts)
        if self.text_full and (nl := raw.rfind(b"\n")) > 0:
            raw = raw[:nl]
        # A text the log's bound cut spends it: the texts after it get none, not a few bytes each.
        self.log_text_left = 0 if self.text_full and self.text_room < ARTIFACT_TEXT_BYTES else self.log_text_left - len(raw)
        text = raw.decode("utf-8", "ignore")  # a cut inside a character drops it
        if self.text_full or lines is None:
            lines = text.count("\n") + 1 if self.text_full else self.payload_lines
        row[_TEXT_AT:] = [normalise_text(text), lines, self.text_full]
        self.text_parts = None

    def _whole_text(self, row: list, text: str) -> None:
        """A text made from a record without a payload (its metrics, its stack), bounded alike."""
        self._start_text(row)
        self._keep(text.encode())
        self._kept_text(row, lines=text.count("\n") + 1)

    # --- compiles and programs ---

    def _compile(self, key: tuple, name: str, lineno: int) -> _Compile | None:
        """The compile a record belongs to; the first record of a compile opens it (metrics of a
        backward or of run time open nothing), an output code after its close opens its backward."""
        if not isinstance(key[1], int) or not isinstance(key[2], int):
            return None
        comp = self.compiles.get(key)
        if comp is None:
            if name != "compilation_metrics" and name in _METRICS:
                return None
            cid = f"{key[1]}/{key[2]}" if key[0] is None else f"!{key[0]}/{key[1]}/{key[2]}"
            comp = self.compiles[key] = _Compile(cid, lineno)
        elif comp.phase == "closed" and name == "inductor_output_code":
            comp.phase, comp.open_line = "backward", lineno  # a backward graph compiled lazily
        return comp

    def _program(self, co_name: str | None, co_filename: str | None, first: int | None) -> str | None:
        if co_name is None:
            return None
        name, line = co_name, None
        while (m := _RESUME.match(name)) is not None:  # nested resume functions repeat the prefix
            name, line = m[1], int(m[2])
        if line is None:
            self.functions.setdefault((co_name, co_filename or ""), set()).add(first or 0)
            return f"{co_name} at {co_filename}:{first}"
        parents = [f for f in self.functions.get((name, co_filename or ""), ()) if f <= line]
        return f"{name} at {co_filename}:{max(parents)}" if parents else f"{co_name} at {co_filename}:{first}"

    def _count(self, program: str | None, figures: dict[str, float]) -> None:
        _add(self.totals, figures)
        if program is not None:
            _add(self.programs.setdefault(program, dict.fromkeys(BASE_METRICS, 0)), figures)

    def _commit(self, comp: _Compile | None, figures: dict[str, float]) -> None:
        """Figures of a record inside an open compile wait for its metrics; others count at once."""
        if comp is not None and comp.phase != "closed":
            _add(comp.figures, figures)
        elif comp is None or not comp.impossible:
            self._count(comp.program if comp is not None else None, figures)

    def _metrics(self, name: str, rec: dict, m: dict, key: tuple, comp: _Compile | None,
                 lineno: int) -> Iterator[TableBatch]:
        phase = _METRICS[name]
        f, wrong = _checked(m)
        hits, misses = (_cache_counts(f, wrong, "inductor_fx", k) for k in ("hit", "miss"))
        aot = [_cache_counts(f, wrong, "aotautograd", k) for k in ("hit", "miss")]
        cid = comp.cid if comp is not None else _str(m.get("compile_id"))
        if wrong:  # a figure no compile can have: the record's others are not believed, nor its compile's
            self.error(lineno, f"{name} of compile {cid}: {'; '.join(wrong[:3])}: stored as null, and the "
                               "compile's figures are not counted")
            self.costs(None)
            if comp is not None and phase in ("forward", "backward"):
                comp.impossible = True
        figures: dict[str, float] = {}
        if phase == "forward":
            program = self._program(_str(m.get("co_name")), _str(m.get("co_filename")), f["co_firstlineno"])
            figures = {"dynamo.compiles": 1, "dynamo.compile_seconds": f["entire_frame_compile_time_s"] or 0,
                       "dynamo.failures": 1 if m.get("fail_type") else 0, "dynamo.graph_breaks": 0,
                       "dynamo.recompiles": 1 if _frame_compile_id(key, m) else 0,
                       "dynamo.guards": f["guard_count"] or 0}
        else:
            program = comp.program if comp is not None else None
        breaks = codes = 0
        if phase in ("forward", "backward"):
            figures.update({"inductor.compile_seconds": f["inductor_compile_time_s"] or 0,
                            "inductor.cache_hits": hits or 0, "inductor.cache_misses": misses or 0})
            if comp is not None and comp.phase == phase:
                _add(figures, comp.figures)
                breaks, codes = len(comp.breaks), comp.codes
                for row in comp.breaks:
                    row[5] = program
                    yield from self.add("torch_trace_graph_breaks", tuple(row))
                comp.figures, comp.breaks, comp.codes, comp.phase = {}, [], 0, "closed"
                if phase == "forward":
                    comp.program = program
            if not wrong and (comp is None or not comp.impossible):
                self._count(program, figures)
        reasons = m.get("restart_reasons")
        guarded = m.get("has_guarded_code")
        yield from self.add("torch_trace_compiles", (
            *self._ids(cid, rec), phase, program, _str(m.get("co_name")),
            _str(m.get("co_filename")), *(f[k] for k in (*_INT_FIELDS, *_FLOAT_FIELDS, *_COUNT_FIELDS)), breaks, codes,
            _str(m.get("fail_type")), _str(m.get("fail_reason")), _str(m.get("fail_user_frame_filename")),
            f["fail_user_frame_lineno"], [str(r) for r in reasons] if isinstance(reasons, list) else None,
            _str(m.get("recompile_reason")), f["cache_size"], guarded if isinstance(guarded, bool) else None,
            hits, misses, *aot, _int(rec.get("rank")), lineno))

    # --- payloads read ---

    def _output_code(self, rec: dict, comp: _Compile | None, lineno: int, it: Iterator[str]) -> Iterator[TableBatch]:
        """Feed the payload to the output_code.py parser, line by line, and shift its lines to the log's."""
        cid = comp.cid if comp is not None else None
        phase = comp.phase if comp is not None and comp.phase != "closed" else "forward"
        lines = self._payload(it)
        first = next(lines, None)
        graph = m[1] if first is not None and (m := _AOT_ID.match(first)) else None
        summary: DumpSummary | None = None
        into = (_CodeRows("torch_trace_kernels", inductor_code.TABLES["inductor_kernels"]),
                _CodeRows("torch_trace_extern_calls", inductor_code.TABLES["inductor_extern_calls"]))
        try:
            for item in inductor_code.parse(_chain_first(first, lines), into=into):
                if isinstance(item, DumpSummary):
                    summary = item
                else:
                    yield from self._code_rows(item, cid, lineno)
        except ParseError as exc:
            self.error(lineno + (exc.lineno or 1), f"output code of compile {cid}: {exc.msg}")
        for _ in lines:  # what the inductor parser left of the payload
            pass
        for e in summary.errors if summary is not None else ():
            rel = _REL_LINE.match(e)
            self.error(lineno + int(rel[1]) if rel else lineno, f"output code of compile {cid}: {rel[2] if rel else e}")
        if summary is None or summary.errors:
            self.costs(("kernel.*",))  # its kernels are counted from a code the inductor parser found damaged
        end = self.lineno - (self.held is not None)
        hashed = self._end_payload(at_end=self.held is None)
        figures = dict(summary.metrics) if summary is not None else {}
        if comp is not None:
            comp.codes += 1
        self._commit(comp, figures)
        yield from self.add("torch_trace_output_code", (
            *self._ids(cid, rec), phase, graph,
            *(int(figures.get(f"kernel.{k}", 0)) for k in ("generated", "extern_calls", "fallback_calls")),
            hashed and summary is not None and summary.status.value == "ok", lineno, end))

    def _code_rows(self, batch: _CodeBatch, cid: str | None, lineno: int) -> Iterator[TableBatch]:
        """The inductor parser's rows as rows of ours: with the compile, lines the log's."""
        rows = self.buf[batch.table]
        for row in batch.rows:
            if (b := rows.add((cid, lineno, *row[:-1], row[-1] + lineno))) is not None:
                yield b

    def _graph_break(self, rec: dict, comp: _Compile | None, lineno: int, it: Iterator[str]) -> Iterator[TableBatch]:
        kind, reason, gb_id, explanation, user_file, user_line = "other", None, None, None, None, None
        frame: tuple[str, int, str] | None = None  # the innermost user frame of the traceback
        section, want_reason = "", False
        for i, text in enumerate(self._payload(it)):
            line = text.rstrip("\n")[:_TEXT]
            if i == 0:
                if line.startswith(_GB_HEAD):
                    kind = "graph_break"
                    where, _, num = line[len(_GB_HEAD):].rpartition(":")
                    user_file, user_line = where or None, _line_number(num)
                elif line.startswith("Graph break: torch.compile cannot properly resume"):
                    kind = "skip"
                else:
                    reason = line.strip() or None
            elif line.startswith("Graph Break Reason: "):  # "<gb type>", or "<context>:" then the gb type
                reason = line[len("Graph Break Reason: "):].strip()
                want_reason = reason.endswith(":")
            elif want_reason and line.strip():
                reason, want_reason = line.strip(), False
            elif explanation is None and line.startswith("  Explanation: "):
                explanation = line[len("  Explanation: "):]
            elif gb_id is None and (g := _GB_ID.search(line)):
                gb_id = g[1]
            elif line in ("User code traceback:", "The graph break occurred in the following user code:"):
                section = "user"
            elif line == "Traceback (most recent call last):":
                section = "internal"
            elif section == "user" and (f := _FILE_LINE.match(line)):
                frame = (f[1], _line_number(f[2]), f[3])
            elif section == "internal" and kind == "skip" and line[:1] not in (" ", "") and (e := _EXC_LINE.match(line)):
                reason, section = e[1], "done"  # the exception that made Dynamo skip the frame
        end = self.lineno - (self.held is not None)
        self._end_payload(at_end=self.held is None)
        if frame is not None and user_file is None:
            user_file, user_line = frame[0], frame[1]
        self._commit(comp, {"dynamo.graph_breaks": 1})
        row = [*self._ids(comp.cid if comp else None, rec), comp.program if comp else None, kind, reason, gb_id, explanation,
               user_file, user_line, frame[2] if frame else None, lineno, end]
        if comp is not None and comp.phase != "closed":
            comp.breaks.append(row)
        else:
            yield from self.add("torch_trace_graph_breaks", tuple(row))

    def _collectives(self, rec: dict, comp: _Compile | None, it: Iterator[str]) -> Iterator[TableBatch]:
        """inductor_collective_schedule: a JSON list of op names written one entry a line."""
        ids = self._ids(comp.cid if comp is not None else None, rec)
        position = 0
        for text in self._payload(it):
            entry = text.strip().rstrip(",")
            if entry[:1] != '"':
                continue
            try:
                op = json.loads(entry[:_TEXT + 2])
            except ValueError:  # an op longer than a column holds, or not a JSON string: its text
                op = entry.strip('"')
            yield from self.add("torch_trace_collectives", (*ids, position, str(op)[:_TEXT], self.lineno))
            position += 1
        self._end_payload(at_end=self.held is None)

    # --- guards ---

    def _python_guards(self, rec: dict, comp: _Compile | None, lineno: int, it: Iterator[str]) -> Iterator[TableBatch]:
        """dynamo_guards: a JSON list written one entry a line ("[", "{...},", ..., "]")."""
        ids = self._ids(comp.cid if comp is not None else None, rec)
        for text in self._payload(it):
            entry_text = text.strip().rstrip(",")
            if entry_text[:1] != "{":
                continue
            entry = None
            if not _nests_deeper(entry_text, _MAX_DEPTH):
                try:
                    entry = json.loads(entry_text)
                except ValueError:
                    pass
            if not isinstance(entry, dict):
                self.error(self.lineno, f"a dynamo_guards entry of compile {ids[0]} is not a JSON object; skipped")
                self.costs(())
                continue
            yield from self.add("torch_trace_guards", (
                *ids, "dynamo_guards", None, _guard(entry.get("code")), None, None,
                *self._user_frame(entry.get("user_stack")), self.lineno))
        self._end_payload(at_end=self.held is None)

    def _cpp_guards(self, rec: dict, comp: _Compile | None, it: Iterator[str]) -> Iterator[TableBatch]:
        """dynamo_cpp_guards_str: the guard manager's tree, one node a line; a row per leaf guard,
        with the source of the GuardManager above it."""
        ids = self._ids(comp.cid if comp is not None else None, rec)
        rows = self.buf["torch_trace_guards"]  # added to directly: a tree has a line per guard and per manager
        sources: list[str | None] = []  # the source of the manager at each depth down to this line
        for text in self._payload(it):
            if (m := _CPP_NODE.match(text)) is None:
                continue
            depth, body = len(m[1]) // 2, m[3][:_CPP_LINE]
            del sources[depth:]
            sources.extend([None] * (depth - len(sources)))
            if _GUARD_TYPE.match(m[2]) is None:  # a manager: the source of the guards below it
                start = body.find("source=")
                end = body.find(", accessed_by=", start)
                sources.append(body[start + 7:end][:_TEXT] if 0 <= start < end else None)
                continue
            code, where = body, None
            if (cut := body.rfind("  # ")) >= 0 and (where := _CPP_WHERE.fullmatch(body, cut + 4)) is not None:
                code = body[:cut]
            code, _, user_code = code.partition("  # ")
            if where is None:
                file = line = function = None
            else:
                file, line, function = where[1][:_TEXT], _line_number(where[2]), where[3][:_TEXT]
            batch = rows.add((*ids, "cpp_guard", m[2][:_TEXT], _guard(code.rstrip()), sources[-1] if sources else None,
                              None, user_code.strip()[:_TEXT] or None, file, line, function, self.lineno))
            if batch is not None:
                yield batch
        self._end_payload(at_end=self.held is None)

    def _shape_guard(self, name: str, rec: dict, body: dict, comp: _Compile | None,
                     lineno: int) -> Iterator[TableBatch]:
        """symbolic_shape_specialization, guard_added, guard_added_fast: the guard is the record's."""
        if name == "symbolic_shape_specialization":
            sources = body.get("sources")
            guard = f"{_str(body.get('symbol'))} = {_str(body.get('value'))}"
            guarded = ", ".join(map(str, sources)) if isinstance(sources, list) and sources else None
            reason = _str(body.get("reason"))
        else:
            guard = _str(body.get("expr"))
            pairs = body.get("symbol_to_sources")
            guarded = ", ".join(f"{k}: {v}" for k, v in pairs.items()) if isinstance(pairs, dict) and pairs else None
            reason = _str(body.get("prefix"))
        code, *frame = self._user_frame(body.get("user_stack"))
        if code is None and isinstance(where := body.get("frame_locals"), dict):  # guard_added: the user's line
            code = _str(where.get("loc"))
        yield from self.add("torch_trace_guards", (
            *self._ids(comp.cid if comp is not None else None, rec), _SHAPE_GUARDS[name], None, _guard(guard),
            guarded[:_TEXT] if guarded else None, reason[:_TEXT] if reason else None,
            code[:_TEXT] if code else None, *frame, lineno))

    def _string(self, value: object) -> None:
        """A str record, ``["<file name>", <index>]``: the name frames of later stacks give by index."""
        if (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str) and _u32(value[1]) is not None
                and len(self.strings) < _MAX_STRINGS):
            self.strings[value[1]] = value[0][:_TEXT]

    def _user_frame(self, stack: object) -> tuple[str | None, str | None, int | None, str | None]:
        """The innermost frame of a structured user stack: its code, file, line and function."""
        return _frame(stack[-1] if isinstance(stack, list) and stack else None, self.strings)

    # --- end ---

    def _finish(self) -> Iterator[TableBatch]:
        last = self.lineno
        for comp in self.compiles.values():
            if comp.phase == "closed":
                continue
            self.truncated = True
            what, metrics = (("compile", "compilation_metrics") if comp.phase == "forward"
                             else ("lazy backward compile of", "bwd_compilation_metrics"))
            self.error(last, f"the log ends inside the {what} {comp.cid} (opened at line {comp.open_line}, no {metrics}): "
                             "cut short, or the process died while compiling; its figures are not counted")
            for row in comp.breaks:
                yield from self.add("torch_trace_graph_breaks", tuple(row))
        for row in self.finished:
            yield from self._artifact(row)
        for (name, artifact), (n, payload_lines, first) in self.records.items():
            yield from self.add("torch_trace_records", (name, artifact, name in KNOWN_RECORDS, n, payload_lines, first))
        for rb in self.buf.values():
            if (b := rb.flush()) is not None:
                yield b

    def summary(self) -> DumpSummary:
        errors = list(self.errors)
        if self.n_errors > len(errors):
            errors.append(line_error(self.lineno, f"{self.n_errors - len(errors)} more errors not shown"))
        programs = {p: _rounded(m) for p, m in self.programs.items()}
        return DumpSummary(kind=DumpKind.TORCH_TRACE, stage=f"rank_{min(self.ranks)}" if self.ranks else "trace",
                           program=next(iter(programs)) if len(programs) == 1 else None,
                           metrics=_rounded(self.totals), errors=errors, truncated=self.truncated, programs=programs,
                           lost=None if self.lost is None else tuple(sorted(self.lost)))


def _frame(frame: object, strings: dict[int, str]) -> tuple[str | None, str | None, int | None, str | None]:
    """A frame of a structured stack (``{"line", "name", "filename": <str index>, "loc"}``): its code,
    file (from the ``str`` records), line and function, each cut at ``_TEXT``."""
    if not isinstance(frame, dict):
        return None, None, None, None
    filename = frame.get("filename")
    filename = strings.get(filename) if isinstance(filename, int) else _str(frame.get("uninterned_filename") or filename)
    loc, function = _str(frame.get("loc")), _str(frame.get("name"))
    return (loc[:_TEXT] if loc else None, filename[:_TEXT] if filename else None, _int(frame.get("line")),
            function[:_TEXT] if function else None)


_LINE_BREAKS = re.compile(r"[\r\n]+")


def _record_text(name: str, body: dict, strings: dict[int, str]) -> str | None:
    """The text of a record without a payload that a compile view shows: a metrics record's JSON
    (without torch's config strings), dynamo_start's stack as a Python traceback, outermost first
    (a frame's names on one line each: a line break in a name cannot make a frame)."""
    if name in _METRICS:
        return json.dumps({k: v for k, v in body.items() if k not in _CONFIG_STRINGS}, indent=1, ensure_ascii=False,
                          default=str)
    if name != "dynamo_start" or not isinstance(stack := body.get("stack"), list):
        return None
    lines = []
    for frame in stack:
        loc, file, line, function = _frame(frame, strings)
        if file is None and function is None:
            continue
        file, function = (_LINE_BREAKS.sub(" ", v or "?") for v in (file, function))
        lines.append(f'File "{file}", line {"?" if line is None else line}, in {function}')
        if loc:
            lines.append("    " + _LINE_BREAKS.sub(" ", loc))
    return "\n".join(lines) or None


def _garbled_costs(raw: str) -> tuple[str, ...] | None:
    """What a record that is not JSON costs, by the name its line starts with (``_FEEDS``): None
    (every figure) when no name can be read, or for a kind we do not know."""
    m = _RECORD_NAME.search(raw, 0, 4096)
    if m is None or m[1] not in KNOWN_RECORDS:
        return None
    if m[1] == "artifact":  # a graph break's record counts the break
        return ("dynamo.graph_breaks",) if _GRAPH_BREAK_ARTIFACT in raw[:4096] else ()
    return _FEEDS.get(m[1], ())


def _rounded(metrics: dict[str, float]) -> dict[str, float]:
    """Sums of seconds to the microsecond torch measures them in (no float noise in the figures)."""
    return {k: round(v, 6) if isinstance(v, float) else v for k, v in metrics.items()}


def _frame_compile_id(key: tuple, m: dict) -> int:
    """From the record's ids, else from the metrics' compile_id ("F/C", "!A/F/C")."""
    if isinstance(key[2], int):
        return key[2]
    tail = str(m.get("compile_id") or "").rpartition("/")[2]
    return int(tail) if tail.isdigit() else 0


def _chain_first(first: str | None, rest: Iterator[str]) -> Iterator[str]:
    if first is not None:
        yield first
        yield from rest
