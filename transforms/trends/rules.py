"""Regression rules: which way each metric gets worse, and by how much it may.

Compiler metrics are deterministic: the same program compiled by the same compiler
gives the same figures, so *any* change is reported as a change. A change in the
metric's worse direction past its threshold is a regression. A few metrics carry run
to run noise (ONNX verification differences): changes within their ``noise`` are no
change at all, and they regress only past a ``limit`` that means something.

Rules are matched on the metric name (shell-style patterns; the first match wins),
user rules from the settings file before the defaults below. A user rule may name
series (a pattern on the series id) to apply only there.

Settings file (TOML, ``dumpscope.toml``)::

    memory_limit = "2GB"              # most a night may hold (DuckDB and Python): flows.resources

    commit_url = "https://github.com/org/repo/commit/{commit}"            # optional: commits become links
    compare_url = "https://github.com/org/repo/compare/{base}...{head}"   # optional: commit ranges too

    [series]                          # program (whole-name regex) -> series name
    "SyncTensorsGraph\\\\.\\\\d+" = "train_step"

    [floors]                          # incidents: the smallest step that opens one
    bytes = 1024                      # memory figures: at least this many bytes (and the rule's rel)
    count = 1                         # counts

    [site]                            # the report site (dumpscope site, run --site)
    history_runs = 90                 # the last N runs: charts, run pages, incidents (0: every run)
    max_series_pages = 2000           # series pages at most (the others: rows of the series index)
    bucket_url = "https://console.example/bucket/{path}"   # optional: dumps become links
    url = "https://dumpscope.example.org/"   # optional: where the site is published (links from chats, check)

    [warehouse]
    keep_records_runs = 7             # records rows kept for the contents of the last N runs (0: all)

    [check]                           # dumpscope check --warehouse URL: the snapshot's download
    max_download = "4GB"              # at most this many bytes (a bigger or endless body is refused)
    download_seconds = 300            # within this many seconds

    [[rule]]
    metric = "memory.*"               # required: a pattern on metric names
    series = "jax-pmap/*"             # optional: a pattern on series ids
    rel = 0.10                        # optional: worse by more than 10 % of the baseline
    abs = 0                           # optional: worse by more than this amount (0: any)
    direction = "up"                  # optional: up (more is worse), down, none
    noise = 0                         # optional: a change within this is no change
    window = 3                        # optional: judge the median of the last N runs (noisy timings)

    [[rule]]                          # e.g. compile time of a busy CI fleet: a wider band
    metric = "*.compile_seconds"
    rel = 1.0
    noise = 5
    window = 5
"""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass, field, replace
from typing import Any, Iterable

import polars as pl

UP, DOWN, NEUTRAL = 1, -1, 0
_DIRECTIONS = {"up": UP, "down": DOWN, "none": NEUTRAL}


@dataclass(frozen=True, slots=True)
class Rule:
    metric: str
    direction: int | None = NEUTRAL  # None (user rules): the default rule's direction
    rel: float | None = None  # regression when worse by more than rel × |baseline|
    abs: float | None = None  # ... or by more than abs (0: any worse change)
    noise: float = 0.0  # |change| <= noise is no change (noisy float metrics only)
    limit: float | None = None  # noisy metrics regress only when the value passes this
    series: str = "*"
    # Noisy timings: judged on the median of the series' last ``window`` runs (the lower middle
    # value while it has fewer, even), so one slow run moves nothing and a lasting level does.
    window: int = 1

    def describe(self) -> str:
        parts = []
        if self.rel is not None:
            parts.append(f"> {self.rel:.0%}" if self.rel else "any")
        if self.abs is not None:
            parts.append(f"> {self.abs:g}" if self.abs else "any")
        if self.limit is not None:
            parts.append(f"past {self.limit:g}")
        way = {UP: "increase", DOWN: "decrease", NEUTRAL: "change"}[self.direction]
        median = f" of the median of {self.window} runs, past noise {self.noise:g}" if self.window > 1 else ""
        return f"{' or '.join(parts) or 'no'} {way}{median}" if self.direction else "reported, never a regression"


