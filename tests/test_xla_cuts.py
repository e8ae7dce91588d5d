"""A cut XLA text dump is never ``ok`` with other figures (issue 27, item 6).

A buffer assignment or memory usage report cut between two lines used to parse ``ok`` with
smaller figures (a report's allocations 38 -> 1): a false improvement one night, a false
regression the next. Every real XLA text dump here (tests/fixtures, data/sample_bucket,
tests/incident_buckets, data/corpus) is cut at line boundaries (every one in small dumps, the
structure lines and an even sample in big ones) and, for small ones, at any byte, and parsed
through the driver as the night does. Each cut is ``partial``/``failed`` with errors naming the
file, or ``ok`` with exactly the whole dump's figures (metrics and every table row): the cut
dropped only trailing blank lines or comments.

Some cuts no text can show (an allocation listing cut after what its output needs, used
values cut after a computation whose users are all listed): the other files of the same
compile tell those (``transforms.xla_siblings``), so a cut that reads ``ok`` with other
figures must be told by its whole siblings here, as the nightly tells it. (A newer memory
report tells its own: XLA ends it with the empty lines that close its last block and memory
space.) ``_untellable`` names the cuts that remain and why: a file with no sibling here that
states what it lacks, a combined file of older XLA cut after its allocations, and hand-made
HLO (computations without HloModule line or ENTRY, a module without ENTRY cut between
computations, concatenated modules). Then each sibling of the sample compiles is cut at every
line and judged with the others whole, and the tests at the end pin the exact reason given for one
cut of each check, the issue's own example among them. Last, each real buffer assignment and
memory report is cut at every line end and inside every line with no sibling (issue 43): the
cuts a file alone cannot show are listed per file, each at a place its format leaves open.
"""

from __future__ import annotations

import copy
import enum
import gzip
import hashlib
import io
import re
from array import array
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import FIXTURES
from transforms.parse import kind_of, parse_dump
from transforms.parsers import xla_buffers, xla_memory_report
from transforms.records import DumpKind, RowBuffer, Status
from transforms.xla_siblings import SiblingDump, compile_of, short_dumps

ROOT = Path(__file__).resolve().parents[1]
SOURCES = (FIXTURES, ROOT / "data" / "sample_bucket", ROOT / "tests" / "incident_buckets", ROOT / "data" / "corpus")
XLA = (DumpKind.XLA_HLO, DumpKind.XLA_BUFFER_ASSIGNMENT, DumpKind.XLA_MEMORY_USAGE_REPORT)
ALL_LINES = 120  # fixtures and corpus dumps up to this many lines are cut after every line
SAMPLE = 20  # bigger ones: this many line ends, half at structure lines, half evenly spaced, and the tail,
NIGHTLY = 10  # the sample and incident buckets' (the same few programs night after night): this many
BUDGET = 3 << 20  # fewer when the cuts would parse more than this many bytes (the corpus' 10 MB modules)


def _xla_dumps() -> dict[str, tuple[DumpKind, bytes]]:
    """Every XLA text dump, decompressed, by its path under its source (each content once; a damaged
    .gz of the incident buckets is left out: tests/test_bad_input.py cuts gzip streams)."""
    out: dict[str, tuple[DumpKind, bytes]] = {}
    seen: set[str] = set()
    for root in SOURCES:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            data = path.read_bytes()
            if data[:2] == b"\x1f\x8b":
                try:
                    data = gzip.decompress(data)
                except (EOFError, OSError):
                    continue
            name = f"{root.name}/{path.relative_to(root)}".removesuffix(".gz")
            digest = hashlib.sha256(data).hexdigest()
            kind = kind_of(name, data[:65536].decode(errors="replace"))
            if kind in XLA and digest not in seen:
                seen.add(digest)
                out[name] = (kind, data)
    return out


DUMPS = _xla_dumps()


def _parse(data: bytes, name: str):
    return parse_dump(io.BytesIO(data), name)


_WHOLE: dict[str, object] = {}


def _whole(name: str):
    if name not in _WHOLE:
        _WHOLE[name] = _parse(DUMPS[name][1], name)
    return _WHOLE[name]


def _same_figures(a, b) -> bool:
    return (a.summary.metrics == b.summary.metrics and sorted(a.tables) == sorted(b.tables)
            and all(a.tables[t].equals(b.tables[t]) for t in a.tables))


