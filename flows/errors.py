"""The one error type a person can act on: ``CommandError``, carrying the exit status.

Any layer raises it (or a subclass: a bucket that cannot be used, a busy warehouse, a run
that does not exist...); ``flows.cli`` turns it into one line on stderr (``error: ...``)
and that exit status, in one place (``CommandError.line``). Imports nothing of ``flows``: every
layer may import it.

A subclass states its status on its ``class`` line, beside its other bases::

    class WarehouseBusy(CommandError, RuntimeError, exit_code=3): ...

and one raise may override it: ``CommandError("...", exit_code=2)``.
"""

from __future__ import annotations

# The exit statuses of a night that is published but owes the scheduler an answer
# (``flows.night_summary.NightSummary.exit_status``; a served run's state says the same).
FAILING = 4  # --fail-on found incidents
UNDELIVERED = 5  # a notification is owed (retried by the next run)


class CommandError(Exception):
    """A failure told in one line for people; ``exit_code`` is the command's exit status
    (1 by default: a failure; 2: a bad argument; 3: the warehouse is busy)."""

    exit_code: int = 1

    def __init_subclass__(cls, exit_code: int | None = None, **kwargs):
        super().__init_subclass__(**kwargs)
        if exit_code is not None:
            cls.exit_code = exit_code

    def __init__(self, *args, exit_code: int | None = None):
        super().__init__(*args)
        if exit_code is not None:
            self.exit_code = exit_code

    def line(self) -> str:
        """The message on one line, as plain text: a name in it (a bucket path, an address) may
        hold a line break or a control character."""
        from transforms.escape import plain_text

        return plain_text(str(self))
