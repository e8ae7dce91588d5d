"""TorchInductor generated module (``output_code.py``) -> kernel and call tables.

Input: the lines of the ``output_code.py`` Inductor writes per compiled graph under
``TORCH_COMPILE_DEBUG=1`` (``torchinductor/<graph dir>/output_code.py``): module
preamble, one ``<name> = async_compile.<backend>(...)`` definition per generated kernel
with its source in a triple-quoted string (Triton: ``@triton_heuristics.<kind>(...)``
+ ``@triton.jit def ...``; C++: ``async_compile.cpp_pybinding([...], r'''...''')``),
then the wrapper ``call`` that launches kernels and calls ``extern_kernels.<op>(`` and
aten fallbacks, and a benchmark harness ending in ``if __name__ == "__main__":``.

Guarantees: streaming (state: the kernel being read), ``TableBatch`` frames of
``inductor_kernels`` and ``inductor_extern_calls`` with the declared schemas, then one
``DumpSummary``. Calls are counted per call site outside kernel sources and comments.
``truncated`` is set, with an error saying why, when the input ends inside a kernel
source, mid-way through a top-level line, or before ``async_compile.wait(globals())``
or the ``__main__`` guard (so a module written with ``config.benchmark_harness=False``
also reads as truncated). A last line without its newline is read when it is indented
or kernel source (its calls are those of the whole line's start), so a complete file
that only lacks its final newline is ok. A line that cannot be read (``records.record_failure``)
is an error and skipped. Raises ``ParseError`` only for empty input or when no Inductor
marker appears in the first lines.
"""

from __future__ import annotations

import re
from typing import Iterable

import polars as pl

from transforms.records import (RECORD_FAILURES, DumpKind, DumpSummary, ParseError, ParserOutput, RowBuffer, line_error,
                                record_failure)

PARSER_VERSION = 2  # 2: every cut is an error; a last line without newline is read when safe

TABLES: dict[str, pl.Schema] = {
    "inductor_kernels": pl.Schema({
        "name": pl.String, "category": pl.String, "backend": pl.String, "heuristic": pl.String,
        "aten_ops": pl.List(pl.String), "source_lines": pl.Int32, "lineno": pl.Int32,
    }),
    "inductor_extern_calls": pl.Schema({"callee": pl.String, "kind": pl.String, "lineno": pl.Int32}),
}

TABLE_DOCS: dict[str, dict[str, str]] = {
    "inductor_kernels": {
        "": "Kernels defined in one Inductor output_code.py (one row per async_compile definition).",
        "name": "Kernel variable name, e.g. triton_poi_fused_add_0 or cpp_fused_sum_1.",
        "category": "pointwise / reduction / persistent_reduction / template / foreach / cpp / other: from the name prefix (triton_poi_, triton_red_, triton_per_, triton_tem_, triton_for_, cpp_fused_), else the @triton_heuristics decorator, else the backend.",
        "backend": "triton or cpp (async_compile.triton / cpp_pybinding / cpp); other async_compile methods by name.",
        "heuristic": "Name of the @triton_heuristics.<name>( decorator (pointwise, reduction, persistent_reduction, template, foreach, user_autotune...); null for C++.",
        "aten_ops": "ATen ops from the `Original ATen: [...]` comment above the definition; null when there is none.",
        "source_lines": "Lines of kernel source between the opening and closing triple quotes.",
        "lineno": "Line of the `<name> = async_compile...` definition (1-based).",
    },
    "inductor_extern_calls": {
        "": "Calls from the wrapper code to library kernels: extern_kernels.<op>( and aten fallbacks (torch.ops.aten.<op>.<overload>( or aten.<op>.<overload>(), one row per call site.",
        "callee": "extern_kernels.mm, extern_kernels.convolution, aten.convolution_backward.default, ...",
        "kind": "extern_kernels or aten_fallback.",
        "lineno": "Line of the call (1-based).",
    },
}

PREFIX_CATEGORY = (
    ("triton_poi_", "pointwise"), ("triton_red_", "reduction"), ("triton_per_", "persistent_reduction"),
    ("triton_tem_", "template"), ("triton_for_", "foreach"), ("cpp_fused_", "cpp"),
)
HEURISTIC_CATEGORY = {"pointwise": "pointwise", "reduction": "reduction", "persistent_reduction": "persistent_reduction",
                      "template": "template", "foreach": "foreach"}
BACKEND = {"triton": "triton", "cpp_pybinding": "cpp", "cpp": "cpp"}
_DEF = re.compile(r"^(\w+) = async_compile\.(\w+)\(")
_HEURISTIC = re.compile(r"^@triton_heuristics\.(\w+)\(")
_EXTERN = re.compile(r"\bextern_kernels\.(\w+)\(")
_ATEN = re.compile(r"(?<![\w.])(?:torch\.ops\.)?aten\.(\w+)\.(\w+)\(")
_ORIGIN = re.compile(r"^# .*Original ATen: \[([^\]]*)\]")
_MARKERS = ("async_compile = AsyncCompile()", "from torch._inductor")
MAX_HEAD_LINES = 200


def sniff(name: str, head: str) -> bool:
    if name == "output_code.py":
        return True
    return any(line.rstrip("\r") == "async_compile = AsyncCompile()" for line in head.splitlines())


def stage_from_name(name: str) -> str | None:
    return "output_code" if name == "output_code.py" else None


def _category(name: str, backend: str, heuristic: str | None) -> str:
    for prefix, cat in PREFIX_CATEGORY:
        if name.startswith(prefix):
            return cat
    if backend == "cpp":
        return "cpp"
    return HEURISTIC_CATEGORY.get(heuristic or "", "other")


