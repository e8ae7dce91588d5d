"""Values that change from process to process, replaced by what stays: one function for every comparison and page.

The same program compiled by another process writes other numbers where the compiler prints
what only that process knows: an object's ``id()`` in Dynamo's guards
(``___check_obj_id(act.__code__, 140401549376800)``), a memory address (``<function f at
0x7f3a...>``), a pid or thread id, a temporary folder, and the absolute prefix of every source
file (a runner's checkout, a site-packages). Compared verbatim, every recompile reason holding
one "appears" and "vanishes" every night. ``normalise`` replaces them, and nothing else:

- ids: ``___check_obj_id(X, <id>)``, ``___check_type_id(X, <id>)``, ids Dynamo puts in generated
  names (``___check_metadata_<id>_c0``, ``__dtensor_spec_<id>``) and ``id=<id>``;
- addresses: ``0x<addr>`` (8 hex digits or more: a pointer, not a constant);
- pids and thread ids after their word: ``pid <pid>``, ``pid_<pid>``, ``thread id <tid>``, ``tid=<tid>``;
- a file path (folders, then a file name with a source, library or dump extension) keeps what identifies the file: from its package on when it has one
  (``/home/ci/pytorch/torch/_dynamo/external_utils.py`` and ``.../site-packages/torch/_dynamo/external_utils.py``
  → ``torch/_dynamo/external_utils.py``: after the last ``site-packages``/``dist-packages``, else
  from the first folder named as a compiler package, ``PACKAGES``), else its file name
  (``/tmp/ci-checkout-8tesylh3/model.py`` → ``model.py``; also the tails torch prints of paths it
  shortens, ``mp/ci-checkout-8tesylh3/model.py:18``). A URL is no path;
- random names: Python's temporary files and folders (``tmp`` and 8 characters: ``tmp<tmp>``) and the
  random part of a TORCH_TRACE log's name (``dedicated_log_torch_trace_rank_0_<random>.log``).

``normalise_text`` is the same function for a long text read once (not cached); ``normalised(expr)`` the same
function on a polars column (each distinct value once).
Pure; idempotent (``normalise(normalise(t)) == normalise(t)``).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

import polars as pl

# Folders that start what identifies a file of a compiler package, wherever it is installed or checked out.
PACKAGES = frozenset({"torch", "torchgen", "functorch", "triton", "jax", "jaxlib", "onnx", "onnxscript",
                      "onnxruntime", "onnx_ir"})
_INSTALL_ROOTS = ("site-packages", "dist-packages")

# A path: folders then a file name with an extension (POSIX or Windows separators), starting at a
# token boundary: not inside a URL or a longer name (``https://host/a/b.html`` is left alone).
_EXTENSIONS = ("py|pyi|pyx|pyc|c|cc|cpp|cxx|h|hpp|cu|cuh|so|dylib|dll|o|txt|log|md|json|yaml|yml|onnx|pt|pth|pb|pbtxt"
               "|mlir|hlo|ll|ptx|cubin")
_PATH = re.compile(r"(?<![\w.:/\\~+@-])(?:[A-Za-z]:)?[/\\]?(?:[\w.~+@-]+[/\\])+[\w.+@-]*\.(?:" + _EXTENSIONS
                   + r")(?![\w/\\])")
# Each rule with what any text it matches holds: substrings, or a pattern with a fixed start (found in C at ~1 GB/s),
# of the lowered text for the rules that ignore case. A rule's scan runs only over a text that holds it: the scans
# start at every word boundary (~20-40 MB/s each). An artifact's text (kilobytes of a graph or output code) holds two
# or three of them; "__" (__init__), "tmp" (Inductor's tmp0) and "thread" (num_threads) are in most, which is why
# those rules' tests are what their matches hold past them (six digits after an "_", a digit after the separators).
_RULES: tuple[tuple[re.Pattern[str], Any, tuple[str, ...] | re.Pattern[str], bool], ...] = (
    (re.compile(r"(\b_{2,3}check_(?:obj|type)_id\((?:[^()]|\([^()]*\))*?, )\d+\)"), r"\1<id>)", ("_id(",), False),
    (re.compile(r"(\b_{2,3}[A-Za-z][A-Za-z_]*?_)\d{6,}(?=_|\b)"), r"\1<id>", re.compile(r"_\d{6}"), False),
    (re.compile(r"\b(id\s*[=:]\s*)(?:0x[0-9a-fA-F]+|\d{6,})\b"), r"\1<id>", re.compile(r"id\s*[=:]"), False),
    (re.compile(r"\b0x[0-9a-fA-F]{8,}\b"), "0x<addr>", ("0x",), False),
    (re.compile(r"(\bpid[\s_=:#-]*)\d+\b", re.IGNORECASE), r"\1<pid>", re.compile(r"pid[\s_=:#-]*\d"), True),
    (re.compile(r"(\b(?:thread(?:[\s_-]?id)?|tid)[\s_=:#-]*)\d+\b", re.IGNORECASE), r"\1<tid>",
     re.compile(r"(?:thread(?:[\s_-]?id)?|tid)[\s_=:#-]*\d"), True),
    (re.compile(r"\btmp[a-z0-9_]{8}\b"), "tmp<tmp>", re.compile(r"tmp[a-z0-9_]{8}"), False),
    (re.compile(r"\b(dedicated_log_torch_trace_(?:rank_\d+_?)?)([\w-]*?)(\.log)\b"),
     lambda m: m[1] + ("<random>" if m[2] else "") + m[3], ("dedicated_log_torch_trace_",), False),
)
_DOTTED_I = {0x130: "i", 0x131: "i"}
# Where a path ends (the separator before its file name, which _PATH's match ends with), found in C; and the run
# of the characters a path is made of, which are those its lookbehind refuses before it: a path starts where a run does.
_PATH_END = re.compile(r"[/\\][\w.+@-]*\.(?:" + _EXTENSIONS + r")(?![\w/\\])")
_PATH_RUN = re.compile(r"[\w.:/\\~+@-]*")


@lru_cache(maxsize=65536)
def normalise(text: str) -> str:
    """``text`` with its process-specific values replaced (the rules are in the module docstring)."""
    return _rules(_paths(text))


def normalise_text(text: str) -> str:
    """``normalise`` of a long text read once (an artifact's payload, kilobytes): not kept in
    ``normalise``'s cache, whose entries are names and reasons read again and again."""
    return _rules(_paths(text))


def _paths(text: str) -> str:
    """The path rule: ``_PATH`` over each run of path characters that holds a path's end, the rest
    untouched. The same as over the whole text, as a match starts where a run does and ends inside
    it (its characters are the run's), in a fifth of the time: the scan for the end runs in C."""
    parts, done = [], 0
    for end in _PATH_END.finditer(text):
        if end.start() < done:  # in the run just read
            continue
        start = end.start() - _PATH_RUN.match(text[done:end.start()][::-1]).end()
        stop = _PATH_RUN.match(text, end.end()).end()
        parts += (text[done:start], _PATH.sub(_short_path, text[start:stop]))
        done = stop
    return "".join(parts) + text[done:] if parts else text


def _short_path(m: re.Match[str]) -> str:
    return _short(m[0])


@lru_cache(maxsize=4096)
def _short(path: str) -> str:
    parts = [p for p in path.replace("\\", "/").split("/") if p]
    roots = [i for i, p in enumerate(parts) if p in _INSTALL_ROOTS]
    if roots and roots[-1] < len(parts) - 1:
        return "/".join(parts[roots[-1] + 1:])
    for i, p in enumerate(parts[:-1]):
        if p in PACKAGES:
            return "/".join(parts[i:])
    return parts[-1]


def _rules(text: str) -> str:
    lowered = None  # the text as the rules that ignore case read it, made once until a rule changes the text
    for pattern, replacement, needs, ignore_case in _RULES:
        seen = text
        if ignore_case:
            if lowered is None:  # as IGNORECASE reads it: "İ" and "ı" are an "i" to it
                lowered = text.translate(_DOTTED_I).lower()
            seen = lowered
        if needs.search(seen) if isinstance(needs, re.Pattern) else any(n in seen for n in needs):
            text, changed = pattern.subn(replacement, text)
            if changed:
                lowered = None
    return text


def normalised(expr: pl.Expr) -> pl.Expr:
    """``normalise`` of each value of a String column (nulls stay null)."""
    return expr.map_batches(_normalise_series, return_dtype=pl.String)


def _normalise_series(values: pl.Series) -> pl.Series:
    distinct = values.unique().drop_nulls()
    return values.replace_strict(distinct, [normalise(v) for v in distinct.to_list()], default=None,
                                 return_dtype=pl.String)
