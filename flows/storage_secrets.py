"""Secrets stay out of Prefect: no storage option value and no notification URL is ever a
flow parameter.

A flow run's parameters can be read back by anyone who reaches the Prefect API (the
temporary one listens on 127.0.0.1 while a run goes on), so the values travel another
way: ``--storage-option KEY=VALUE`` is put in this process's environment
(``DUMPSCOPE_STORAGE_OPTIONS``, JSON, inherited by the parse worker processes), or they
come from a Prefect ``Secret`` block named by ``--storage-secret`` (a JSON object of
fsspec options), or from the store's own variables (``AWS_*``). The flow records only the
option names. Notification targets (Apprise URLs, which often carry a token) travel the
same way (``DUMPSCOPE_NOTIFY``, a JSON list, which an operator may also set for ``dumpscope
watch`` and ``serve``); the flow records only how many there are. Every command that runs the
nightly checks them before any work (``flows.publish.notify.check_targets``).
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any, Callable, TypeVar

Command = TypeVar("Command", bound=Callable[..., Any])

ENV_VAR = "DUMPSCOPE_STORAGE_OPTIONS"
NOTIFY_VAR = "DUMPSCOPE_NOTIFY"
# The Dask scheduler a served night's parse tasks run on (`dumpscope serve --dask-address`): the
# deployment's runs import flows.nightly in processes of their own, which inherit it.
DASK_VAR = "DUMPSCOPE_DASK_ADDRESS"


def restores_environment(command: Command) -> Command:
    """``command`` leaving the three variables as it found them, whatever it exported: a command
    called in a process that goes on (a test's CliRunner, a notebook, ``watch``'s caller) must
    not hand its storage options, notification targets or Dask scheduler to the next night that
    process runs (a night after an in-process ``run --notify`` announced to that run's targets)."""
    @functools.wraps(command)
    def restoring(*args, **kwargs):
        before = {name: os.environ.get(name) for name in (ENV_VAR, NOTIFY_VAR, DASK_VAR)}
        try:
            return command(*args, **kwargs)
        finally:
            for name, value in before.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    return restoring  # type: ignore[return-value]


def export_notify_targets(urls: list[str]) -> None:
    if urls:
        os.environ[NOTIFY_VAR] = json.dumps(list(urls))


def notify_targets() -> list[str]:
    """The notification URLs the environment holds; ValueError (naming the variable, never
    quoting it) when it is not a JSON list of strings."""
    raw = os.environ.get(NOTIFY_VAR)
    if not raw:
        return []
    try:
        urls = json.loads(raw)
    except ValueError:
        urls = None
    if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
        raise ValueError(f"{NOTIFY_VAR} is not a JSON list of Apprise URLs (strings)")
    return urls


def export(options: dict[str, Any]) -> None:
    """Hand ``options`` to the flow (and the worker processes it starts) through the environment."""
    if options:
        os.environ[ENV_VAR] = json.dumps(options)


def option_names(options: dict[str, Any] | None, prefix: str = "") -> list[str]:
    """The dotted keys of ``options``, never their values: what a run may record."""
    names: list[str] = []
    for key, value in (options or {}).items():
        if isinstance(value, dict):
            names += option_names(value, f"{prefix}{key}.")
        else:
            names.append(prefix + key)
    return sorted(names)


def resolve(secret_block: str | None = None) -> dict[str, Any] | None:
    """The storage options: the Secret block's, overridden key by key by the environment's."""
    options: dict[str, Any] = {}
    if secret_block:
        from prefect.blocks.system import Secret

        stored = Secret.load(secret_block).get()
        options = json.loads(stored) if isinstance(stored, str) else dict(stored)
    raw = os.environ.get(ENV_VAR)
    if raw:
        options = _merge(options, json.loads(raw))
    return options or None


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out
