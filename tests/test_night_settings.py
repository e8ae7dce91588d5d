"""A night's options are declared once (``flows.cli.night_options``) and travel as one value:
``run``, ``watch`` and ``serve`` take the same options with the same defaults (but ``--settle`` and
``--wait``, each command's own), and the nightly flow's parameters, which a deployment stores,
are ``NightSettings``'s fields with their defaults, as JSON."""

from __future__ import annotations

import inspect
import json
from dataclasses import fields
from pathlib import Path

import typer.main

from flows.night_settings import NightSettings

# Each command's own defaults for the two night options whose default differs.
OWN_DEFAULTS = {"run": {"settle": 0.0, "wait": False}, "watch": {"settle": 30.0, "wait": True},
                "serve": {"settle": 300.0, "wait": True}}


def _night_params(command: str) -> dict[str, tuple]:
    """The night options of a command: name -> (flags, default, help)."""
    from flows.cli import app, night_options

    names = set(inspect.signature(night_options).parameters)
    params = typer.main.get_command(app).commands[command].params
    return {p.name: (tuple(p.opts + p.secondary_opts), p.default, p.help) for p in params if p.name in names}


def test_run_watch_and_serve_take_every_night_option_alike():
    from flows.cli import night_options

    declared = list(inspect.signature(night_options).parameters)
    run = _night_params("run")
    assert sorted(run) == sorted(declared) and len(declared) == 24
    for command, own in OWN_DEFAULTS.items():
        params = _night_params(command)
        assert {name: params[name][1] for name in own} == own
        assert {k: v for k, v in params.items() if k not in own} == {k: v for k, v in run.items() if k not in own}


def test_the_flow_takes_the_night_settings_with_their_defaults():
    """What a deployment stores and a served run is called with: ``nightly``'s parameters."""
    from flows.nightly import nightly

    flow_params = {name: p.default for name, p in inspect.signature(nightly.fn).parameters.items()}
    assert flow_params == {f.name: f.default for f in fields(NightSettings)}
    assert sorted(nightly.parameters.properties) == sorted(flow_params)


def test_the_cli_defaults_are_the_flows():
    from flows.cli import DEFAULT_BUCKET, DEFAULT_WAREHOUSE

    run = _night_params("run")
    defaults = NightSettings()
    assert (run["bucket"][1], run["warehouse"][1]) == (defaults.bucket, defaults.warehouse) == (
        "data/sample_bucket", Path("data/warehouse.duckdb")) == (DEFAULT_BUCKET, DEFAULT_WAREHOUSE)
    assert (run["max_line_bytes"][1], run["max_dump_bytes"][1], run["parse_seconds"][1]) == (
        defaults.max_line_bytes, defaults.max_dump_bytes, defaults.parse_seconds) == (64 << 20, 4 << 30, 600.0)


def test_a_deployments_parameters_are_json_with_absolute_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = NightSettings(bucket="s3://dumps/nightly", warehouse=Path("w.duckdb"), settle_seconds=300.0,
                             state_path=Path("w.settle.json"), storage_option_names=["key", "secret"],
                             wait_for_lock=True, memory_limit=2 << 30, fail_on="new")
    parameters = json.loads(json.dumps(settings.parameters()))
    assert parameters == {
        "bucket": "s3://dumps/nightly", "warehouse": str(tmp_path / "w.duckdb"), "settle_seconds": 300.0,
        "state_path": str(tmp_path / "w.settle.json"), "storage_option_names": ["key", "secret"],
        "wait_for_lock": True, "max_line_bytes": 64 << 20, "max_dump_bytes": 4 << 30, "parse_seconds": 600.0,
        "memory_limit": 2 << 30, "fail_on": "new"}
    assert NightSettings(**parameters).limits == settings.limits
