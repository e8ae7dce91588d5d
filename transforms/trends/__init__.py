"""What changed across runs: series identity (``series``) and the accept log across a change of
it (``renames``), rules and settings (``rules``),
per-metric trends and regressions (``metric_trends``), run roll-ups and events (``rollups``),
structural diff items and diffs (``diff_items``, ``diff_item_rows``, ``diffs``) and the
night's Markdown summary (``night_report``).

Input is warehouse tables handed over as polars frames. May import ``transforms.records``
(shared vocabulary), ``transforms.units`` and ``transforms.volatile``; never a parser or ``transforms.site``.
"""
