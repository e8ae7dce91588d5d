"""Every diff item leads to its evidence: the dump lines it comes from, in order of significance.

On the sample warehouse with its items computed again with the bucket given
(``flows.verdict.items.reading``): excerpts equal to the lines of the real dumps at the recorded
line numbers (read here with gzip, independently of the project's reader), a dump gone
from the bucket gives no excerpt and no failure, a hostile dump line renders as text,
changes come in significance order, and the sample's real batch-size change (its JAX
jobs go from 64 to 96 to 128 rows between nights) collapses to one line.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import duckdb
import polars as pl
import pytest

from flows.verdict import items
from flows.verdict.aggregate import aggregate
from flows.warehouse.reads import frame_of
from flows.warehouse import store as wh
from transforms.trends import evidence
from transforms.trends.diffs import change_entries, diff_text

BUCKET = Path(__file__).resolve().parents[1] / "data" / "sample_bucket"
TRAIN_HLO = "jax-jit/jit_train_step/xla_hlo/after_optimizations"


@pytest.fixture(scope="module")
def warehouse(sample_warehouse, tmp_path_factory) -> Path:
    """The sample warehouse, its content items computed again with excerpts from the bucket."""
    target = tmp_path_factory.mktemp("evidence") / "wh.duckdb"
    shutil.copyfile(sample_warehouse, target)
    with wh.Warehouse(target) as con:
        con.execute("DELETE FROM content_item_rows")
        con.execute("DELETE FROM schema_info WHERE key = 'aggregated_with'")  # every run again
        aggregate(con, run_items=items.reading(items.DumpSource(str(BUCKET))))
    return target


def query(warehouse: Path, sql: str) -> pl.DataFrame:
    with wh.connect_readonly(warehouse) as con:
        return frame_of(con, sql)


def dump_lines(path: str) -> list[str]:
    data = (BUCKET / path).read_bytes()
    return (gzip.decompress(data) if path.endswith(".gz") else data).decode().splitlines()


def test_excerpts_are_the_lines_of_the_real_dumps(warehouse):
    stored = query(warehouse, """SELECT category, key, excerpt_lines, excerpt, excerpt_from FROM content_items
                                 WHERE category <> 'none'""")
    # Every item of the sample has a line and, its dumps being in the bucket, an excerpt.
    assert stored.filter(pl.col("excerpt").is_null()).height == 0
    assert stored.height == 1112  # 268 of them the torch-trace log's compiles (issue 46: graph, kernels, code, guards)
    files = {p: dump_lines(p) for p in stored.get_column("excerpt_from").unique()}
    for row in stored.iter_rows(named=True):
        lines = files[row["excerpt_from"]]
        blocks = []
        for part in row["excerpt_lines"].split(","):
            first, _, last = part.partition("-")
            block = lines[int(first) - 1 : int(last or first)]
            blocks.append("\n".join(x if len(x) <= 400 else x[:400] + f" … [{len(x) - 400} more characters]" for x in block))
        assert row["excerpt"] == "\n⋮\n".join(blocks), row
        assert len(row["excerpt"].splitlines()) <= 40 + row["excerpt_lines"].count(",")
    # A fusion: its fused computation (lines 109-113) and the fusion instruction (446).
    fusion = stored.filter(pl.col("key") == "kCustom:4d1c018b2c97e579",
                           pl.col("excerpt_from").str.starts_with("2026-11-19/jax-pmap/")).row(0, named=True)
    assert fusion["excerpt_lines"] == "109-113,446"
    assert fusion["excerpt"].splitlines()[0].startswith("%fused_computation.6 (param_0.6: f32[4,32]")
    assert fusion["excerpt"].splitlines()[-1].startswith("  %ynn_fusion.6 = f32[4,96]{1,0} fusion(")
    # A failed ONNX step: its line and the two exception lines of the report.
    step = stored.filter(pl.col("key") == "translate", pl.col("excerpt_from").str.starts_with("2026-11-19/")).row(0, named=True)
    assert step["excerpt_lines"] == "8,27,46"


def test_diffs_carry_both_sides_and_dumpscope_diff_collapses_the_rescale(warehouse):
    rows = query(warehouse, f"""SELECT * FROM diffs WHERE run_id = '2026-11-18' AND series = '{TRAIN_HLO}'""")
    entries = change_entries(rows)
    # 64 -> 96 rows: 10 fusions, each vanished and appeared with its shapes scaled, are one line.
    assert [e["line"] for e in entries] == ["batch 64 → 96: 10 fusions rescaled"]
    assert len(entries[0]["changes"]) == 20
    appeared = rows.filter(pl.col("change") == "appeared")
    assert appeared.get_column("excerpt_after").is_not_null().all()
    assert appeared.get_column("excerpt_before").is_null().all()
    assert set(appeared.get_column("after_path")) == {"2026-11-18/jax-jit/module_0000.jit_train_step.cpu_after_optimizations.txt.gz"}
    # The next night also changes the model (two hidden layers become three): no collapse.
    later = query(warehouse, f"SELECT * FROM diffs WHERE run_id = '2026-11-19' AND series = '{TRAIN_HLO}'")
    assert later.get_column("rescale").is_null().all() and len(change_entries(later)) == later.height == 31
    text = diff_text(rows.with_columns(pl.lit(None).alias("rank")), "2026-11-17", "2026-11-18")
    assert text == f"2026-11-17 → 2026-11-18\n\n{TRAIN_HLO}\n  batch 64 → 96: 10 fusions rescaled\n"


def test_changes_in_order_of_significance(warehouse):
    ranked = query(warehouse, """SELECT series, rank, description FROM diffs WHERE run_id = '2026-11-19'
                                 AND series = 'torch-inductor/model__0_forward/inductor_ir/post_fusion' ORDER BY rank""")
    # The new ATen fallback leads, before fused groups that moved more bytes.
    assert ranked.get_column("description").to_list()[0] == "fallback kernel aten.median.dim appeared (×1)"
    assert ranked.get_column("rank").to_list() == list(range(1, ranked.height + 1))
    onnx = query(warehouse, """SELECT category, description FROM diffs WHERE run_id = '2026-11-19'
                               AND series = 'torch-onnx/inp+blocks+head(x)/onnx_report/export' ORDER BY rank""")
    # The steps whose status changed lead (by key among themselves), then ops and accuracy by size.
    steps = onnx.filter(pl.col("category") == "onnx_step").get_column("description").to_list()
    assert onnx.get_column("description").to_list()[: len(steps)] == steps
    assert steps == ["ONNX step accuracy ✅→⚪", "ONNX step onnx_checker ✅→⚪", "ONNX step onnx_runtime ✅→⚪",
                     "ONNX step translate ✅→❌"]


def test_a_dump_gone_from_the_bucket_gives_no_excerpt_and_no_failure(sample_warehouse, tmp_path):
    with duckdb.connect(str(sample_warehouse), read_only=True) as con:  # the export writes Parquet: a full session
        todo = frame_of(con, """SELECT DISTINCT s.items_key, d.kind, d.stage, d.dump_id FROM dump_series s
                                JOIN dumps d USING (path) WHERE d.run_id = '2026-11-20' AND s.items_key IS NOT NULL""")
        dirs = items.export_batches(con, todo.unique("items_key"), tmp_path / "work", max_rows=10**9)
    empty = tmp_path / "bucket"
    empty.mkdir()
    got = items.computed(dirs, items.reading(items.DumpSource(str(empty)))(dirs))
    real = got.filter(pl.col("category") != "none")
    assert real.height > 100
    assert real.get_column("excerpt").is_null().all() and real.get_column("excerpt_from").is_null().all()
    assert real.get_column("excerpt_lines").is_not_null().all()  # where it stood is still known


HOSTILE = '''HloModule hostile, entry_computation_layout={(f32[8]{0})->f32[8]{0}}

%fused_computation (param_0: f32[8]) -> f32[8] {
  %param_0 = f32[8]{0} parameter(0)
  ROOT %negate.1 = f32[8]{0} negate(%param_0), metadata={op_name="</details><script>alert(1)</script>"}
}

ENTRY %main (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  ROOT %fusion = f32[8]{0} fusion(%p), kind=kLoop, calls=%fused_computation, metadata={op_name="</details><script>alert(2)</script>"}
}
'''


def test_a_hostile_dump_line_renders_as_text():
    import io

    from flows.publish.site import _environment
    from transforms.parse import parse_dump
    from transforms.trends.diffs import items_of_contents

    parsed = parse_dump(io.BytesIO(HOSTILE.encode()), "r/j/module.after_optimizations.txt", dump_id="d")
    keys = pl.DataFrame({"items_key": ["k"], "kind": ["xla_hlo"], "stage": [parsed.summary.stage], "dump_id": ["d"]})
    found = items_of_contents(keys, {t: f.with_columns(pl.lit("d").alias("dump_id")) for t, f in parsed.tables.items()})
    fusion = found.filter(pl.col("category") == "fusion").row(0, named=True)
    assert fusion["excerpt_lines"] == "3-7,10"  # to the next header; the blank line 7 is left out when read
    [(excerpt, shown)] = evidence.read_excerpts(HOSTILE.splitlines(keepends=True), [fusion["excerpt_lines"]])
    assert shown == "3-6,10" and "</details><script>alert(2)</script>" in excerpt
    change = {"description": "fusion kLoop negate→f32[8] appeared (×1, 32 B)", "change": "appeared", "rescale": None,
              "before_path": "r0/j/module.txt", "after_path": "r/j/</details><script>x</script>.txt",
              "lines_before": None, "lines_after": shown, "excerpt_before": None, "excerpt_after": excerpt}
    page = _environment().get_template("_evidence.md.j2").render(changes={"entries": [
        {"line": change["description"], "anchor": "change-0-0", "changes": [change], "rescale": False, "sides": [
            {"name": "after", "path": change["after_path"], "lines": shown, "excerpt": excerpt, "note": None}]}]})
    assert "<script>" not in page and page.count("</details>") == 1 and page.count("<details") == 1
    assert "&#60;/details&#62;&#60;script&#62;alert(2)&#60;/script&#62;" in page


def test_each_excerpt_text_is_stored_once(warehouse):
    """Versions of a program repeat most of their excerpts: the text is kept once (excerpt_texts,
    by its sha256), the items name it, and the view content_items reads it back."""
    import hashlib

    got = query(warehouse, """SELECT (SELECT count(*) FROM excerpt_texts) AS texts,
                                     (SELECT count(DISTINCT excerpt) FROM content_items) AS distinct_shown,
                                     (SELECT count(excerpt_id) FROM content_item_rows) AS items_with_one""").row(0, named=True)
    # The sample's four nights: 1112 items with an excerpt show 806 texts (306 repeat an earlier one; the
    # torch-trace log's compiles, 268 items, 140 texts: a guard's line is the same night after night).
    assert got == {"texts": 806, "distinct_shown": 806, "items_with_one": 1112}
    some = query(warehouse, "SELECT excerpt_id, excerpt FROM excerpt_texts ORDER BY excerpt_id LIMIT 20").rows()
    assert all(i == hashlib.sha256(t.encode()).hexdigest() for i, t in some)
