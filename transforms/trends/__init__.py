"""What changed across runs: series identity (``series``) and the accept log across a change of
it (``renames``), rules and settings (``rules``),
per-metric trends and regressions (``metric_trends``), run roll-ups and events (``rollups``),
incidents: the walk over a program's history (``incident_walk``), the one rule that turns it into
incidents and their causes (``incident_rule``), what an incident says first (``headlines``);
structural diff items and diffs (``diff_items``, ``diff_item_rows``, ``diffs``; ``item_chunks`` for
a content too large for one frame; ``evidence``, the excerpt of the lines an item comes from), a job's
rank logs side by side (``rank_divergence``: the ranks that compiled a program differently) and
the night's Markdown summary (``night_report``).

Input is warehouse tables handed over as polars frames. May import ``transforms.records``
(shared vocabulary), ``transforms.units`` and ``transforms.volatile``; never a parser or ``transforms.site``.
"""