# Defaults: memory bytes +2 %, kernel launches +2 %, any new fallback
# kernel, any ONNX step turning ❌, any drop of fusions. First match wins.
DEFAULT_RULES: tuple[Rule, ...] = (
    Rule("memory.*_bytes", UP, rel=0.02),  # counts (allocations, values) only change
    Rule("kernel.launches", UP, rel=0.02),
    Rule("kernel.fallback*", UP, abs=0),
    Rule("kernel.custom_call*", UP, rel=0.02),
    Rule("kernel.collective*", UP, rel=0.02),
    Rule("fusion.count", DOWN, abs=0),
    Rule("fusion.count.*", DOWN, abs=0),
    Rule("fusion.fused_nodes", DOWN, abs=0),
    Rule("onnx.step.*", DOWN, abs=0),
    Rule("onnx.errors", UP, abs=0),
    # Verification differences move by ~1e-7 between identical exports: a change is
    # one past 1e-6, a regression a max abs difference past 1e-3 (the accuracy step
    # turning ❌ is caught by onnx.step.accuracy).
    Rule("onnx.max_abs_diff", UP, abs=0, noise=1e-6, limit=1e-3),
    Rule("onnx.max_rel_diff", NEUTRAL, noise=1e-3),
    # torch.compile (TORCH_TRACE logs): counts are deterministic for one program and torch
    # version: any more graph breaks, recompiles, failed compiles or compiles is a step (a failed
    # compile opens a failure), guards past +10 %. Compile seconds are wall time: they move with the
    # machine's load and the caches' state, so they are judged on the median of 3 runs, past
    # 2 s and +50 %: one slow night opens nothing, a level that lasts 2 nights of 3 does.
    Rule("dynamo.failures", UP, abs=0),
    Rule("dynamo.graph_breaks", UP, abs=0),
    Rule("dynamo.recompiles", UP, abs=0),
    Rule("dynamo.compiles", UP, abs=0),
    # Ranks of a job that compiled a program differently from the others (any: their collectives may hang).
    Rule("dynamo.rank_divergence", UP, abs=0),
    Rule("dynamo.guards", UP, rel=0.10),  # a model change adds a guard or two; a break or recompile dozens
    Rule("dynamo.compile_seconds", UP, rel=0.5, noise=2.0, window=3),
    Rule("inductor.compile_seconds", UP, rel=0.5, noise=2.0, window=3),
    # Cache hits and misses say how warm the runner's cache was, not what the compiler made:
    # information (charts, the run's figures), never a verdict; their cost shows in compile seconds.
    Rule("inductor.cache_*", NEUTRAL),
)
FALLBACK_RULE = Rule("*", NEUTRAL)

# Counts the parsers leave out when they are zero (docs/metrics.md: a breakdown such
# as kernel.fallback.<op> exists only for ops that occur). In a run where the series
# was seen, such a metric it had in other runs is 0, so a first fallback kernel is a
# regression (0 → 1), not a "new metric", and a fusion kind that disappears is a drop.
# Other absent metrics stay absent: memory figures a dump cannot tell, skipped ONNX steps.
ZERO_WHEN_ABSENT = r"^(?:kernel|fusion|inductor)\.|^onnx\.errors$"

# [warehouse] keep_records_runs: the records rows (instruction by instruction) of the contents of the
# last N runs are kept for ad-hoc SQL, a week of nightlies ("what changed this week"); contents shared
# between runs are stored once, so N runs cost their new contents only. Not an input of the figures.
DEFAULT_KEEP_RECORDS_RUNS = 7


@dataclass(frozen=True, slots=True)
class Settings:
    series_patterns: dict[str, str] = field(default_factory=dict)
    rules: tuple[Rule, ...] = ()  # user rules, tried before DEFAULT_RULES
    commit_url: str | None = None  # "{commit}" is replaced by the commit
    compare_url: str | None = None  # "{base}" and "{head}" by the commit range's ends
    floor_bytes: float = 1024.0  # incidents: smallest step of a memory figure
    floor_count: float = 1.0  # ... of a count
    # Not inputs of the figures (left out of repr, which stamps the aggregation):
    memory_limit: str | int | None = field(default=None, repr=False, compare=False)  # "2GB": flows.resources
    keep_records_runs: int = field(default=DEFAULT_KEEP_RECORDS_RUNS, repr=False, compare=False)  # 0: keep every run's records
    # [site] history_runs: how much the site shows (0: every run). Not an input of the
    # figures: left out of repr, which stamps the aggregation.
    site_history_runs: int = field(default=90, repr=False, compare=False)
    # [site] max_series_pages: series pages at most (the others are rows of the series index).
    site_max_series_pages: int = field(default=2000, repr=False, compare=False)
    # [site] bucket_url: "{path}" -> a dump's page in the bucket's console (dumps become links on the site).
    site_bucket_url: str | None = field(default=None, repr=False, compare=False)
    # [site] url: where the published site is read (notifications, summaries and check link to its pages).
    site_url: str | None = field(default=None, repr=False, compare=False)
    # [check] max_download, download_seconds: bounds of check's download of a published snapshot.
    check_max_download: str | int = field(default="4GB", repr=False, compare=False)
    check_download_seconds: int = field(default=300, repr=False, compare=False)

    def rule_for(self, series: str, metric: str) -> Rule:
        for rule in self.rules:
            if fnmatch.fnmatchcase(metric, rule.metric) and fnmatch.fnmatchcase(series, rule.series):
                return _complete(rule, metric)
        return _default_rule(metric)


