"""How the long-running commands meet Prefect and service managers: Prefect's settings for
this machine, what of Prefect's log reaches the terminal (``prefect_console``), and an
orderly exit on SIGTERM whose status says so (128 + 15).

systemd and Kubernetes stop a service with SIGTERM. Python's default action dies on the
spot and skips the atexit hook that stops Prefect's temporary API server, which then keeps
listening: exit in order instead, as on Ctrl-C. During a flow Prefect's engine has its own
SIGTERM handler in place of ours, so every signal that reaches a Python handler is noted
(the interpreter's wakeup fd), whichever handler that is, for ``stopped_by_sigterm``.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager

_noted: int | None = None  # read end of the pipe the interpreter writes each signal's number to


def prefect_defaults() -> None:
    """Prefect's settings for a command that runs flows, and the orderly SIGTERM."""
    # No network here for Prefect's telemetry; a first start (new database) on a busy
    # machine can take longer than Prefect's default 20 s ephemeral start-up limit.
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    signal.signal(signal.SIGTERM, _exit_in_order)
    note_signals()


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_CONSOLE_LEVEL = "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL"  # Prefect's logging.yml, handlers.console.level


@contextmanager
def prefect_console(level: str) -> Iterator[None]:
    """Prefect's log lines below ``level`` (one of ``LOG_LEVELS``) kept off the terminal while
    the context is open; every line still reaches Prefect's API (its ``api`` handler: the flow
    run's log in the UI). Prefect's console handler is the root logger's: its level is set by
    the environment when Prefect configures logging on import, and on the handler itself when
    Prefect was imported already. Both are put back on exit."""
    before = os.environ.get(_CONSOLE_LEVEL)
    os.environ[_CONSOLE_LEVEL] = level
    handlers: list[tuple[logging.Handler, int]] = []
    try:
        from prefect.logging.handlers import PrefectConsoleHandler  # configures Prefect's logging

        handlers = [(h, h.level) for h in logging.getLogger().handlers if isinstance(h, PrefectConsoleHandler)]
        for handler, _ in handlers:
            handler.setLevel(level)
        yield
    finally:
        for handler, was in handlers:
            handler.setLevel(was)
        if before is None:
            os.environ.pop(_CONSOLE_LEVEL, None)
        else:
            os.environ[_CONSOLE_LEVEL] = before


def _exit_in_order(signum: int, frame) -> None:
    raise SystemExit(128 + signum)


def note_signals() -> None:
    """Have every signal that reaches a Python handler noted, whichever handler that is."""
    global _noted
    if _noted is None:
        read, write = os.pipe()
        os.set_blocking(read, False)
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        _noted = read


def _signals_noted() -> set[int]:
    try:
        return set(os.read(_noted, 4096)) if _noted is not None else set()
    except BlockingIOError:
        return set()


STOPPED = 128 + signal.SIGTERM


def stopped_by_sigterm(exc: BaseException) -> bool:
    """Whether the command ending with ``exc`` was stopped by SIGTERM and must exit 128 + 15
    rather than as ``exc`` says: during a flow Prefect's handler takes the signal, and a DuckDB
    query it interrupts raises "Query interrupted", which would end the command as a failure (1)."""
    return not (isinstance(exc, SystemExit) and exc.code == STOPPED) and signal.SIGTERM in _signals_noted()
