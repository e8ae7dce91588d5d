"""JSON from outside decoded with its nesting bounded first: ``loads(raw, max_depth)``.

``json.loads`` recurses once a level, so text nested thousands deep runs it into the interpreter's recursion
limit; it raises RecursionError there (a RuntimeError, which callers that catch ValueError for "not JSON" do
not catch), and any finalizer the garbage collector runs meanwhile fails too. The depth is counted first,
in linear time: JSON strings and every byte that is not a bracket dropped by two regexes, then one pass over
the brackets. Text nested deeper than ``max_depth`` raises ``TooDeep`` (a ValueError) without being decoded.
"""

from __future__ import annotations

import json
import re

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_A_BRACKET = re.compile(rb"[^\[\]{}]+")


class TooDeep(ValueError):
    """The text nests its brackets deeper than the caller reads."""


def nesting(raw: bytes | str, most: int) -> int:
    """How deep ``raw``'s brackets outside strings nest, counted up to ``most + 1`` (then it stops)."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    depth = deepest = 0
    for byte in _NOT_A_BRACKET.sub(b"", _STRING.sub(b"", data)):
        depth += 1 if byte in b"[{" else -1
        if depth > deepest:
            deepest = depth
            if deepest > most:
                break
    return deepest


def loads(raw: bytes | str, max_depth: int) -> object:
    """``json.loads(raw)`` once ``raw`` nests at most ``max_depth`` levels; else ``TooDeep``."""
    if nesting(raw, max_depth) > max_depth:
        raise TooDeep(f"nested too deeply to read (over {max_depth} levels)")
    return json.loads(raw)
