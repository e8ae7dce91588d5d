"""transforms.parsers.xla_memory_report on real XLA:CPU reports (jaxlib 0.10), checked against
the buffer assignment of the same compilation (tests/fixtures/xla_buffer_assignment)."""

from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import FIXTURES, SEEDS
from tests.helpers import collect
from transforms.parsers import xla_buffers as xb
from transforms.parsers import xla_memory_report as xr
from transforms.records import DumpKind, DumpSummary, ParseError

REPORTS = FIXTURES / "xla_memory_usage_report"
BUFFERS = FIXTURES / "xla_buffer_assignment"
CASES = ["mlp", "donate", "while_loop", "pmap_psum", "deep_grad"]


def report_file(case: str) -> Path:
    (path,) = REPORTS.glob(f"{case}/module_*-memory-usage-report.txt")
    return path


def run(mod, lines) -> tuple[dict[str, pl.DataFrame], DumpSummary]:
    return collect(mod, lines)


def run_file(mod, path: Path):
    with path.open() as fh:
        return run(mod, fh)


EXPECTED = {  # case -> (total, allocations listed, slots, values, hidden slots)
    "mlp": (68276, 16, 17, 19, 0),
    "donate": (3228, 15, 16, 19, 0),
    "while_loop": (1108, 7, 10, 24, 0),
    "pmap_psum": (780, 6, 6, 7, 0),
    "deep_grad": (2906628, 51, 101, 224, 45),
}


@pytest.mark.parametrize("case", CASES)
def test_report_figures(case):
    path = report_file(case)
    tables, s = run_file(xr, path)
    assert s.kind is DumpKind.XLA_MEMORY_USAGE_REPORT and s.stage == "memory_usage_report" == xr.stage_from_name(path.name)
    assert not s.errors and not s.truncated and s.program is None
    total, allocs, slots, values, hidden = EXPECTED[case]
    assert s.metrics == {
        "memory.report_total_bytes": total,
        "memory.report_spaces": 1,
        "memory.report_allocations": allocs,
        "memory.report_slots": slots,
        "memory.report_values": values,
        "memory.report_hidden_slots": hidden,
    }
    assert tables["memory_report_spaces"].rows() == [("default", 0, total, 2)]
    assert len(tables["memory_report_slots"]) == slots


@pytest.mark.parametrize("case", CASES)
def test_report_matches_buffer_assignment(case):
    tables, s = run_file(xr, report_file(case))
    (ba_path,) = BUFFERS.glob(f"{case}/module_*-buffer-assignment.txt")
    ba, ba_s = run_file(xb, ba_path)
    assert s.metrics["memory.report_total_bytes"] == ba_s.metrics["memory.total_bytes"]
    if s.metrics["memory.report_allocations"] == ba_s.metrics["memory.allocations"]:
        assert s.metrics["memory.report_values"] == ba_s.metrics["memory.values"]
    # allocation_rank r is the r-th allocation by (size descending, index): values and slots agree.
    ranked = (
        ba["buffer_allocations"].sort(["size_bytes", "allocation_index"], descending=[True, False])
        .with_row_index("allocation_rank").with_columns(pl.col("allocation_rank").cast(pl.Int32))
    )  # fmt: skip
    per_alloc = ba["buffer_values"].group_by("allocation_index").agg(
        n_values=pl.len(), n_slots=pl.col("offset").n_unique(), largest=pl.col("size_bytes").max()
    )
    blocks = tables["memory_report_slots"].group_by("allocation_rank").agg(
        n_values=pl.col("used_by_n_values").sum(), n_slots=pl.len(), first=pl.col("size_bytes_approx").first(),
        complete=pl.col("cumulative_percent").last() == 100,
    )  # fmt: skip
    joined = blocks.join(ranked, on="allocation_rank").join(per_alloc, on="allocation_index", suffix="_ba")
    assert len(joined) == s.metrics["memory.report_allocations"]
    done = joined.filter("complete")
    assert (done["n_values"] == done["n_values_ba"]).all() and (done["n_slots"] == done["n_slots_ba"]).all()
    # The first slot is the largest value of the allocation, within the print rounding (0.05 KiB).
    assert ((joined["first"] - joined["largest"]).abs() <= 52).all()


