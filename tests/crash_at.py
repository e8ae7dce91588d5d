"""``python -m tests.crash_at STAGE dumpscope-args...``: run the dumpscope command and SIGKILL
the process at STAGE, as a power cut or the OOM killer would. Used by the crash-safety tests.

Stages: discover (bucket listed), parse (first chunk parsed), load (first batch loaded,
not committed), aggregate (loads done, derived tables not), items (the structural items'
batches exported beside the warehouse, not computed), publish (new file swapped in,
lock not released), report (published, summary not written).
"""

from __future__ import annotations

import functools
import os
import signal
import sys


def _die(*_args, **_kwargs):
    os.kill(os.getpid(), signal.SIGKILL)


def _after(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        result = fn(*args, **kwargs)
        _die()
        return result
    return wrapper


def _first_then_die(gen_fn):
    @functools.wraps(gen_fn)
    def wrapper(*args, **kwargs):
        for item in gen_fn(*args, **kwargs):
            yield item
            _die()
    return wrapper


def arm(stage: str) -> None:
    from flows import nightly
    from flows.warehouse import loading, store

    if stage == "discover":
        nightly.list_objects = _after(nightly.list_objects)
    elif stage == "parse":
        nightly._with_progress = _first_then_die(nightly._with_progress)
    elif stage == "load":
        loading.load_dumps = _after(loading.load_dumps)
    elif stage == "aggregate":
        nightly.aggregate = _die
    elif stage == "items":
        from flows.verdict import items

        items.export_batches = _after(items.export_batches)
    elif stage == "publish":
        store._fsync_dir = _die
    elif stage == "report":
        nightly.write_night_report = _die
    else:
        raise SystemExit(f"unknown stage {stage!r}")


if __name__ == "__main__":
    # The CLI's Prefect settings before arming imports Prefect: set after, its 90 s start-up
    # limit came too late (Prefect's settings were read at import, 20 s, short on a loaded machine).
    from flows.commands.signals import prefect_defaults

    prefect_defaults()
    arm(sys.argv[1])
    from flows.cli import app

    app(sys.argv[2:], prog_name="dumpscope")
