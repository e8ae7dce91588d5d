"""What a night tells: its counters, the exit status a scheduler gets, and their renderings.

``NightSummary`` is what ``flows.nightly`` returns for a night (and a served flow run turns
into its state): the dumps seen, parsed and loaded, the incidents, the notifications, the
seconds and memory of each stage. ``exit_status`` is the one place the exit statuses of
``flows.errors`` are decided from it; ``json`` (``run --summary-json``) and ``markdown``
(the flow's log and artifact) render it.

May import: ``flows.errors``, ``flows.stopwatch`` and the standard library.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from flows.errors import FAILING, UNDELIVERED
from flows.stopwatch import Stopwatch


@dataclass
class NightSummary:
    seen: int = 0
    new: int = 0
    skipped: int = 0
    deferred: int = 0
    parsed: int = 0
    partial: int = 0
    failed: int = 0
    unreadable: int = 0
    reused: int = 0  # dumps whose content the warehouse held already: not parsed again
    rows_loaded: int = 0
    new_incidents: int = 0  # regressions and failures opened in the runs this night loaded
    notified: int = 0  # notification messages delivered (new incidents, and any still owed to a target)
    undelivered: list[str] = field(default_factory=list)  # notifications that failed (retried by the next run), and why
    incidents: dict[str, int] = field(default_factory=dict)  # the latest run's counts (incidents_at)
    failures: list[str] = field(default_factory=list)
    run_errors: list[str] = field(default_factory=list)  # what was wrong with run.json files
    seconds: dict[str, float] = field(default_factory=dict)

    publish_bytes: int = 0  # bytes the writer wrote (DuckDB file, journal) from catching up to leveling the standby
    caught_up: str = ""  # how the writer's standby was brought level: replay, copy or new
    leveled: str = ""  # after the publish: replay (the next night's standby is level), else why not
    peak_mib: dict[str, float] = field(default_factory=dict)  # the flow process's peak RSS after each stage
    written_mib: dict[str, float] = field(default_factory=dict)  # MiB the writer had written at each stage's end
    published: str = ""  # where the site and the warehouse snapshot were published (--publish), what and how much
    publish_warning: str = ""  # what a directory DEST's releases hold that no publish made (left untouched)

    def stopwatch(self) -> Stopwatch:
        """The night's clock, started now: each lap's seconds go to ``seconds``."""
        return Stopwatch(self.seconds)

    def count_listing(self, *, new: int, deferred: int, seen: int, refused: list[str], run_errors: list[str]) -> None:
        """What discovery found: dumps new, still settling and seen, run ids and job names refused,
        run.json errors."""
        self.failures += refused
        self.new, self.deferred, self.seen, self.skipped = new, deferred, seen, seen - new - deferred
        self.run_errors = run_errors

    def count_outcomes(self, outcomes: list) -> None:
        """What staging made of the new dumps (``flows.ingest.staging.Outcome``): parsed, partial,
        failed, unreadable, held already; the first errors of each dump not ok."""
        for o in outcomes:
            if o.staged is None:
                self.unreadable += 1
                self.failures.append(f"{o.obj.path}: {o.error}")
                continue
            status = o.staged.summary["status"]
            self.reused += bool(o.staged.summary.get("held"))
            self.parsed += status != "failed"
            self.partial += status == "partial"
            self.failed += status == "failed"
            if status != "ok":
                self.failures += o.staged.summary["errors"][:3]

    def count_load(self, loaded) -> None:
        """What the writer did (``flows.nightly.LoadResult``): rows, incidents, notifications, the
        records files it healed, its bytes, seconds and memory per stage."""
        self.rows_loaded, self.new_incidents, self.notified = loaded.rows, loaded.new_incidents, loaded.notified
        self.undelivered = loaded.undelivered
        self.failures += loaded.healed
        self.publish_bytes, self.caught_up, self.leveled = loaded.publish_bytes, loaded.caught_up, loaded.leveled
        self.seconds.update({f"load.{k}": v for k, v in loaded.seconds.items()})
        self.peak_mib |= {f"load.{k}": v for k, v in loaded.peak_mib.items()}
        self.written_mib = {f"load.{k}": v for k, v in loaded.written_mib.items()}

    def count_release(self, done) -> None:
        """Where the site and snapshot were published (``flows.publish.release.Released``), and what
        the destination held that no publish made."""
        self.published = f"{done.dest} ({done.files} files, {done.bytes / (1 << 20):.1f} MiB; snapshot {done.snapshot})"
        self.publish_warning = done.warning

    def exit_status(self, fail_on: str | None) -> tuple[int, str]:
        """(status, why) for a scheduler: ``FAILING`` when ``fail_on`` (``new``: opened by the
        runs this night loaded; ``open``: new or open at the latest run) finds incidents,
        ``UNDELIVERED`` when a message is owed (the night is published), else 0."""
        failing = self.new_incidents if fail_on == "new" else self.incidents.get("new", 0) + self.incidents.get("open", 0)
        if fail_on and failing:
            return FAILING, f"{failing} {'new' if fail_on == 'new' else 'open'} incident(s) (regressions or failures)"
        if self.undelivered:
            return UNDELIVERED, f"{len(self.undelivered)} notification(s) not delivered (retried by the next run)"
        return 0, ""

    def warnings(self) -> list[str]:
        """What the terminal and a served run's log show as warnings: notifications owed, and what
        a publish found in DEST's releases that no publish made."""
        return self.undelivered + ([self.publish_warning] if self.publish_warning else [])

    def json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def markdown(self) -> str:
        # Two incident counts that differ on purpose: opened in any run this night loaded (a first
        # ingest loads a bucket's whole history), and the latest run's verdict (what "last night" says).
        label = {"new_incidents": "incidents opened in the runs loaded"}
        lines = ["| | |", "| --- | ---: |"] + [
            f"| {label.get(k, k)} | {v} |" for k, v in asdict(self).items()
            if k not in ("failures", "seconds", "run_errors", "incidents", "caught_up", "leveled", "peak_mib", "written_mib",
                         "undelivered", "published", "publish_warning")
        ] + [f"| latest run: incidents {k.replace('_', ' ')} | {v} |" for k, v in self.incidents.items()]
        lines += [f"| {k} seconds | {v:.2f} |" for k, v in self.seconds.items()]
        if self.published:
            lines += ["", f"Published: {self.published}"] + ([f"Warning: {self.publish_warning}"] if self.publish_warning else [])
        if self.failures:
            lines += ["", "Failures:", ""] + [f"- {f}" for f in self.failures]
        if self.run_errors:
            lines += ["", "run.json errors (the valid fields were kept):", ""] + [f"- {e}" for e in self.run_errors]
        if self.undelivered:
            lines += ["", "Notifications not delivered (the night is published; the next run retries them):", ""] + [
                f"- {u}" for u in self.undelivered]
        return "\n".join(lines)
