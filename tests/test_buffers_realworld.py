"""Older XLA buffer assignments and memory usage reports (data/corpus/xla_buffers), parsed whole.

Each file is listed in the directory's MANIFEST.json with where it came from. Every figure
asserted here is checked against a count made independently of the parsers: regexes over
the raw text (explained where used), XLA's own ``Total bytes used`` line, and, for the
files made with jaxlib, the figures jax itself gave for the same compilation
(``compiled.memory_analysis()``, kept in the MANIFEST).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
from pathlib import Path

import pytest

from transforms.parse import parse_dump
from transforms.records import DumpKind, Status

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus" / "xla_buffers"
MANIFEST = json.loads((CORPUS / "MANIFEST.json").read_text(encoding="utf-8"))
ENTRIES = {e["file"]: e for e in MANIFEST["files"]}
TF_EXAMPLE = "tensorflow_driver_cc_example-buffer-assignment.txt.gz"
XLA_EXAMPLE = "openxla_driver_cc_example-buffer-assignment.txt.gz"
OLD_413 = "jaxlib-0.4.13.module_0004.jit_f.cpu_after_optimizations-buffer-assignment.txt.gz"
MLP_BA = "jaxlib-0.7.2.module_0011.jit_f.cpu_after_optimizations-buffer-assignment.txt.gz"
MLP_REPORT = "jaxlib-0.7.2.module_0011.jit_f.cpu_after_optimizations-memory-usage-report.txt.gz"
GRAD_BA = "jaxlib-0.7.2.module_0009.jit_loss.cpu_after_optimizations-buffer-assignment.txt.gz"
GRAD_REPORT = "jaxlib-0.7.2.module_0009.jit_loss.cpu_after_optimizations-memory-usage-report.txt.gz"

# Independent of the parser: an allocation header is a line "allocation N: [0x..., ]size S..."
# that XLA closed with ':' (a wrapped paste leaves it open: not an allocation one can read).
HEADER = re.compile(r"^allocation \d+: (?:0x[0-9a-f]+, )?size (\d+)\b.*:$", re.M)
VALUE_LINE = re.compile(r"^ value: ", re.M)
TOTAL_USED = re.compile(r"^Total bytes used: (\d+) ", re.M)


def text_of(file: str) -> str:
    return gzip.decompress((CORPUS / file).read_bytes()).decode()


def parsed(file: str, text: str | None = None):
    raw = (text if text is not None else text_of(file)).encode()
    return parse_dump(io.BytesIO(raw), file.removesuffix(".gz"))


def test_manifest_lists_every_file_once_whole():
    assert sorted(ENTRIES) == sorted(p.name for p in CORPUS.glob("*.gz"))
    for file, entry in ENTRIES.items():
        text = gzip.decompress((CORPUS / file).read_bytes())
        assert (len(text), hashlib.sha256(text).hexdigest()) == (entry["bytes"], entry["sha256"]), file
        assert entry["what"]
        if entry["repo"]:  # cut from a public repository: where, at which commit, under which licence
            assert re.fullmatch(r"[0-9a-f]{40}", entry["commit"]) and entry["path"]
            assert entry["licence"] in {"Apache-2.0", "MIT", "BSD-2-Clause", "BSD-3-Clause"}
        else:  # made here with an old jaxlib
            assert entry["made"] and entry["memory_analysis"]
    assert sum((CORPUS / f).stat().st_size for f in ENTRIES) < 1 << 20


# --- the two examples XLA's authors pasted into driver.cc: the old header syntax, wrapped ---


@pytest.mark.parametrize("file", [TF_EXAMPLE, XLA_EXAMPLE])
def test_driver_examples_are_partial_naming_the_wrapped_lines(file):
    text = text_of(file)
    d = parsed(file)
    s = d.summary
    assert (s.kind, s.status, s.stage) == (DumpKind.XLA_BUFFER_ASSIGNMENT, Status.PARTIAL, "buffer_assignment")
    name = file.removesuffix(".gz")
    # Lines 2 and 5 are allocations 0 and 1, wrapped at 80 columns; 3 and 6 their wrapped tails.
    assert s.errors == [
        f"{name}: line 2: allocation 0 header has no closing ':' (line wrapped or cut short); allocation not read",
        f"{name}: line 3: unrecognized line",
        f"{name}: line 5: allocation 1 header has no closing ':' (line wrapped or cut short); allocation not read",
        f"{name}: line 6: unrecognized line",
    ]
    headers = [int(size) for size in HEADER.findall(text)]
    assert headers == [4, 4, 4, 4]  # allocations 2-5: every other header is wrapped
    # No "unknown allocation flags": the address, the bare "output shape is f32[]" and the flag words are read.
    allocs = d.tables["buffer_allocations"]
    assert allocs["allocation_index"].to_list() == [2, 3, 4, 5]
    assert s.metrics["memory.allocations"] == len(headers) == 4
    assert s.metrics["memory.total_bytes"] == sum(headers) == 16
    assert s.metrics["memory.constant_bytes"] == 4 and s.metrics["memory.thread_local_bytes"] == 12
    assert allocs["kind"].to_list() == ["constant", "thread_local", "thread_local", "thread_local"]
    assert allocs.row(3, named=True)["output_shape"] == "f32[]"  # "output shape is f32[], thread-local:"
    # The values of the two unread allocations are skipped with them (their header's error says why).
    assert s.metrics["memory.values"] == len(VALUE_LINE.findall(text)) - 2 == 4


# --- XLA:CPU of old jaxlib releases: the combined file, and the older memory usage report ---

BA_FILES = [OLD_413, MLP_BA, GRAD_BA]


@pytest.mark.parametrize("file", BA_FILES)
def test_old_jaxlib_buffer_assignments(file):
    text = text_of(file)
    s = parsed(file).summary
    assert (s.kind, s.status, s.errors) == (DumpKind.XLA_BUFFER_ASSIGNMENT, Status.OK, [])
    sizes = [int(size) for size in HEADER.findall(text)]
    (total_used,) = TOTAL_USED.findall(text)  # XLA's own sum of the allocation sizes
    m = s.metrics
    assert m["memory.allocations"] == len(sizes) == len(re.findall(r"^allocation ", text, re.M))
    assert m["memory.total_bytes"] == sum(sizes) == int(total_used)
    assert m["memory.values"] == len(VALUE_LINE.findall(text)) == m["memory.used_values"]
    # Every value is listed again under "Used values:", each opened by its "<id name @color>" line.
    assert m["memory.used_values"] == len(re.findall(r"^<\d+ ", text, re.M))
    # Live-range figures against the listing itself: the "max" and the peak lines' bytes.
    (max_time,) = re.findall(r"^HloLiveRange \(max (\d+)\):$", text, re.M)
    peak = text[text.index("(peak):"):]
    assert m["memory.live_range_max_time"] == int(max_time)
    # Peak lines are "    name{index}: N bytes" (newer XLA adds "(cumulative: ...)"); the stack-trace tree
    # after them is indented further and prints its own figures, which are not counted.
    peak_lines = re.findall(r"^ {4}[^\s:]+: (\d+) bytes", peak, re.M)
    assert m["memory.peak_values"] == len(peak_lines)
    assert m["memory.peak_live_bytes"] == sum(int(b) for b in peak_lines)
    api = ENTRIES[file]["memory_analysis"]
    if any(api.values()):  # jaxlib 0.4.13 gives zeros on CPU: nothing to check against
        assert m["memory.parameter_bytes"] == api["argument_size_in_bytes"]
        assert m["memory.live_out_bytes"] == api["output_size_in_bytes"]
        assert m["memory.alias_bytes"] == api["alias_size_in_bytes"]
        assert m["memory.temp_bytes"] == api["temp_size_in_bytes"]


def test_old_jaxlib_exact_figures():
    """The figures of the three files, written out (each equal to the counts checked above)."""
    figures = {f: parsed(f).summary.metrics for f in BA_FILES}
    picked = {f: (m["memory.allocations"], m["memory.total_bytes"], m["memory.values"], m["memory.parameter_bytes"],
                  m["memory.live_out_bytes"], m["memory.temp_bytes"], m["memory.peak_live_bytes"])
              for f, m in figures.items()}  # fmt: skip
    assert picked == {
        OLD_413: (15, 68272, 18, 49664, 148, 18432, 82432),
        MLP_BA: (18, 68300, 21, 49664, 148, 18448, 68100),
        GRAD_BA: (228, 2907524, 464, 1064960, 1048704, 793088, 2129920),
    }


# Older report layout: a slot row is "cumulative(pct%); size; offset; used_by_n_values; shapes" after a tab.
SLOT_ROW = re.compile(r"^\t\s*\S+\(\s*\d+%\);\s+\S+;\s+\d+;\s+(\d+); ", re.M)
NAMED = re.compile(r"^allocation (\d+): size ", re.M)
HIDDEN = re.compile(r"^\tThe rest (\d+) values", re.M)


@pytest.mark.parametrize(("file", "ba_file"), [(MLP_REPORT, MLP_BA), (GRAD_REPORT, GRAD_BA)])
def test_old_layout_memory_reports(file, ba_file):
    text = text_of(file)
    d = parsed(file)
    s = d.summary
    assert (s.kind, s.status, s.errors, s.stage) == (DumpKind.XLA_MEMORY_USAGE_REPORT, Status.OK, [], "memory_usage_report")
    ba = parsed(ba_file).summary.metrics
    m = s.metrics
    (total_used,) = TOTAL_USED.findall(text)
    assert m["memory.report_total_bytes"] == int(total_used) == ba["memory.total_bytes"]
    assert m["memory.report_spaces"] == 1
    # The "with their values" part names every allocation (no percentile cut there).
    assert m["memory.report_allocations"] == len(NAMED.findall(text)) == ba["memory.allocations"]
    slots = [int(n) for n in SLOT_ROW.findall(text)]
    assert m["memory.report_slots"] == len(slots)
    # An allocation named without a slot table holds one value (XLA prints tables only for two or more):
    # count the names not followed, after a blank line, by a table header.
    single = len(re.findall(r"^allocation \d+: size .*:\n(?!\n\tcumulative_size)", text, re.M))
    assert m["memory.report_values"] == sum(slots) + single
    assert m["memory.report_hidden_slots"] == sum(int(n) for n in HIDDEN.findall(text))
    if not m["memory.report_hidden_slots"]:  # nothing hidden: every value of the assignment is there
        assert m["memory.report_values"] == ba["memory.values"]


def test_old_layout_report_exact_figures():
    picked = {f: tuple(parsed(f).summary.metrics[f"memory.report_{k}"] for k in
                       ("total_bytes", "allocations", "slots", "values", "hidden_slots"))
              for f in (MLP_REPORT, GRAD_REPORT)}  # fmt: skip
    assert picked == {MLP_REPORT: (68300, 18, 3, 21, 0), GRAD_REPORT: (2907524, 228, 67, 401, 60)}


def test_old_layout_report_cut_short_names_the_cut():
    """The real report cut inside its slot table, as a paste cut short would be."""
    lines = text_of(MLP_REPORT).splitlines(keepends=True)
    first_row = next(i for i, line in enumerate(lines) if SLOT_ROW.match(line))
    kept = "".join(lines[: first_row + 1])  # the table's first row (89%) and nothing after
    s = parsed(MLP_REPORT, kept).summary
    assert s.status is Status.PARTIAL and s.truncated
    name = MLP_REPORT.removesuffix(".gz")
    assert s.errors == [f"{name}: line {first_row + 1}: input ended inside allocation block 1: its slots reach 89%"]