def test_golden_rows():
    tables, _ = run_file(xr, report_file("while_loop"))
    rows = tables["memory_report_slots"].head(4).rows(named=True)
    assert rows[2] == {
        "memory_space": "default", "color": 0, "allocation_rank": 0, "allocation_index": None, "slot_rank": 2,
        "cumulative_bytes_approx": 536, "cumulative_percent": 99, "size_bytes_approx": 24, "size_text": "24B",
        "offset": 0, "used_by_n_values": 5, "shapes": ["5×(s32[], f32[8,8], s32[])"], "lineno": 7,
    }  # fmt: skip
    assert rows[1]["shapes"] == ["f32[8,8]", "pred[]"]
    tables, _ = run_file(xr, report_file("mlp"))
    first = tables["memory_report_slots"].row(0, named=True)
    assert (first["size_text"], first["size_bytes_approx"], first["shapes"]) == ("32.0KiB", 32768, ["f32[64,128]"])


def test_older_format_names_allocations():
    """The layout of older XLA (BufferAssignment::MemoryUsageReport), built from its format strings."""
    lines = [
        "Total bytes used: 18448 (18.0KiB)\n",
        "\n",
        "Allocations sorted by size:\n",
        "\n",
        "cumulative_size; total_size - cumulative_size; allocation\n",
        "------------------------------------------------------------------------------\n",
        "   18.0KiB(100%);        16B; allocation 1: size 18.0KiB, preallocated-temp:\n",
        "   18.0KiB(100%);         0B; allocation 0: size 16B, maybe-live-out:\n",
        "\n",
        "\n",
        "Allocations sorted by size with their values:\n",
        "allocation 1: size 18.0KiB, preallocated-temp:\n",
        "\n",
        "\tcumulative_size;       size;       offset; used_by_n_values; shapes_list\n",
        "\t------------------------------------------------------------\n",
        "\t  16.0KiB( 89%);    16.0KiB;            0;                2; 2×f32[32,128]\n",
        "\t  18.0KiB(100%);     2.0KiB;        16384;                1; f32[32,16]\n",
        "\n",
        "allocation 0: size 16B, maybe-live-out:\n",
    ]
    assert xr.sniff("x-memory-usage-report.txt", "".join(lines))
    tables, s = run(xr, lines)
    assert not s.errors and not s.truncated
    assert s.metrics["memory.report_total_bytes"] == 18448 and s.metrics["memory.report_allocations"] == 2
    # 2 + 1 values in allocation 1's slots, and allocation 0, named without a table: its one value.
    assert s.metrics["memory.report_values"] == 4
    slots = tables["memory_report_slots"]
    assert slots["allocation_index"].to_list() == [1, 1] and slots["allocation_rank"].to_list() == [0, 0]
    assert tables["memory_report_spaces"].rows() == [(None, None, 18448, 1)]


OLDER = [  # the older layout of test_older_format_names_allocations, with 2 more allocations of one value
    "Total bytes used: 18456 (18.0KiB)\n", "\n", "Allocations sorted by size:\n", "\n",
    "cumulative_size; total_size - cumulative_size; allocation\n",
    "------------------------------------------------------------------------------\n",
    "   18.0KiB(100%);        24B; allocation 1: size 18.0KiB, preallocated-temp:\n",
    "   18.0KiB(100%);         8B; allocation 0: size 16B, maybe-live-out:\n",
    "The rest 2 allocations are less than 5% of the total size and not shown.\n", "\n", "\n",
    "Allocations sorted by size with their values:\n",
    "allocation 1: size 18.0KiB, preallocated-temp:\n", "\n",
    "\tcumulative_size;       size;       offset; used_by_n_values; shapes_list\n",
    "\t------------------------------------------------------------\n",
    "\t  16.0KiB( 89%);    16.0KiB;            0;                2; 2×f32[32,128]\n",
    "\t  18.0KiB(100%);     2.0KiB;        16384;                1; f32[32,16]\n", "\n",
    "allocation 0: size 16B, maybe-live-out:\n",
    "allocation 2: size 4B, thread-local:\n",
    "allocation 3: size 4B, thread-local:\n",
]


