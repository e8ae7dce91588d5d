"""Statements of hand-formatted XLA HLO text: comments out, a statement split over lines joined.

XLA's lexer (xla/hlo/parser/hlo_lexer.cc) skips whitespace anywhere between tokens and two
kinds of comment, ``//`` to the end of the line and ``/* ... */`` (which may span lines),
neither of them inside a quoted string. So an instruction, a computation header or the
``HloModule`` line may run over several lines, and any line may carry a comment. Dumps that
XLA writes never need this (one statement a line; the only comments are ``/*index=N*/``
inside tuple shapes and operand lists), so ``transforms.parsers.xla_hlo`` reads every line as
printed and comes here only for a line that does not parse that way or visibly continues.

``Statement`` is fed the physical lines of one statement and says when it is complete: no
bracket open and no dangling ``,`` ``=`` ``->`` at its end. Its text has the comments removed
and the lines joined with one space. Strings spanning lines are not HLO: a quote left open
ends at the end of its line.

Guarantees: nothing here raises. A statement holds at most ``MAX_STATEMENT_LINES`` lines and
``MAX_STATEMENT_CHARS`` characters (``overflowed`` says when one did not fit), so an unclosed
bracket costs a bounded buffer, never the rest of a file.
"""

from __future__ import annotations

import re

from transforms.reading import HEAD_BYTES

MAX_STATEMENT_LINES = 100_000
MAX_STATEMENT_CHARS = 16 << 20  # a constant printed whole (--xla_dump_large_constants) stays on one line

# Tokens that matter for joining: strings (skipped whole), comment delimiters, brackets.
_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"?|//|/\*|\*/|[()\[\]{}]')
_CLOSE_COMMENT = re.compile(r"\*/")
_OPENERS, _CLOSERS = frozenset("([{"), frozenset(")]}")
_DANGLING = (",", "=", "->", ":")
# The start of an instruction: [ROOT] name = shape..., a shape being a tuple "(" or "type[".
STARTS_INSTRUCTION = re.compile(r"\s*(?:ROOT\s+)?%?[^\s=,(){}\[\]\"/]+\s*=\s*(?:\(|[a-z][a-z0-9]*\s*\[)")
# A comment quoting HLO: "// CHECK-LABEL: HloModule main", "// CHECK: ENTRY %main".
_QUOTES_HLO = re.compile(r"(?m)^\s*//.*?(?:\bHloModule\s|\bENTRY\s)")
# A computation header: [ENTRY] name [(params) -> shape] {  (comments already removed).
HEADER = re.compile(r"\s*(ENTRY\s+)?%?([^\s(){}=,\"]+)\s*(?:\(.*\)\s*->.*?)?\{\s*$")


class Statement:
    """The comment-free text of one statement, fed line by line."""

    __slots__ = ("depth", "in_comment", "lines", "chars", "overflowed", "pieces")

    def __init__(self, in_comment: bool = False):
        self.pieces: list[str] = []
        self.depth = 0
        self.in_comment = in_comment  # inside a /* ... */ that started on an earlier line
        self.lines = self.chars = 0
        self.overflowed = False

    def feed(self, line: str) -> None:
        self.lines += 1
        self.chars += len(line)
        if self.lines > MAX_STATEMENT_LINES or self.chars > MAX_STATEMENT_CHARS:
            self.overflowed = True
            return
        self.pieces.append(self._strip(line.rstrip("\n")))

    def _strip(self, line: str) -> str:
        out: list[str] = []
        pos = 0
        if self.in_comment:
            m = _CLOSE_COMMENT.search(line)
            if m is None:
                return ""
            self.in_comment, pos = False, m.end()
        start = pos
        for m in _TOKEN.finditer(line, pos):
            tok = m[0]
            if tok == "//":
                out.append(line[start : m.start()])
                return " ".join(out)
            if tok == "/*":
                out.append(line[start : m.start()])
                end = _CLOSE_COMMENT.search(line, m.end())
                if end is None:
                    self.in_comment = True
                    return " ".join(out)
                out.append(self._strip(line[end.end() :]))  # a second comment may follow
                return " ".join(out)
            if tok in _OPENERS:
                self.depth += 1
            elif tok in _CLOSERS:
                self.depth -= 1
        out.append(line[start:])
        return " ".join(out)

    @property
    def text(self) -> str:
        return " ".join(p.strip() for p in self.pieces if p.strip())

    @property
    def complete(self) -> bool:
        """No bracket open, no comment open, and nothing dangling at the end (or nothing at all)."""
        if self.in_comment or self.depth > 0:
            return False
        last = next((p.rstrip() for p in reversed(self.pieces) if p.strip()), "")
        return not last.endswith(_DANGLING)


    @property
    def opens_body(self) -> bool:
        """A computation header: one brace open, at its end."""
        return not self.in_comment and self.depth == 1 and self.text.endswith("{")


def strip_comments(line: str) -> str:
    """One line without its comments (a ``/*`` left open drops the rest of the line)."""
    st = Statement()
    st.feed(line)
    return st.text


def first_statements(head: str, n: int = 2) -> list[str]:
    """The first ``n`` non-empty comment-free lines of ``head`` (comments may span lines)."""
    st = Statement()
    out: list[str] = []
    for line in head.splitlines():
        before = len(st.pieces)
        st.feed(line)
        if st.overflowed:
            break
        text = st.pieces[before].strip() if len(st.pieces) > before else ""
        if text:
            out.append(text)
            if len(out) >= n:
                break
    return out


def looks_like_hlo(head: str) -> bool:
    """Text whose first statement (past comments and blank lines) is an ``HloModule`` header, or a
    computation header followed by an instruction (XLA's parser takes a module without header). Or a
    head that is all comments, fills the whole sniff window (the text goes on past it) and quotes an
    ``HloModule`` line or ``ENTRY`` computation: XLA's FileCheck tests open with ``// CHECK`` lines of
    any length (66 KB in xla/hlo/builder/tests/math_polygamma.hlo) before the module they check."""
    first = first_statements(head)
    if not first:
        return len(head.encode("utf-8", "replace")) >= HEAD_BYTES - 3 and bool(_QUOTES_HLO.search(head))
    if first[0].startswith("HloModule") and first[0][9:10] in (" ", "\t", ""):
        return True
    return len(first) == 2 and bool(HEADER.match(first[0])) and bool(STARTS_INSTRUCTION.match(first[1]))


_SPACE = re.compile(r"\s+")
# A comma between tuple elements: not inside [...] (dimensions) nor {...} (a layout; neither nests).
_TUPLE_COMMA = re.compile(r",(?![^\[\]]*\])(?![^{}]*\})")


def normalize_shape(text: str) -> str:
    """A shape written with spaces anywhere (``f32[8, 8]{1, 0}``, ``( f32[2],s32[] )``) as XLA prints
    it: no spaces inside brackets, ``", "`` between tuple elements."""
    compact = _SPACE.sub("", text)
    if "," not in compact or "(" not in compact:
        return compact
    return _TUPLE_COMMA.sub(", ", compact)
