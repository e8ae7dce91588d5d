"""JSON from outside, decoded with its nesting bounded first (transforms.bounded_json): run.json, a publish
destination's PUBLISHING record, a records store's footers file. Text nested thousands deep made json.loads
raise RecursionError, which the readers that take "not JSON" as ValueError did not catch (a deep PUBLISHING
record stopped the publish), and which a finalizer run by the garbage collector inside that recursion raised
too (CI: test_bucket's deep run.json, reported as an unraisable exception)."""

from __future__ import annotations

import pytest

from transforms import bounded_json

DEEP = b"[" * 100_000


@pytest.mark.parametrize("raw, depth", [
    (b"{}", 1), (b'{"a": [1, {"b": []}]}', 4), (b'["[[[", "\\"[[[", "}}"]', 1), (b"", 0), (b"12", 0),
    (b'"unclosed [[[', 3), (DEEP, 9), ("[[\u00e9]]", 2),
])
def test_nesting_counts_brackets_outside_strings_up_to_one_past_the_bound(raw, depth):
    assert bounded_json.nesting(raw, 8) == depth


def test_loads_reads_up_to_the_bound_and_refuses_past_it_without_decoding():
    assert bounded_json.loads(b"[" * 5 + b"]" * 5, 5) == [[[[[]]]]]
    with pytest.raises(bounded_json.TooDeep, match=r"nested too deeply to read \(over 5 levels\)"):
        bounded_json.loads(b"[" * 6 + b"]" * 6, 5)
    with pytest.raises(ValueError):  # what the callers catch: TooDeep is one
        bounded_json.loads(DEEP, 256)


def test_a_deep_publishing_record_at_the_destination_is_taken_as_empty(tmp_path):
    import fsspec

    from flows.publish.release import _Publishing

    fs = fsspec.filesystem("file")
    (tmp_path / "PUBLISHING").write_bytes(DEEP)
    assert _Publishing(fs, str(tmp_path / "PUBLISHING")).listed == set()  # main: RecursionError
    (tmp_path / "PUBLISHING").write_bytes(b'["a.html", "b/c.html"]')
    assert _Publishing(fs, str(tmp_path / "PUBLISHING")).listed == {"a.html", "b/c.html"}


def test_a_deep_footers_file_in_a_records_store_is_taken_as_none(tmp_path):
    from flows.warehouse.footers import FILE, Footers

    (tmp_path / FILE).write_bytes(DEEP)
    assert Footers(tmp_path).saved == {}  # main: RecursionError