def test_older_format_states_its_allocation_count():
    """Summary lines plus "The rest N allocations": the allocations the second part names, all of them."""
    _, s = run(xr, OLDER)
    assert (s.errors, s.truncated, s.metrics["memory.report_allocations"]) == ([], False, 4)
    for cut, error in [
        (20, "line 20: input ended after 2 of the 4 allocations its summary lists"),  # after allocation 0
        (21, "line 21: input ended after 3 of the 4 allocations its summary lists"),
        (8, "line 8: input ended in the allocation summary, before 'Allocations sorted by size with their values:'"),
        (14, "line 14: input ended after allocation 1's name and the blank line before its slot table"),
    ]:
        _, s = run(xr, OLDER[:cut])
        assert (s.truncated, s.errors) == (True, [error]), cut


def test_every_memory_space_has_its_total_and_blocks():
    block = ["  cumulative_size;       size;       offset; used_by_n_values; shapes_list\n",
             "  ------------------------------------------------------------\n",
             "         4B(100%);         4B;            0;                1; f32[]\n", "\n"]
    # XLA ends every block with an empty line, and every memory space with one more.
    lines = ["Memory Space: default (color=0)\n", "Total bytes: 4 (4B)\n", *block, "\n",
             "Memory Space: alt (color=1)\n", "Total bytes: 8 (8B)\n", *block, *block, "\n"]
    _, s = run(xr, lines)
    assert (s.errors, s.metrics["memory.report_spaces"], s.metrics["memory.report_allocations"]) == ([], 2, 3)
    for cut, error in [
        (8, "line 8: input ended after the header of memory space alt, before its 'Total bytes' line"),
        (9, "line 9: input ended before the first allocation block of memory space alt"),
        (13, "line 13: input ended after 1 allocation blocks of memory space alt: they hold at most 4 of its 8 "
             "total bytes"),
        (17, "line 17: input ended after 2 allocation blocks of memory space alt and the empty line that closes the "
             "last, before the empty line XLA ends a memory space with: more blocks may follow"),
    ]:
        _, s = run(xr, lines[:cut])
        assert (s.truncated, s.errors) == (True, [error]), cut


def test_a_report_cut_between_blocks_is_cut():
    """Issue 43: XLA ends every block with an empty line and every memory space with one more, so a
    newer-layout report ending in one empty line was cut between two blocks (it read ok with fewer
    blocks): partial, with an error naming that line. Cut elsewhere it is partial too, but right after a
    block's last row: that is how the whole report reads with its final empty lines trimmed, and only
    the blocks' sizes against the total tell (the 4-byte blocks at the end cannot)."""
    for case in CASES:
        lines = report_file(case).read_text().splitlines(keepends=True)
        assert lines[-2:] == ["\n", "\n"] and not run(xr, lines)[1].errors, case
        assert not run(xr, lines[:-2])[1].errors, case  # trimmed: the whole report
        for cut in range(1, len(lines) - 2):
            _, s = run(xr, lines[:cut])
            if "(100%);" not in lines[cut - 1] and "The rest" not in lines[cut - 1]:
                assert s.truncated and any(e.startswith(f"line {cut}: ") for e in s.errors), (case, cut, s.errors)


def test_a_bad_slot_row_costs_only_itself():
    """A slot row with a size no memory holds (past 2^63 bytes: the whole dump failed on an overflow) or a
    percentage past 100 is an error naming its line; the row is skipped, the rest of the report is read."""
    lines = report_file("mlp").read_text().splitlines(keepends=True)
    whole_tables, whole = run_file(xr, report_file("mlp"))
    row = "     8.0KiB(100%);     8.0KiB;            0;                1; f32[32,64]\n"
    assert lines[13] == row
    for bad, error in [
        (row.replace("8.0KiB", "999999.9EiB"), "line 14: slot row not read: size 999999.9EiB is past 2^63 bytes"),
        (row.replace("(100%)", "(999%)"), "line 14: slot row not read: cumulative percentage 999% is past 100%"),
    ]:
        tables, s = run(xr, [*lines[:13], bad, *lines[14:]])
        assert (s.errors, s.truncated) == ([error], False)
        assert s.metrics == {**whole.metrics, "memory.report_slots": 16, "memory.report_values": 18}
        assert tables["memory_report_slots"].equals(whole_tables["memory_report_slots"].filter(pl.col("lineno") != 14))
    # A last line without newline whose count of values has thousands of digits (int() refused it: failed).
    last = lines[-3].replace("f32[]", "9" * 5000 + "×f32[]").rstrip("\n")
    _, s = run(xr, [*lines[:-3], last])
    assert (s.errors, s.truncated, s.metrics) == ([], False, whole.metrics)