def parse(lines: Iterable[str], *, into: tuple[RowBuffer, RowBuffer] | None = None) -> ParserOutput:
    """``into``: where the kernel and call rows go instead of frames of their own (a parser that
    reads output code inside a larger dump: its ``add`` returns the batches to hand out, if any)."""
    kernels, calls = into or (RowBuffer("inductor_kernels", TABLES["inductor_kernels"]),
                              RowBuffer("inductor_extern_calls", TABLES["inductor_extern_calls"]))
    metrics: dict[str, float] = {"kernel.generated": 0, "kernel.extern_calls": 0}
    errors: list[str] = []
    kernel: dict | None = None  # definition whose source is being read
    close = ""  # the triple quote that ends the current kernel source
    aten_ops: list[str] | None = None
    marker = saw_wait = saw_main = cut = False
    any_newline = False
    lineno = 0

    def bump(key: str, n: int = 1) -> None:
        metrics[key] = metrics.get(key, 0) + n

    def finish():
        nonlocal kernel
        k, kernel = kernel, None
        cat = _category(k["name"], k["backend"], k["heuristic"])
        bump("kernel.generated")
        bump(f"kernel.generated.{cat}")
        return kernels.add((k["name"], cat, k["backend"], k["heuristic"], k["aten"], k["n"], k["lineno"]))

    unread = iter(lines)  # one iterator: after a line that raises, the loop goes on from the next
    while True:  # a line that raises costs itself only: the loop goes on after it (no cost per line)
        try:
            for raw in unread:
                lineno += 1
                if raw[-1:] == "\n":
                    any_newline = True
                    line = raw[:-2] if raw[-2:-1] == "\r" else raw[:-1]
                elif any_newline and kernel is None and raw[:1] not in (" ", "\t"):
                    cut = True  # a line cut mid-way is not trusted (kernel source and indented lines are:
                    break  # a cut there gives no row, or the same calls as the start of the whole line)
                else:
                    line = raw.rstrip("\r")
                if kernel is not None:
                    if line.startswith(close):
                        if (b := finish()) is not None:
                            yield b
                    else:
                        kernel["n"] += 1
                        if line[:1] == "@" and (m := _HEURISTIC.match(line)) and kernel["heuristic"] is None:
                            kernel["heuristic"] = m[1]
                    continue
                if not marker:
                    marker = any(line.startswith(mk) for mk in _MARKERS)
                    if not marker and lineno >= MAX_HEAD_LINES:
                        raise ParseError("not an Inductor output_code.py: no Inductor import or AsyncCompile", lineno)
                stripped = line.lstrip()
                if not stripped:
                    continue
                if stripped[0] == "#":
                    if (m := _ORIGIN.match(line)):
                        aten_ops = [p.strip() for p in m[1].split(",") if p.strip()]
                    continue
                if line[0] != " " and (m := _DEF.match(line)):
                    rest = line[m.end():]
                    opened = sorted((i, q) for q in ("'''", '"""') if (i := rest.find(q)) >= 0)
                    quote = opened[0][1] if opened else None
                    backend = BACKEND.get(m[2], m[2])
                    kernel = {"name": m[1], "backend": backend, "heuristic": None, "aten": aten_ops, "n": 0,
                              "lineno": lineno}
                    aten_ops = None
                    if quote is None or rest.count(quote) >= 2:
                        if quote is None:
                            errors.append(line_error(lineno, f"kernel {m[1]} without an inline source"))
                        if (b := finish()) is not None:
                            yield b
                    else:
                        close = quote
                    continue
                if line.startswith("async_compile.wait("):
                    saw_wait = True
                    continue
                if line.startswith("if __name__ == "):
                    saw_main = True
                    continue
                if "extern_kernels." in line:
                    for name in _EXTERN.findall(line):
                        bump("kernel.extern_calls")
                        bump(f"kernel.extern_calls.{name}")
                        if (b := calls.add((f"extern_kernels.{name}", "extern_kernels", lineno))) is not None:
                            yield b
                if "aten." in line:
                    for op, overload in _ATEN.findall(line):
                        callee = f"aten.{op}.{overload}"
                        bump("kernel.fallback_calls")
                        bump(f"kernel.fallback_calls.{callee}")
                        if (b := calls.add((callee, "aten_fallback", lineno))) is not None:
                            yield b
            break
        except RECORD_FAILURES as exc:
            if (why := record_failure(exc)) is None:
                raise
            errors.append(line_error(lineno, f"line {why}; skipped"))

    if lineno == 0:
        raise ParseError("empty input", 1)
    if not marker:
        raise ParseError("not an Inductor output_code.py: no Inductor import or AsyncCompile", 1)
    truncated = cut or kernel is not None or not saw_wait or not saw_main
    if cut:
        errors.append(line_error(lineno, "last line cut mid-way (no newline); dropped"))
    elif kernel is not None:
        errors.append(line_error(lineno, f"input ended inside the source of kernel {kernel['name']} "
                                         f"(defined at line {kernel['lineno']})"))
    elif not saw_wait:
        errors.append(line_error(lineno, "input ended before async_compile.wait(globals())"))
    elif not saw_main:
        errors.append(line_error(lineno, "input ended before the 'if __name__ == \"__main__\":' guard"))
    for rb in (kernels, calls):
        if (b := rb.flush()) is not None:
            yield b
    yield DumpSummary(kind=DumpKind.INDUCTOR_OUTPUT_CODE, stage="output_code", program=None,
                      metrics=metrics, errors=errors, truncated=truncated)
