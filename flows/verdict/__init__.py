"""The verdict: the warehouse's figures across runs turned into incidents, and read back.

- ``aggregate``: the aggregation pass (trends, steps, incidents, diffs).
- ``settings``: the settings file, and the stamps saying what the derived tables were computed with.
- ``compaction``: what a night clears away (superseded records rows, items work directories).
- ``history``: what the aggregation reads of the runs before the night.
- ``items``: the structural items (and excerpts) of the dumps an incident compares.
- ``incident_reader``: the incidents of a run and their counts, read back for every page and command.
- ``incident_detail``: one incident whole, and every incident with its last status (``dumpscope incidents``).
- ``changes``: what two runs hold to compare (``dumpscope diff``) and what an accept names and logs.
- ``candidate``: a candidate run judged against the history without writing (``dumpscope check``).

May import ``flows.errors``, ``flows.resources``, ``flows.ingest``, ``flows.warehouse`` and ``transforms``.
"""