def test_an_empty_allocation_is_a_whole_block():
    """XLA prints an empty allocation's share as "0B(-nan%)" (0 of 0 bytes): the eval step of
    tests/incident_buckets/overshoot_revert on its night of an empty batch (f32[0,32] inputs) reads ok,
    every block whole; main read the report partial (unrecognized lines, blocks short of 100 %)."""
    import gzip

    path = next((Path(__file__).parent / "incident_buckets" / "overshoot_revert" / "2026-10-03" / "jax-jit").glob(
        "*memory-usage-report.txt.gz"))
    lines = gzip.decompress(path.read_bytes()).decode().splitlines(keepends=True)
    assert lines[40] == "         0B(-nan%);         0B;            0;                1; f32[0,32]\n"
    tables, s = run(xr, lines)
    assert (s.errors, s.truncated) == ([], False)
    assert s.metrics == {"memory.report_allocations": 11, "memory.report_hidden_slots": 0, "memory.report_slots": 11,
                         "memory.report_spaces": 1, "memory.report_total_bytes": 10560, "memory.report_values": 11}
    empty = tables["memory_report_slots"].filter(pl.col("size_bytes_approx") == 0)
    assert empty.select("cumulative_percent", "shapes").rows() == [(100, ["f32[0,32]"]), (100, ["f32[0,8]"])]
    # A -nan share of a block that holds bytes is no report's: the row is skipped with an error.
    bad = lines[4].replace("(100%)", "(-nan%)")
    _, s = run(xr, [*lines[:4], bad, *lines[5:]])
    assert s.errors == ["line 5: slot row not read: cumulative percentage -nan% of 8.0KiB, not an empty block"]


def _head(path: Path) -> str:
    return path.read_bytes()[:65536].decode("utf-8", "replace")


def test_sniff_claims_only_reports():
    for case in CASES:
        assert xr.sniff(report_file(case).name, _head(report_file(case)))
    for path in [*SEEDS.glob("*.txt"), *BUFFERS.glob("*/*.txt")]:
        assert not xr.sniff(path.name, _head(path)), path.name


@pytest.mark.parametrize("lines", [[], ["\n"], ["HloModule m\n"], ["BufferAssignment:\n"]])
def test_nothing_usable_raises(lines):
    with pytest.raises(ParseError):
        list(xr.parse(lines))


def test_junk_and_pathological_lines():
    lines = report_file("mlp").read_text().splitlines(keepends=True)
    slot = "    16.0KiB( 89%);    16.0KiB;            0;                2; "
    damaged = lines[:6] + ["x" * 5_000_000 + "\n"] + lines[6:9] + [slot + "[" * 1_000_000 + "\n"] + lines[9:]
    tables, s = run(xr, damaged)
    assert s.errors and len(tables["memory_report_slots"]) == 18


# --- truncation property ---

TEXT = report_file("deep_grad").read_text()
LINES = TEXT.splitlines(keepends=True)
FULL = run(xr, LINES)


def _check(kept: list[str]) -> None:
    try:
        tables, s = run(xr, kept)
    except ParseError:
        return
    full_tables, full_s = FULL
    for name, frame in tables.items():
        assert frame.equals(full_tables[name].head(len(frame))), name
    # XLA ends the report with the empty lines that close its last block and memory space: a cut is partial
    # (a cut inside the first line, the only one, leaves a line not understood), but right after a row that
    # completes a block, which is how the report reads with its final empty lines trimmed.
    last = kept[-1] if kept else ""
    after_block = ("(100%);" in last or "The rest" in last) and (last.endswith("\n") or last + "\n" in LINES)
    if "".join(kept) != TEXT and not after_block:
        assert s.errors and (s.truncated or len(kept) == 1)
    if s.truncated:
        assert s.errors


@settings(max_examples=200, deadline=None)
@given(frac=st.floats(0, 1), by_line=st.booleans())
def test_cuts(frac, by_line):
    if by_line:
        _check(LINES[: round(frac * len(LINES))])
    else:
        _check(TEXT[: round(frac * len(TEXT))].splitlines(keepends=True))