def _line_cuts(name: str, data: bytes) -> list[int]:
    ends = [i + 1 for i, b in enumerate(data) if b == 0x0A][:-1]
    nightly = name.startswith(("sample_bucket/", "incident_buckets/"))
    if len(ends) <= ALL_LINES and not nightly:
        return ends
    lines = data.split(b"\n")
    n = max(4, min(NIGHTLY if nightly else SAMPLE, BUDGET * 2 // len(data))) // 2
    # Structure lines (not indented: headers, section titles, blank lines) are where sections start
    # and end: spread a sample of the cuts before them, an even sample of all, and the last lines.
    structure = [ends[i - 1] for i in range(1, len(ends)) if lines[i][:1] not in (b" ", b"\t")]
    picked = set(structure[:: max(1, len(structure) // n)]) | set(ends[:: max(1, len(ends) // n)])
    return sorted(picked | set(ends[-3:]))


# --- the files of one compile ---------------------------------------------------------------


def _compile(name: str) -> tuple[str, str] | None:
    """The compile a side file belongs to; the fixtures keep each format in its own folder, so
    one compile's files there are ``fixtures/<format>/<case>/`` of one case."""
    key = compile_of(name)
    if key is not None and name.startswith("fixtures/xla_"):
        return "fixtures/" + key[0].rsplit("/", 1)[-1], key[1]
    return key


COMPILES: dict[tuple[str, str], list[str]] = {}
for _name in sorted(DUMPS):
    if (_key := _compile(_name)) is not None:
        COMPILES.setdefault(_key, []).append(_name)


def _siblings(name: str) -> list[str]:
    return [n for n in COMPILES.get(_compile(name), []) if n != name]  # type: ignore[arg-type]


def _as_sibling(name: str, summary) -> SiblingDump:
    """The summary as the nightly hands it to the check, under a path in its compile's folder."""
    where, _ = _compile(name)  # type: ignore[misc]
    return SiblingDump(f"{where}/{name.rsplit('/', 1)[-1]}", str(summary.kind), summary.stage, str(summary.status),
                       dict(summary.metrics))


def _told(name: str, summary) -> str | None:
    """What the whole siblings of ``name`` say of this summary of it (None: nothing); they are
    never the ones told."""
    if _compile(name) is None:
        return None
    others = [_as_sibling(n, _whole(n).summary) for n in _siblings(name)]
    me = _as_sibling(name, summary)
    told = short_dumps([*others, me])
    assert set(told) <= {me.path}, told
    return told.get(me.path)


def _whole_sibling(name: str, *, stage: str | None = None, kind: DumpKind | None = None) -> bool:
    """Whether a sibling of ``name`` of this stage or kind parses ok whole here."""
    return any(_whole(n).summary.status is Status.OK and (stage is None or _whole(n).summary.stage == stage)
               and (kind is None or _whole(n).summary.kind is kind) for n in _siblings(name))


# --- the cuts no text can show --------------------------------------------------------------

_USED_HEAD = re.compile(rb"^<\d+ ")


def _last_line(kept: bytes) -> bytes:
    """The last line that is neither blank nor a ``//`` comment (HLO text may hold comments)."""
    return next((line for line in reversed(kept.split(b"\n")) if line.strip() and not line.lstrip().startswith(b"//")),
                b"")


def _users_all_listed(kept: bytes) -> bool:
    """Whether every user the kept used values name has a value at its output (top-level position)."""
    positioned, users, part = set(), set(), b""
    for line in kept.split(b"Used values:", 1)[1].split(b"\n"):
        if line in (b" positions:", b" uses:"):
            part = line
        elif _USED_HEAD.match(line) or line.startswith(b" from"):
            part = b""
        elif line.startswith(b"  ") and part and line.strip() != b"(none)":
            item = line.strip()
            if part == b" uses:":
                users.add(item.split(b",")[0])
            elif item.partition(b" ")[2] in (b"", b"{}"):
                positioned.add(item.partition(b" ")[0])
    return users <= positioned


def _untellable(kind: DumpKind, name: str, kept: bytes, whole: bytes) -> str | None:
    """Why a cut that parses ``ok`` with other figures, and that its whole siblings here do not
    tell (``_told``), cannot be told from a smaller whole dump, or None. Each reason is a rule of
    the format: nothing in the text, nor in a sibling here, says more follows."""
    last = _last_line(kept)
    if kind_of(name, kept[:65536].decode(errors="replace")) is DumpKind.UNKNOWN:
        return "only comments are left, and the name is not one XLA gives: the driver records an unknown file"
    if kind is DumpKind.XLA_HLO:
        if b"ENTRY" not in whole and b"HloModule" not in whole:
            return "hand-written computations without HloModule line or ENTRY: XLA takes the last as entry"
        if b"ENTRY" not in whole and last.strip() == b"}":
            return ("a cut between the computations of a hand-written module without ENTRY: XLA takes the last "
                    "computation as entry, so the shorter text is a whole module to XLA's parser too")
        if whole.count(b"\nHloModule") > 1 and last.strip() == b"}":
            return "a cut between the modules of a hand-made concatenation (XLA writes one module a file)"
    if kind is DumpKind.XLA_BUFFER_ASSIGNMENT:
        if b"Used values:" not in kept and (last.startswith(b" value: ") or last.startswith(b"  ")):
            if not (_whole_sibling(name, stage="values")
                    or _whole_sibling(name, kind=DumpKind.XLA_MEMORY_USAGE_REPORT)):
                return ("a cut between allocations (or values) of an allocation listing past what its output needs, "
                        "and no values file or memory report of its compile here states the total")
            if b"Used values:" in whole:
                return ("a combined file (older XLA: total, used values and live ranges follow the allocations) cut "
                        "in or right after its last allocation's values: its report names every allocation and "
                        "counts no used values (nor values, when it hides slots)")
        if b"Used values:" in kept and last.startswith(b" from instruction:") and _users_all_listed(kept) \
                and b"BufferAssignment:" not in kept and not _whole_sibling(name, stage="buffer_assignment"):
            return ("a cut between used values whose users are all listed, and no allocation listing of its "
                    "compile here (it states their count)")
    if kind is DumpKind.XLA_MEMORY_USAGE_REPORT and b"Memory Space:" in kept and kept.endswith((last, last + b"\n")) \
            and not _whole_sibling(name, stage="buffer_assignment"):
        if re.match(rb"^\s+\S+\(100%\);", last) or b"The rest" in last:
            return ("a cut right after a block's last row (how the report reads with its final empty lines trimmed) "
                    "that drops less than the rounding of the sizes printed, or follows a block that hides slots, "
                    "and no allocation listing of its compile here")
    return None


def _check(name: str, cut: int) -> str | None:
    """Parse the first ``cut`` bytes; assert the verdict is honest. Returns the untellable reason, if any."""
    kind, data = DUMPS[name]
    parsed = _parse(data[:cut], name)
    s = parsed.summary
    where = (name, cut, data[:cut].count(b"\n"), s.status, s.errors[:2])
    if s.status is not Status.OK:
        assert s.errors and all(e.startswith(f"{name}: ") for e in s.errors), where
        return None
    whole = _whole(name)
    if whole.status is Status.OK and _same_figures(parsed, whole):
        return None
    if _told(name, s) is not None:
        return None
    reason = _untellable(kind, name, data[:cut], data)
    assert reason is not None, ("ok with other figures", where, _last_line(data[:cut])[:100])
    return reason


@pytest.mark.parametrize("name", sorted(DUMPS), ids=lambda n: n.replace(".cpu_after_optimizations", ".cpu"))
def test_every_line_cut_is_partial_or_the_whole_figures(name):
    for cut in _line_cuts(name, DUMPS[name][1]):
        _check(name, cut)


SMALL = sorted(n for n, (_, d) in DUMPS.items() if n.startswith("fixtures/") and len(d) < 8192)


@settings(max_examples=250, deadline=None)
@given(name=st.sampled_from(SMALL), fraction=st.floats(0, 1))
def test_any_byte_cut_of_a_small_dump_is_partial_or_the_whole_figures(name, fraction):
    data = DUMPS[name][1]
    _check(name, max(1, int(len(data) * fraction)))


def test_every_kind_and_layout_is_cut_here():
    kinds = {k for k, _ in DUMPS.values()}
    assert kinds == set(XLA)
    texts = [d for _, d in DUMPS.values()]
    assert any(b"Memory Space:" in d for d in texts) and any(d.startswith(b"Total bytes used") for d in texts)
    assert any(d.startswith(b"\nTotal bytes used") for d in texts)  # values side file
    assert any(d.startswith(b"HloLiveRange") for d in texts)  # live-range side file
    assert any(d.startswith(b"BufferAssignment:") and b"Used values:" in d for d in texts)  # combined


# --- the exact reason, one cut per check ----------------------------------------------------

SAMPLE_NIGHT = "sample_bucket/2026-11-20/jax-jit/module_0000.jit_train_step.cpu_after_optimizations"
OLD_JAX = "corpus/xla_buffers/jaxlib-0.7.2.module_0011.jit_f.cpu_after_optimizations"
MLP_VALUES = "fixtures/xla_buffer_assignment/mlp/module_0010.jit_f.cpu_after_optimizations-buffer-assignment-values.txt"
MLP_LIVE = "fixtures/xla_buffer_assignment/mlp/module_0010.jit_f.cpu_after_optimizations-live-range.txt"
MLP_REPORT = "fixtures/xla_memory_usage_report/mlp/module_0010.jit_f.cpu_after_optimizations-memory-usage-report.txt"
MLP_HLO = "fixtures/xla_hlo/module_0000.jit_mlp.cpu_after_optimizations.txt"


def _cut_before(name: str, line: bytes, keep: int = 0) -> tuple[bytes, int]:
    """The dump up to the first line starting with ``line`` (plus ``keep`` lines of it), and the number
    of the last line kept."""
    lines = DUMPS[name][1].split(b"\n")
    i = next(i for i, text in enumerate(lines) if text.startswith(line)) + keep
    return b"\n".join(lines[:i]) + b"\n", i


def _verdict(name: str, line: bytes, keep: int = 0) -> tuple[Status, list[str]]:
    text, _ = _cut_before(name, line, keep)
    s = _parse(text, name).summary
    return s.status, s.errors


@pytest.mark.parametrize(("name", "line", "keep", "reason"), [
    pytest.param(f"{SAMPLE_NIGHT}-buffer-assignment.txt", b"allocation 9:", 0,
                 "line 35: input ended before the allocation of the program's output (the one XLA prints "
                 "'output shape is' on); the listing stops after allocation 8", id="output allocation"),
    pytest.param(f"{SAMPLE_NIGHT}-buffer-assignment.txt", b"allocation 10:", 0,
                 "line 37: input ended before the live-out allocations of the output's f32[8], f32[] (every array "
                 "of the output tuple has one); the listing stops after allocation 9", id="live-out arrays"),
    pytest.param(f"{OLD_JAX}-buffer-assignment.txt", b" value: <28 reduce-window", 0,
                 "line 39: input ended inside allocation 17's values: they reach byte 18432 of its 18448 (XLA sizes "
                 "it by its values)", id="values short of their allocation"),
    pytest.param(f"{OLD_JAX}-buffer-assignment.txt", b"HloLiveRange", 0,
                 "line 172: input ended after the used values, before the HloLiveRange listing XLA writes next",
                 id="combined file without live ranges"),
    pytest.param(MLP_VALUES, b"<38 tuple.1{}", 0,
                 "line 116: input ended after 18 used values: 1 instruction(s) they list as users have no value "
                 "listed at their output (e.g. tuple.1)", id="values listing"),
    pytest.param(MLP_LIVE, b"    w2.1{}: 8192", 0,
                 "line 32: input ended early: the peak lists 2 of the 8 values live at time 8", id="live ranges"),
    pytest.param(MLP_REPORT, b"Total bytes:", 0,
                 "line 1: input ended after the header of memory space default, before its 'Total bytes' line",
                 id="memory space without total"),
    pytest.param(MLP_REPORT, b"  cumulative_size;", 17,  # after the 4th block (8.0KiB): 692 bytes short
                 "line 19: input ended after 4 allocation blocks of memory space default: they hold at most 67800 "
                 "of its 68276 total bytes", id="memory report blocks short of the total"),
    pytest.param(f"{SAMPLE_NIGHT}-memory-usage-report.txt", b"  cumulative_size;", 51,  # issue 43: cut after line 53 of 166
                 "line 53: input ended after 10 allocation blocks of memory space default and the empty line that "
                 "closes the last, before the empty line XLA ends a memory space with: more blocks may follow",
                 id="memory report between blocks"),
    pytest.param(f"{OLD_JAX}-memory-usage-report.txt", b"allocation 15: size 4B", 0,
                 "line 50: input ended after 16 of the 18 allocations its summary lists", id="older memory report"),
    pytest.param(MLP_HLO, b"ENTRY", 0,
                 "line 103: input ended before module jit_mlp had its ENTRY computation", id="hlo"),
])
def test_the_reason_names_what_is_missing(name, line, keep, reason):
    status, errors = _verdict(name, line, keep)
    assert (status, errors) == (Status.PARTIAL, [f"{name}: {reason}"])


def test_a_listing_cut_before_its_temp_arena():
    """The issue's own example: the split listing cut before its temp arena states nothing more and
    reads ok by itself (temp 0 B); its values file's 'Total bytes used' tells it."""
    name = f"{SAMPLE_NIGHT}-buffer-assignment.txt"
    assert b"allocation 37: size 131584, preallocated-temp:" in DUMPS[name][1]
    text, _ = _cut_before(name, b"allocation 37:")
    s = _parse(text, name).summary
    assert (s.status, s.metrics["memory.temp_bytes"]) == (Status.OK, 0)  # what the text alone can tell
    values = f"{SAMPLE_NIGHT.rsplit('/', 1)[-1]}-buffer-assignment-values.txt"
    assert _told(name, s) == (f"{name}: its allocations add up to 158,416 of the 290,000 bytes its values file "
                              f"({values}) states: cut")


# --- the sample compiles, every sibling cut at every line -------------------------------------

# The latest sample night's compiles (the issue's night; the earlier nights' are the same programs).
SAMPLE_COMPILES = sorted({p.parent / p.name.split("-", 1)[0] for p in (ROOT / "data" / "sample_bucket" / "2026-11-20")
                          .rglob("*_after_optimizations-*.txt.gz")})


def _read(path: Path) -> tuple[str, bytes]:
    return path.relative_to(ROOT / "data").as_posix().removesuffix(".gz"), gzip.decompress(path.read_bytes())


def _dump(name: str, s) -> SiblingDump:
    return SiblingDump(name, str(s.kind), s.stage, str(s.status), dict(s.metrics))


@pytest.mark.parametrize("prefix", SAMPLE_COMPILES, ids=lambda p: "/".join(p.parts[-3:]))
def test_every_cut_of_a_sample_compiles_file_is_told_by_its_whole_siblings(prefix):
    """Each side file of each compile of the sample bucket, cut at every line, read by its parser and
    then judged by its whole siblings (``short_dumps``, as the nightly does): ``partial`` with a
    reason naming it, or ``ok`` with exactly the whole file's figures; nothing is left untellable."""
    files = dict(_read(p) for p in sorted(prefix.parent.glob(f"{prefix.name}-*.txt.gz")))
    assert len(files) == 4, sorted(files)  # listing, values, live ranges, memory usage report
    whole = {n: _parse(data, n).summary for n, data in files.items()}
    assert all(w.status is Status.OK for w in whole.values())
    assert short_dumps([_dump(n, w) for n, w in whole.items()]) == {}  # whole, they agree
    for name, data in files.items():
        others = [_dump(n, w) for n, w in whole.items() if n != name]
        for cut in [i + 1 for i, b in enumerate(data) if b == 0x0A][:-1]:
            s = _parse(data[:cut], name).summary
            told = short_dumps([*others, _dump(name, s)])
            assert set(told) <= {name}, (name, cut, told)
            if s.status is Status.OK and name not in told:
                assert s.metrics == whole[name].metrics, (name, cut, data[:cut].count(b"\n"))
            else:
                assert (s.errors or [told[name]])[0].startswith(f"{name}: "), (name, cut)


SAMPLE_FILES = f"{ROOT}/data/{SAMPLE_NIGHT}"
LISTING = "module_0000.jit_train_step.cpu_after_optimizations-buffer-assignment.txt"
VALUES = "module_0000.jit_train_step.cpu_after_optimizations-buffer-assignment-values.txt"


@pytest.mark.parametrize(("suffix", "lines", "reason"), [
    pytest.param("-buffer-assignment-values.txt", 22, f"it lists 3 used values, of the 75 its allocation listing "
                 f"({LISTING}) assigns: cut", id="used values after a computation whose users are all listed"),
    pytest.param("-buffer-assignment.txt", 113, f"its allocations hold 74 values, of the 75 used values its values "
                 f"file ({VALUES}) lists: cut", id="listing inside its last allocation's values"),
    pytest.param("-memory-usage-report.txt", 52, f"it lists 10 allocations, of the 38 its allocation listing "
                 f"({LISTING}) has (XLA lists at least the 38 largest): cut", id="report right after a block's last row"),
])
def test_the_sibling_that_tells_a_cut_is_named(suffix, lines, reason):
    """A cut that reads ``ok`` by itself, and the reason its whole siblings give."""
    files = dict(_read(p) for p in sorted(Path(SAMPLE_FILES).parent.glob(f"{Path(SAMPLE_FILES).name}-*.txt.gz")))
    name = f"{SAMPLE_NIGHT}{suffix}"
    s = _parse(b"".join(files[name].splitlines(keepends=True)[:lines]), name).summary
    assert s.status is Status.OK
    others = [_dump(n, _parse(data, n).summary) for n, data in files.items() if n != name]
    assert short_dumps([*others, _dump(name, s)]) == {name: f"{name}: {reason}"}


def test_files_that_disagree_otherwise_say_so():
    """A report short of the listing's bytes (a memory space cut off: one file cannot tell), and a
    listing holding more than its values file states (the total is its first line: not a cut)."""
    listing = SiblingDump("j/m.cpu_after_optimizations-buffer-assignment.txt", "xla_buffer_assignment",
                          "buffer_assignment", "ok", {"memory.allocations": 3, "memory.values": 4,
                                                      "memory.total_bytes": 300})
    report = SiblingDump("j/m.cpu_after_optimizations-memory-usage-report.txt", "xla_memory_usage_report", None, "ok",
                         {"memory.report_total_bytes": 200, "memory.report_allocations": 3, "memory.report_values": 4})
    values = SiblingDump("j/m.cpu_after_optimizations-buffer-assignment-values.txt", "xla_buffer_assignment", "values",
                         "ok", {"memory.total_bytes": 250, "memory.used_values": 4})
    listing_name = "its allocation listing (m.cpu_after_optimizations-buffer-assignment.txt)"
    assert short_dumps([listing, report]) == {report.path: (
        f"{report.path}: its memory spaces' Total bytes add up to 200 of the 300 bytes {listing_name} holds: a "
        "memory space is cut off, or the files are not of one compile")}
    assert short_dumps([listing, values]) == {listing.path: (
        f"{listing.path}: its allocations add up to 300 bytes, but its values file "
        "(m.cpu_after_optimizations-buffer-assignment-values.txt) states 250: the files are not of one compile")}
    # A file not here, or not ok, is no evidence.
    assert short_dumps([listing]) == short_dumps([replace(report, status="partial"), listing]) == {}


def test_whole_compiles_tell_nothing():
    """Every compile whose files are here (every XLA version the fixtures and corpus cover), whole:
    no file is told short by the others (a false 'partial' would hide real figures)."""
    assert len(COMPILES) >= 10
    told = {key: short_dumps([_as_sibling(n, _whole(n).summary) for n in names]) for key, names in COMPILES.items()}
    assert {key: t for key, t in told.items() if t} == {}


# --- every cut of every real buffer assignment and memory report, alone (issue 43) -------------

# The cuts a file gives no sign of by itself, by the line the cut ends in (after it, or inside it when
# the parser does not read that line's rest): generated by this module's `_every_cut` and checked
# against its rules (`_untold_here`). XLA's BufferAssignment::ToString writes "BufferAssignment:" and the
# allocations, nothing that counts them and nothing after the last, and a program may have no
# thread-local or temp allocation; so a listing cut after whole allocations (or whole values of the last
# one) once it holds what the program's output needs reads as a smaller whole one. ValuesToString writes
# the total first and then the values by id, the thread-local computations' first: a values file cut after
# a used value whose users are all listed reads as a smaller whole one. MemoryUsageReport ends every block
# with an empty line and every memory space with one more: a report cut right after a block's last row reads
# as the whole one with its final empty lines trimmed (which must read as the whole: test_status_says_why)
# when the blocks left can hold its total by their printed, rounded sizes. The side files of the same
# compile tell all three (test_every_cut_of_a_sample_compiles_file_is_told_by_its_whole_siblings).
UNTOLD_ALONE = {
    "corpus/xla_buffers/jaxlib-0.4.13.module_0004.jit_f.cpu_after_optimizations-buffer-assignment.txt":
        [*range(15, 30, 2), *range(33, 36)],
    "corpus/xla_buffers/jaxlib-0.7.2.module_0009.jit_loss.cpu_after_optimizations-buffer-assignment.txt":
        [*range(4, 44, 3), 60, 78, *range(114, 501, 2), *range(597, 695)],
    "corpus/xla_buffers/jaxlib-0.7.2.module_0011.jit_f.cpu_after_optimizations-buffer-assignment.txt":
        [*range(15, 36, 2), 40, 41],
    "fixtures/xla_buffer_assignment/deep_grad/module_0008.jit_loss.cpu_after_optimizations-buffer-assignment-values.txt":
        [*range(22, 581, 18)],
    "fixtures/xla_buffer_assignment/deep_grad/module_0008.jit_loss.cpu_after_optimizations-buffer-assignment.txt":
        [*range(4, 47, 3), 79, *range(115, 310, 2), *range(392, 483)],
    "fixtures/xla_buffer_assignment/donate/module_0008.jit_step.cpu_after_optimizations-buffer-assignment-values.txt":
        [22, 40],
    "fixtures/xla_buffer_assignment/donate/module_0008.jit_step.cpu_after_optimizations-buffer-assignment.txt":
        [*range(15, 34, 2), 34],
    "fixtures/xla_buffer_assignment/mlp/module_0010.jit_f.cpu_after_optimizations-buffer-assignment-values.txt":
        [22, 40],
    "fixtures/xla_buffer_assignment/mlp/module_0010.jit_f.cpu_after_optimizations-buffer-assignment.txt":
        [15, *range(16, 33, 2)],
    "fixtures/xla_buffer_assignment/pmap_psum/module_0004.jit__fun.cpu_after_optimizations-buffer-assignment-values.txt":
        [22],
    "fixtures/xla_buffer_assignment/pmap_psum/module_0004.jit__fun.cpu_after_optimizations-buffer-assignment.txt":
        [3, *range(4, 13, 2)],
    "fixtures/xla_buffer_assignment/while_loop/module_0004.jit_loop.cpu_after_optimizations-buffer-assignment-values.txt":
        [54, 60],
    "fixtures/xla_buffer_assignment/while_loop/module_0004.jit_loop.cpu_after_optimizations-buffer-assignment.txt":
        [*range(3, 9), *range(10, 21, 2), *range(21, 32)],
    "fixtures/xla_memory_usage_report/deep_grad/module_0008.jit_loss.cpu_after_optimizations-memory-usage-report.txt":
        [*range(56, 253, 4)],
    "fixtures/xla_memory_usage_report/donate/module_0008.jit_step.cpu_after_optimizations-memory-usage-report.txt":
        [*range(14, 59, 4)],
    "fixtures/xla_memory_usage_report/mlp/module_0010.jit_f.cpu_after_optimizations-memory-usage-report.txt":
        [*range(22, 63, 4)],
    **{f"sample_bucket/{night}/{job}.cpu_after_optimizations{side}.txt": lines for job, night, side, lines in [
        ("jax-jit/module_0000.jit_train_step", "2026-11-17", "-buffer-assignment", [*range(33, 78, 2), *range(88, 93)]),
        ("jax-jit/module_0000.jit_train_step", "2026-11-17", "-buffer-assignment-values", [*range(22, 131, 18)]),
        ("jax-jit/module_0000.jit_train_step", "2026-11-17", "-memory-usage-report", [*range(41, 138, 4)]),
        ("jax-jit/module_0000.jit_train_step", "2026-11-18", "-buffer-assignment", [*range(33, 78, 2), *range(88, 93)]),
        ("jax-jit/module_0000.jit_train_step", "2026-11-18", "-buffer-assignment-values", [*range(22, 131, 18)]),
        ("jax-jit/module_0000.jit_train_step", "2026-11-18", "-memory-usage-report", [*range(41, 138, 4)]),
        ("jax-jit/module_0000.jit_train_step", "2026-11-19", "-buffer-assignment", [*range(42, 93, 2), *range(104, 111)]),
        ("jax-jit/module_0000.jit_train_step", "2026-11-19", "-buffer-assignment-values", [*range(22, 149, 18)]),
        ("jax-jit/module_0000.jit_train_step", "2026-11-19", "-memory-usage-report", [*range(50, 159, 4)]),
        # issue 43's cuts after lines 62 and 92 of this 114-line listing among them
        ("jax-jit/module_0000.jit_train_step", "2026-11-20", "-buffer-assignment", [*range(42, 93, 2), 113]),
        ("jax-jit/module_0000.jit_train_step", "2026-11-20", "-buffer-assignment-values", [*range(22, 149, 18)]),
        ("jax-jit/module_0000.jit_train_step", "2026-11-20", "-memory-usage-report", [*range(52, 161, 4)]),
        ("jax-jit/module_0002.jit_eval_metrics", "2026-11-17", "-buffer-assignment", [*range(25, 98, 2), *range(104, 110)]),
        ("jax-jit/module_0002.jit_eval_metrics", "2026-11-17", "-buffer-assignment-values", [22, 40, 135, 153, 248]),
        ("jax-jit/module_0002.jit_eval_metrics", "2026-11-17", "-memory-usage-report", [*range(39, 200, 4)]),
        ("jax-jit/module_0002.jit_eval_metrics", "2026-11-18", "-buffer-assignment", [*range(25, 98, 2), *range(104, 110)]),
        ("jax-jit/module_0002.jit_eval_metrics", "2026-11-18", "-buffer-assignment-values", [22, 40, 135, 153, 248]),
        ("jax-jit/module_0002.jit_eval_metrics", "2026-11-18", "-memory-usage-report", [*range(39, 200, 4)]),
        ("jax-jit/module_0002.jit_eval_metrics", "2026-11-19", "-buffer-assignment", [*range(29, 102, 2), *range(110, 116)]),
        ("jax-jit/module_0002.jit_eval_metrics", "2026-11-19", "-buffer-assignment-values", [22, 40, 135, 153, 248]),
        ("jax-jit/module_0002.jit_eval_metrics", "2026-11-19", "-memory-usage-report", [*range(47, 208, 4)]),
        ("jax-jit/module_0002.jit_eval_metrics", "2026-11-20", "-buffer-assignment", [*range(29, 102, 2), *range(110, 116)]),
        ("jax-jit/module_0002.jit_eval_metrics", "2026-11-20", "-buffer-assignment-values", [22, 40, 135, 153, 248]),
        ("jax-jit/module_0002.jit_eval_metrics", "2026-11-20", "-memory-usage-report", [*range(47, 208, 4)]),
        ("jax-pmap/module_0000.jit__fun", "2026-11-17", "-buffer-assignment", [*range(30, 79, 2), *range(101, 114)]),
        ("jax-pmap/module_0000.jit__fun", "2026-11-17", "-buffer-assignment-values", [*range(22, 149, 18)]),
        ("jax-pmap/module_0000.jit__fun", "2026-11-17", "-memory-usage-report", [*range(56, 161, 4)]),
        ("jax-pmap/module_0000.jit__fun", "2026-11-18", "-buffer-assignment", [*range(30, 79, 2), *range(101, 114)]),
        ("jax-pmap/module_0000.jit__fun", "2026-11-18", "-buffer-assignment-values", [*range(22, 149, 18)]),
        ("jax-pmap/module_0000.jit__fun", "2026-11-18", "-memory-usage-report", [*range(56, 161, 4)]),
        ("jax-pmap/module_0000.jit__fun", "2026-11-19", "-buffer-assignment", [*range(36, 91, 2), *range(119, 136)]),
        ("jax-pmap/module_0000.jit__fun", "2026-11-19", "-buffer-assignment-values", [*range(22, 167, 18)]),
        ("jax-pmap/module_0000.jit__fun", "2026-11-19", "-memory-usage-report", [*range(69, 186, 4)]),
        ("jax-pmap/module_0000.jit__fun", "2026-11-20", "-buffer-assignment", [*range(36, 91, 2), *range(119, 136)]),
        ("jax-pmap/module_0000.jit__fun", "2026-11-20", "-buffer-assignment-values", [*range(22, 167, 18)]),
        ("jax-pmap/module_0000.jit__fun", "2026-11-20", "-memory-usage-report", [*range(69, 186, 4)]),
    ]},
}
ALONE = sorted(n for n, (k, _) in DUMPS.items() if k in XLA[1:] and n.startswith(("fixtures/", "corpus/", "sample_bucket/")))
_STATES = {DumpKind.XLA_BUFFER_ASSIGNMENT: xla_buffers._Dump, DumpKind.XLA_MEMORY_USAGE_REPORT: xla_memory_report._Report}


class _Rows:
    """A forked row buffer: the rows, and no frames (a cut's figures are its summary's metrics)."""

    def __init__(self, rows: list) -> None:
        self.rows = rows

    def add(self, row: tuple) -> None:
        self.rows.append(row)

    def flush(self) -> None:
        return None


def _fork(obj):
    """A copy of a parser's state that its ``finish`` may change without touching the original: row
    buffers become `_Rows`, containers are copied (lists deeply: the open used-value block nests them),
    the parser's own objects are forked in turn, anything else (str, int, enums, patterns) is shared."""
    if isinstance(obj, RowBuffer):
        return _Rows(list(obj.rows))
    if isinstance(obj, (dict, set)):
        return obj.copy()
    if isinstance(obj, array):
        return array(obj.typecode, obj)
    if isinstance(obj, list):
        return copy.deepcopy(obj)
    if isinstance(obj, enum.Enum) or not type(obj).__module__.startswith("transforms."):
        return obj
    new = copy.copy(obj)
    for name in vars(obj) if hasattr(obj, "__dict__") else type(obj).__slots__:
        setattr(new, name, _fork(getattr(obj, name)))
    return new


def _finish(state, lineno: int) -> tuple[Status, list[str], dict]:
    state.finish(lineno)
    return state.summary.status, state.summary.errors, state.summary.metrics


def _every_cut(name: str) -> dict[int, tuple[Status, list[str], dict]]:
    """(status, errors, metrics) of the dump cut at every byte that ends a line, inside every line (half
    way) and before every newline: each as ``xla_live_ranges.drive`` ends a file there (a last line
    without newline is read if the parser calls it whole, else the dump is cut), on a fork of the parser's
    state after the lines before, so a cut costs a fork rather than a parse. Cuts inside the first line go
    through the driver itself."""
    kind, data = DUMPS[name]
    state, started, offset, out = _STATES[kind](), False, 0, {}
    for k, line in enumerate(data.decode().split("\n")[:-1], 1):  # XLA ends every file with a newline
        for part in {line[: len(line) // 2], line} - {""}:
            cut = offset + len(part.encode())
            if k == 1:
                s = _parse(data[:cut], name).summary
                if s.kind is kind:  # else a file no format claims, under a name XLA does not give: unknown, no figures
                    out[cut] = (s.status, [e.removeprefix(f"{name}: ") for e in s.errors], s.metrics)
                continue
            fork = _fork(state)
            if fork.last_line_complete(part):
                fork.line(k, part)
            else:
                fork.summary.truncated = True
                fork.error(k, "last line cut mid-way (no newline); not read")
            out[cut] = _finish(fork, k)
        started = started or bool(line.strip())
        state.line(k, line)
        offset += len(line.encode()) + 1
        out[offset] = _finish(_fork(state), k) if started else (Status.FAILED, ["empty input"], {})
    return out


def _untold_here(kept: bytes) -> bool:
    """Whether a cut ends where the format states nothing more follows: after (or inside the unread rest of)
    a whole value line of an allocation listing, a used value's 'from instruction' line once every user
    the used values name has a value listed at its output, or the row that completes a block of a memory
    report (its final empty lines trimmed, a whole report reads so too)."""
    last = _last_line(kept)
    if b"Memory Space:" in kept:
        return bool(re.match(rb"^\s+\S+\(100%\);", last) or b"The rest" in last) and kept.endswith(last + b"\n")
    if b"Used values:" in kept:
        return last.startswith(b" from instruction:") and _users_all_listed(kept)
    return last.startswith((b" value: <", b"  ")) and kept.endswith(b"\n")


@pytest.mark.parametrize("name", ALONE, ids=lambda n: n.replace(".cpu_after_optimizations", ".cpu"))
def test_every_cut_of_a_real_file_alone_is_partial_unless_the_format_cannot_tell(name):
    """Issue 43: each real buffer assignment and memory report (fixtures, corpus, sample bucket), cut at
    every line end and inside every line, with no sibling to judge it: ``partial`` or ``failed`` with an
    error naming a line, or ``ok`` with the whole file's figures; ``ok`` with other figures only at the
    cuts `UNTOLD_ALONE` lists, each one where the format states nothing more follows. The forks are the
    driver's verdicts: every untold cut and a sample of the others are parsed again through it."""
    kind, data = DUMPS[name]
    whole = _whole(name).summary
    cuts = _every_cut(name)
    untold = set()
    for cut, (status, errors, metrics) in cuts.items():
        if status is not Status.OK:
            assert errors and all(e.startswith("line ") or e == "empty input" for e in errors), (cut, errors)
        elif not (whole.status is Status.OK and metrics == whole.metrics):
            untold.add(cut)
    by_line = {data[:cut].count(b"\n") + (not data[:cut].endswith(b"\n")) for cut in untold}
    assert sorted(by_line) == UNTOLD_ALONE.get(name, []), name
    assert all(_untold_here(data[:cut]) or _untold_here(data[:data.index(b"\n", cut) + 1]) for cut in untold)
    offsets = sorted(cuts)
    for cut in sorted(untold | set(offsets[:: max(1, len(offsets) // 16)]) | set(offsets[-3:])):
        real = _parse(data[:cut], name).summary
        status, errors, metrics = cuts[cut]
        assert (real.status, real.metrics) == (status, metrics), cut
        assert real.errors[: len(errors)] == [f"{name}: {e}" for e in errors] or status is Status.FAILED, cut


def test_every_real_report_and_listing_is_swept_alone():
    assert len(ALONE) >= 70 and {DUMPS[n][0] for n in ALONE} == set(XLA[1:])
    assert all(DUMPS[n][1].endswith(b"\n") for n in ALONE)  # `_every_cut` reads up to the last newline
    assert set(UNTOLD_ALONE) <= set(ALONE)
    # Issue 43's cuts: the report's after line 53 (its empty line between two blocks) is partial by itself;
    # the listing's after lines 62 and 92 are not, and nothing in it could tell (its siblings do:
    # test_a_listing_cut_before_its_temp_arena).
    assert 53 not in UNTOLD_ALONE[f"{SAMPLE_NIGHT}-memory-usage-report.txt"]
    assert {62, 92} <= set(UNTOLD_ALONE[f"{SAMPLE_NIGHT}-buffer-assignment.txt"])
