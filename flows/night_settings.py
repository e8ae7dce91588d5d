"""One night's settings, as one value: what ``flows.commands.night.prepare`` makes of a
command's options, what the nightly flow takes as its parameters and what its steps read.

``NightSettings`` holds no secret (storage options and notification targets travel by the
environment: ``flows.storage_secrets``) and each field is a plain value, so a deployment
(``dumpscope serve``) stores them as JSON (``parameters``). ``flows.nightly.nightly`` declares the
same names and defaults as its parameters, for Prefect to read (``tests/test_nightly_settings.py``
keeps the two in step); nothing here imports Prefect or DuckDB.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path

from transforms.parse import DEFAULT_LIMITS, ParseLimits

DEFAULT_BUCKET = "data/sample_bucket"
DEFAULT_WAREHOUSE = Path("data/warehouse.duckdb")


@dataclass(frozen=True)
class NightSettings:
    """A night: where it reads and writes, how it parses, publishes and ends (``fail_on``: a served
    run's state; a night run in process has none)."""
    bucket: str = DEFAULT_BUCKET
    warehouse: Path = DEFAULT_WAREHOUSE
    staging_dir: Path | None = None  # default: beside the warehouse
    settle_seconds: float = 0.0
    state_path: Path | None = None
    storage_secret: str | None = None
    storage_option_names: list[str] | None = None  # which options were given (their values: the environment)
    layout_regex: str | None = None
    marker: str | None = None
    wait_for_lock: bool = False
    workers: int | None = None
    dask_address: str | None = None
    settings_path: Path | None = None
    report_path: Path | None = None
    site_dir: Path | None = None
    max_line_bytes: int = DEFAULT_LIMITS.max_line_bytes
    max_dump_bytes: int = DEFAULT_LIMITS.max_dump_bytes
    parse_seconds: float = DEFAULT_LIMITS.max_seconds
    memory_limit: int | None = None
    publish_to: str | None = None
    fail_on: str | None = None
    summary_path: Path | None = None

    @property
    def limits(self) -> ParseLimits:
        return ParseLimits(max_line_bytes=self.max_line_bytes, max_dump_bytes=self.max_dump_bytes,
                           max_seconds=self.parse_seconds)

    def arguments(self) -> dict:
        """The flow's keyword arguments (``nightly(**settings.arguments())``)."""
        return asdict(self)

    def parameters(self) -> dict:
        """A deployment's parameters: JSON values, every path absolute (a served run may start
        in another directory), the ones left at None omitted."""
        values = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Path):
                value = str(value.resolve())
            if value is not None:
                values[f.name] = value
        return values
