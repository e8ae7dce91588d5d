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
and the lines joined with one space. A string in an instruction does not span lines (XLA prints
none so): a quote left open there ends at the end of its line. In an ``HloModule`` statement
(``Statement(strings=True)``) one may, as XLA's parser takes it (``origin_recovery_table={...}``
holds modules' text as strings).

``read_instruction`` takes one instruction statement apart as XLA's parser reads it: what it nests
(instructions in its operand list, computations written inline), compact tuple accesses, and a
missing shape; ``needs_reading`` says whether a statement may hold any of that.

Guarantees: nothing here raises but ``read_instruction``, and that only ``NotAnInstruction``, with
the reason (no recursion past ``MAX_NESTING``: thousands of nested brackets are an error, not a crash).
A statement holds at most ``MAX_STATEMENT_LINES`` lines and ``MAX_STATEMENT_CHARS`` characters
(``overflowed`` says when one did not fit), so an unclosed bracket costs a bounded buffer, never the
rest of a file.
"""

from __future__ import annotations

import re

from transforms.reading import HEAD_BYTES

MAX_STATEMENT_LINES = 100_000
MAX_STATEMENT_CHARS = 16 << 20  # a constant printed whole (--xla_dump_large_constants) stays on one line

# Tokens that matter for joining: strings (skipped whole), comment delimiters, brackets.
_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"?|//|/\*|\*/|[()\[\]{}]')
_CLOSE_COMMENT = re.compile(r"\*/")
_CLOSED_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_STRING_REST = re.compile(r'(?:[^"\\]|\\.)*"')  # the rest of a string that began on an earlier line
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

    __slots__ = ("depth", "in_comment", "in_string", "lines", "chars", "overflowed", "pieces", "strings")

    def __init__(self, in_comment: bool = False, strings: bool = False):
        self.pieces: list[str] = []
        self.depth = 0
        self.in_comment = in_comment  # inside a /* ... */ that started on an earlier line
        self.strings = strings  # a string may span lines
        self.in_string = False  # inside a string that started on an earlier line
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
        if self.in_string:
            m = _STRING_REST.match(line)
            if m is None:
                return line  # the string goes on past this line too
            self.in_string = False
            return line[: m.end()] + " " + self._strip(line[m.end() :])
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
            if tok[0] == '"' and self.strings and _CLOSED_STRING.fullmatch(tok) is None:
                self.in_string = True  # not closed on this line
                out.append(line[start:])
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

    def line_starts(self) -> list[tuple[int, int]]:
        """(offset in ``text``, index of the line fed) where the text of each line that gave some begins."""
        out, offset = [], 0
        for k, piece in enumerate(self.pieces):
            if piece := piece.strip():
                out.append((offset, k))
                offset += len(piece) + 1
        return out

    @property
    def complete(self) -> bool:
        """No bracket open, no comment open, and nothing dangling at the end (or nothing at all)."""
        if self.in_comment or self.in_string or self.depth > 0:
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


# A lone instruction's text, XLA's parser's third form (HloParserImpl::ParseSingleInstruction): [name =] shape
# opcode(, a shape being a tuple, a buffer b(...) or type[dims]{layout}.
LONE_INSTRUCTION = re.compile(r"\s*(?:%?[\w.-]+\s*=\s*)?(?:\([^=]*?\)|b\(.*?\)|[a-z][a-z0-9]*\[[^\]]*\](?:\{[^}]*\})?)"
                              r"\s+[a-z][\w.-]*\(")


def looks_like_hlo(head: str) -> bool:
    """Text whose first statement (past comments and blank lines) is an ``HloModule`` header, or a
    computation header followed by an instruction (XLA's parser takes a module without header). Or a
    head that is all comments, fills the whole sniff window (the text goes on past it) and quotes an
    ``HloModule`` line or ``ENTRY`` computation: XLA's FileCheck tests open with ``// CHECK`` lines of
    any length (66 KB in xla/hlo/builder/tests/math_polygamma.hlo) before the module they check."""
    first = first_statements(head)
    if not first:
        return len(head.encode("utf-8", "replace")) >= HEAD_BYTES - 3 and bool(_QUOTES_HLO.search(head))
    if first[0].startswith("HloModule") and first[0][9:10] in (" ", "\t", "") or LONE_INSTRUCTION.match(first[0]):
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


# -- one instruction statement, read as XLA's parser reads it (hlo_parser.cc, ParseInstructionRhs) -------------
#
# The hot path of ``xla_hlo`` reads an instruction as XLA prints it: a name, a shape, an opcode and its
# operands' names. Hand-written text (XLA's own tests) also writes what XLA's parser turns into more
# instructions and computations than the text names: an instruction nested in an operand list
# (``add(f32[10] parameter(0), multiply(a, b))``: XLA adds ``parameter.anon`` and ``multiply.anon``), a
# computation written inline as an attribute (``to_apply={ ... }``: XLA adds a computation named ``_``),
# a compact tuple access (``%p#1#0``: XLA adds a get-tuple-element for each access not made before in the
# computation), and an instruction without its shape (XLA infers it). ``read_instruction`` takes the
# comment-free text of such a statement apart; ``xla_hlo`` makes the rows.

MAX_NESTING = 100  # nested instructions and inline computations within one statement (XLA's own limit is deeper)
_LEX = re.compile(r'\s*(?:("(?:[^"\\]|\\.)*"?)|(->)|([(){}\[\],=:])|([^\s"(){}\[\],=:]+))')
# Attributes whose value names computations (or holds them inline).
COMPUTATION_ATTRS = frozenset({"to_apply", "calls", "condition", "body", "select", "scatter", "true_computation",
                               "false_computation", "branch_computations", "called_computations"})
_PRIMITIVE = re.compile(r"[a-z][a-z0-9]*")


class NotAnInstruction(ValueError):
    """The text is not an instruction as XLA's parser reads it (the message says where)."""


class Instruction:
    """One instruction of a statement. ``shape`` is None when the text leaves it for XLA to infer; ``operands``
    are names (``p#1#0`` kept whole) or nested instructions; ``attributes`` the text after the operand list,
    with each inline computation replaced by the name ``name_body`` gave it; ``bodies`` those computations
    (name, instructions) in the order XLA's parser makes them."""

    __slots__ = ("attributes", "bodies", "is_root", "name", "opcode", "operand_shapes", "operands", "shape", "start")

    def __init__(self, is_root: bool, name: str | None, shape: str | None, opcode: str, start: int = 0):
        self.is_root, self.name, self.shape, self.opcode = is_root, name, shape, opcode
        self.start = start  # where its text begins in the statement
        self.operands: list[str | Instruction] = []  # "" for a shape with no name (a lone instruction's)
        self.operand_shapes: list[str | None] = []  # the shape written before each operand's name
        self.attributes = ""
        self.bodies: list[tuple[str, list[Instruction]]] = []


class _Reader:
    def __init__(self, text: str, name_body):
        self.text, self.name_body = text, name_body
        self.toks: list[tuple[str, int, int]] = []  # (token, start, end)
        pos = 0
        while True:
            m = _LEX.match(text, pos)
            if m is None or m.end() == pos:
                break
            pos = m.end()
            self.toks.append((m[0].lstrip(), m.end() - len(m[0].lstrip()), m.end()))
        if text[pos:].strip():
            raise NotAnInstruction(f"unreadable text at {text[pos:pos + 20]!r}")
        self.i = 0
        self.depth = 0

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.toks[j][0] if j < len(self.toks) else ""

    def take(self, want: str | None = None) -> str:
        tok = self.peek()
        if not tok or (want is not None and tok != want):
            raise NotAnInstruction(f"expected {want or 'more'} but saw {tok or 'the end'!r}")
        self.i += 1
        return tok

    def start(self) -> int:
        return self.toks[self.i][1] if self.i < len(self.toks) else len(self.text)

    def skip_balanced(self) -> None:
        """One token, or a bracketed group whole."""
        tok, depth = self.take(), 0
        if tok not in "([{":
            return
        depth = 1
        while depth:
            tok = self.take()
            if tok in ("(", "[", "{"):
                depth += 1
            elif tok in (")", "]", "}"):
                depth -= 1

    def can_be_shape(self) -> bool:
        tok, nxt = self.peek(), self.peek(1)
        return tok == "(" or nxt == "[" and bool(_PRIMITIVE.fullmatch(tok)) or tok == "b" and nxt == "("

    def shape(self) -> str:
        first = self.start()
        if self.peek() == "b":  # a buffer shape: b(f32[2,4])
            self.take()
            self.skip_balanced()
        elif self.peek() == "(":
            self.skip_balanced()
        else:
            self.take()
            self.skip_balanced()  # [dims]
            if self.peek() == "{":
                self.skip_balanced()  # layout
        return normalize_shape(self.text[first : self.toks[self.i - 1][2]])

    def instruction(self, named: bool, attributes: bool | None = None) -> Instruction:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise NotAnInstruction(f"nested more than {MAX_NESTING} deep")
        is_root, name, start = False, None, self.start()
        if named:
            if self.peek() == "ROOT":
                self.take()
                is_root = True
            name = self.take().lstrip("%")
            self.take("=")
        shape = self.shape() if self.can_be_shape() else None
        opcode = self.take()
        if not OPCODE_WORD.fullmatch(opcode) or self.peek() != "(":
            raise NotAnInstruction(f"expected an opcode and its operands but saw {opcode!r}")
        ins = Instruction(is_root, name, shape, opcode, start)
        if opcode in _LITERAL_OPERANDS:  # constant({1, 2}), parameter(0): no operand names
            first = self.start()
            self.skip_balanced()
            ins.operands.append(self.text[first + 1 : self.toks[self.i - 1][1]].strip())
            ins.operand_shapes.append(None)
            if named if attributes is None else attributes:
                self.attributes(ins)
            self.depth -= 1
            return ins
        self.take("(")
        if self.peek() != ")":
            while True:
                operand, shape = self.operand()
                ins.operands.append(operand)
                ins.operand_shapes.append(shape)
                if self.peek() != ",":
                    break
                self.take()
        self.take(")")
        if named if attributes is None else attributes:
            self.attributes(ins)
        self.depth -= 1
        return ins

    def operand(self) -> tuple[str | Instruction, str | None]:
        mark, shape = self.i, None
        if self.can_be_shape():
            shape = self.shape()
        tok = self.peek()
        if tok and tok not in "(){}[],=:" and self.peek(1) in (",", ")"):
            self.take()
            return tok.lstrip("%"), shape
        if shape is not None and tok in (",", ")"):  # a shape alone: a lone instruction's parameter
            return "", shape
        self.i = mark  # a nested instruction: no name, no attributes
        return self.instruction(named=False), None

    def attributes(self, ins: Instruction) -> None:
        pieces, last = [], self.start()
        while self.peek() == ",":
            self.take()
            attr = self.take()
            if self.peek() == "=":
                self.take()
            if attr in COMPUTATION_ATTRS and self.peek() == "{":
                if self.body_starts(1):
                    pieces.append(self.text[last : self.start()].rstrip())  # "calls=" then the name
                    pieces.append(self.inline(ins))
                    last = self.start()
                    continue
                self.take("{")
                while self.peek() not in ("}", ""):
                    if self.peek() == "{" and self.body_starts(1):
                        pieces.append(self.text[last : self.start()].rstrip())
                        pieces.append(self.inline(ins))
                        last = self.start()
                    elif self.peek() == "," or self.peek(1) in (",", "}"):  # computation names
                        self.take()
                    else:
                        raise NotAnInstruction(f"{attr}: expected computation names or instructions but saw "
                                               f"{self.peek()!r}")
                self.take("}")
                continue
            while self.peek() not in (",", ""):
                if self.peek() in (")", "]", "}") or self.body_starts(0):
                    break  # the end of an inline computation, or the next instruction in it
                self.skip_balanced()
            if self.peek() in (")", "]") :
                raise NotAnInstruction(f"unbalanced {self.peek()!r} after attribute {attr}")
            if self.body_starts(0) or self.peek() == "}":
                break
        pieces.append(self.text[last : self.start()])
        ins.attributes = "".join(pieces)

    def body_starts(self, k: int) -> bool:
        """An instruction starts ``k`` tokens on: [ROOT] name =."""
        if self.peek(k) == "ROOT":
            k += 1
        tok = self.peek(k)
        return bool(tok) and tok not in "(){}[],=:" and self.peek(k + 1) == "="

    def inline(self, ins: Instruction) -> str:
        """An inline computation ``{ instruction ... }``: its instructions, and the name it goes by."""
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise NotAnInstruction(f"nested more than {MAX_NESTING} deep")
        self.take("{")
        body = []
        while self.peek() != "}":
            if not self.peek():
                raise NotAnInstruction("inline computation not closed")
            body.append(self.instruction(named=True))
        self.take("}")
        self.depth -= 1
        name = self.name_body()
        ins.bodies.append((name, body))
        return name


OPCODE_WORD = re.compile(r"[a-z][\w.-]*")
_LITERAL_OPERANDS = frozenset({"constant", "parameter"})
# What only a statement to read whole (``read_instruction``) holds, in the text after "opcode(": a compact tuple
# access (#), a nested instruction ("(" or "," then [shape] opcode "(", or a tuple shape then opcode "("), or
# a computation written inline ("={" then an instruction). A string that looks so costs a read, nothing else.
_COMPUTATION_ATTR = r"(?<![\w-])(?:to_apply|calls|condition|body|select|scatter|true_computation|false_computation|" \
                    r"branch_computations|called_computations)\s*=\s*"
# "to_apply={ a = ...", "branch_computations={{ ROOT b = ...": a computation written inline
BODY = re.compile(r"\{\s*(?:\{\s*)?(?:ROOT\s|%?[\w.-]+\s*=)")  # the value of such an attribute, written inline
INLINE = re.compile(_COMPUTATION_ATTR + BODY.pattern)
# The text of a statement so far, when a computation written inline opens at the end of its line.
OPENS_INLINE = re.compile(_COMPUTATION_ATTR + r"(?:\{\s*)?\{$|\}\s*,\s*\{$")
_NESTS = re.compile(r"#|[(,]\s*(?:[a-z][a-z0-9]*\[[^\]]*\](?:\{[^}]*\})?\s+)?%?[a-z][\w.-]*\s*\(|"
                    r"\)\s+[a-z][\w.-]*\s*\(")  # in an operand list
_PARENS = re.compile(r"[()]")
_OPCODE_PAREN = re.compile(r"[a-z][\w.-]*\(")


def needs_reading(rest: str) -> bool:
    """Whether the instruction whose text after "opcode(" is ``rest`` may nest what ``read_instruction`` finds:
    in its operand list, a compact tuple access (#) or a nested instruction ("(" or "," then [shape] opcode
    "(", or a tuple shape then opcode "("); after it, a computation written inline. (A string that looks so
    costs a read, nothing else.)"""
    if (p := rest.find("metadata={")) >= 0:
        rest = rest[:p]
    if "#" not in rest and _OPCODE_PAREN.search(rest) is None and not any(a in rest for a in _COMPUTATION_WORDS):
        return False  # no "#", no "opcode(", no attribute naming a computation: the common case, decided in C
    depth, end = 1, len(rest)
    for m in _PARENS.finditer(rest):  # the operand list ends at the ")" that closes "opcode(" (no string in it)
        depth += 1 if m[0] == "(" else -1
        if not depth:
            end = m.start()
            break
    operands = rest[:end]
    if "#" in operands or "(" in operands and _NESTS.search("(" + operands) is not None:  # no "(": nothing nested
        return True
    tail = rest[end:]
    return any(attr in tail for attr in _COMPUTATION_WORDS) and INLINE.search(tail) is not None


_COMPUTATION_WORDS = ("to_apply", "calls", "condition", "body", "select", "scatter", "computation")


def read_instruction(text: str, name_body) -> Instruction:
    """The instruction statement ``text`` (comments removed), with what it nests; ``name_body()`` names each
    inline computation. Raises ``NotAnInstruction`` (never anything else) when XLA's parser would not read it
    as one instruction. A lone instruction (the whole text) may have no name: ``f32[10] add(...), ...``."""
    try:
        reader = _Reader(text, name_body)
        unnamed = reader.can_be_shape()
        ins = reader.instruction(named=not unnamed, attributes=True)
    except IndexError as e:  # pragma: no cover - a token past the end is reported as NotAnInstruction
        raise NotAnInstruction(str(e)) from None
    if reader.peek():
        raise NotAnInstruction(f"text after the instruction: {text[reader.start():reader.start() + 40]!r}")
    return ins