def windowed_metrics(settings: Settings, metrics: Iterable[str]) -> set[str]:
    """Those of ``metrics`` that a rule judging a median of runs (``window``) may match."""
    rules = [r for r in (*settings.rules, *DEFAULT_RULES) if r.window > 1]
    return {m for m in metrics if any(fnmatch.fnmatchcase(m, r.metric) for r in rules)}


def _default_rule(metric: str) -> Rule:
    for rule in DEFAULT_RULES:
        if fnmatch.fnmatchcase(metric, rule.metric):
            return rule
    return FALLBACK_RULE


def _complete(user: Rule, metric: str) -> Rule:
    """A user rule that leaves the direction out keeps the default's (and its noise)."""
    if user.direction is not None:
        return user
    base = _default_rule(metric)
    return replace(user, direction=base.direction, noise=user.noise or base.noise,
                   limit=base.limit if user.limit is None else user.limit,
                   window=user.window if user.window > 1 else base.window)


def parse_settings(text: str, *, source: str = "dumpscope.toml") -> Settings:
    """Settings from the TOML text; errors name ``source`` and the bad entry."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{source}: {e}") from None
    unknown = set(data) - {"baseline_runs", "series", "rule", "commit_url", "compare_url", "floors", "memory_limit",
                           "warehouse", "site", "check"}
    if unknown:
        raise ValueError(f"{source}: unknown setting(s) {', '.join(sorted(unknown))}")
    urls = {}
    for key, fields in (("commit_url", ("commit",)), ("compare_url", ("base", "head"))):
        if key in data:
            urls[key] = _url_template(data[key], key, fields, source)
    floors = data.get("floors", {})
    if not isinstance(floors, dict) or set(floors) - {"bytes", "count"} or not all(
            isinstance(v, (int, float)) and v >= 0 for v in floors.values()):
        raise ValueError(f"{source}: [floors] takes bytes and count, numbers >= 0")
    memory = data.get("memory_limit")
    if memory is not None and (isinstance(memory, bool) or not isinstance(memory, (str, int))):
        raise ValueError(f"{source}: memory_limit must be a size such as \"2GB\"")
    warehouse = data.get("warehouse", {})
    keep = warehouse.get("keep_records_runs", DEFAULT_KEEP_RECORDS_RUNS) if isinstance(warehouse, dict) else None
    if not isinstance(warehouse, dict) or set(warehouse) - {"keep_records_runs"} or not isinstance(keep, int) or keep < 0:
        raise ValueError(f"{source}: [warehouse] takes keep_records_runs, an integer >= 0")
    site = data.get("site", {})
    history = site.get("history_runs", 90) if isinstance(site, dict) else None
    max_pages = site.get("max_series_pages", 2000) if isinstance(site, dict) else None
    if (not isinstance(site, dict) or set(site) - {"history_runs", "bucket_url", "url", "max_series_pages"}
            or not isinstance(history, int) or isinstance(history, bool) or history < 0
            or not isinstance(max_pages, int) or isinstance(max_pages, bool) or not 0 <= max_pages <= 100_000):
        raise ValueError(f"{source}: [site] takes history_runs, an integer >= 0 (0: every run), max_series_pages, "
                         "an integer from 0 to 100000, bucket_url and url")
    bucket_url = _url_template(site["bucket_url"], "[site] bucket_url", ("path",), source) if "bucket_url" in site else None
    site_url = _site_url(site["url"], source) if "url" in site else None
    check = data.get("check", {})
    max_download = check.get("max_download", "4GB") if isinstance(check, dict) else None
    seconds = check.get("download_seconds", 300) if isinstance(check, dict) else None
    if (not isinstance(check, dict) or set(check) - {"max_download", "download_seconds"}
            or isinstance(max_download, bool) or not isinstance(max_download, (str, int))
            or isinstance(seconds, bool) or not isinstance(seconds, int) or not 1 <= seconds <= 86400):
        raise ValueError(f"{source}: [check] takes max_download, a size such as \"4GB\", and download_seconds, "
                         "an integer from 1 to 86400")
    # baseline_runs sized the rolling median the trends used before incidents were the one
    # verdict (issue 26): a settings file that still has it keeps working; it changes nothing.
    n = data.get("baseline_runs", 7)
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"{source}: baseline_runs must be a positive integer, not {n!r}")
    series = data.get("series", {})
    if not isinstance(series, dict) or not all(isinstance(v, str) for v in series.values()):
        raise ValueError(f"{source}: [series] maps program regexes to names (strings)")
    return Settings(series_patterns=dict(series),
                    rules=tuple(_rule(entry, source, i) for i, entry in enumerate(data.get("rule", []), 1)),
                    **urls, floor_bytes=float(floors.get("bytes", 1024)), floor_count=float(floors.get("count", 1)),
                    memory_limit=memory, keep_records_runs=keep,
                    site_history_runs=history, site_max_series_pages=max_pages, site_bucket_url=bucket_url,
                    site_url=site_url,
                    check_max_download=max_download, check_download_seconds=seconds)


def _site_url(value: Any, source: str) -> str:
    """The site's address: an http(s) URL (links to its pages are made by appending paths)."""
    from urllib.parse import urlsplit

    parts = urlsplit(value) if isinstance(value, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise ValueError(f"{source}: [site] url must be an http(s) URL such as \"https://dumpscope.example.org/\"")
    return value.rstrip("/") + "/"


def _url_template(value: Any, key: str, fields: tuple[str, ...], source: str) -> str:
    """A link template whose only replacement fields are ``fields``, plain: no attribute,
    index, conversion or format spec (``str.format`` would evaluate them)."""
    import string

    try:
        parsed = list(string.Formatter().parse(value)) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    if parsed is None or any(name is not None and (name not in fields or spec or conv) for _, name, spec, conv in parsed):
        raise ValueError(f"{source}: {key} must be a string using only {', '.join('{' + f + '}' for f in fields)}")
    return value


def _rule(entry: Any, source: str, i: int) -> Rule:
    where = f"{source}: [[rule]] #{i}"
    if not isinstance(entry, dict) or not isinstance(entry.get("metric"), str):
        raise ValueError(f"{where}: needs metric = \"<pattern>\"")
    unknown = set(entry) - {"metric", "series", "rel", "abs", "direction", "noise", "limit", "window"}
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    direction = entry.get("direction")
    if direction is not None and direction not in _DIRECTIONS:
        raise ValueError(f"{where}: direction must be up, down or none, not {direction!r}")
    numbers = {}
    for key in ("rel", "abs", "noise", "limit"):
        if key in entry:
            if not isinstance(entry[key], (int, float)) or entry[key] < 0:
                raise ValueError(f"{where}: {key} must be a number >= 0")
            numbers[key] = float(entry[key])
    if (window := entry.get("window")) is not None:
        if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= 30:
            raise ValueError(f"{where}: window must be an integer from 1 to 30 (runs whose median is judged)")
        numbers["window"] = window
    return Rule(metric=entry["metric"], series=str(entry.get("series", "*")),
                direction=_DIRECTIONS[direction] if direction else None, **numbers)


RULE_SCHEMA = pl.Schema({
    "series": pl.String, "metric": pl.String, "direction": pl.Int8, "rel": pl.Float64,
    "abs": pl.Float64, "noise": pl.Float64, "limit": pl.Float64, "rule": pl.String,
})


def rules_frame(settings: Settings, pairs: Iterable[tuple[str, str]]) -> pl.DataFrame:
    """The rule of each (series, metric) pair, as columns to join onto observations."""
    rows = []
    for series, metric in pairs:
        r = settings.rule_for(series, metric)
        rows.append((series, metric, r.direction, r.rel, r.abs, r.noise, r.limit, r.describe()))
    return pl.DataFrame(rows, schema=RULE_SCHEMA, orient="row")
