"""Prefect's temporary API server (ephemeral mode), started so that it dies with the
process that started it, even when that process is killed (SIGKILL, the OOM killer).

Prefect starts it as a child process (``SubprocessASGIServer``) and stops it from an
``atexit`` hook, which a killed process never runs: the server stayed, orphaned and
listening (~211 MiB each). Here the same server is started by our own command, which
asks Linux to kill it when its parent dies (``prctl(PR_SET_PDEATHSIG, SIGKILL)``, kept
across the ``exec`` of uvicorn) before it becomes the server. The instance is Prefect's
own (the one ``SubprocessASGIServer()`` returns in this process), so Prefect's clients
find it running and start no other.

The death signal follows the *thread* that started the server: start it from the main
thread (``dumpscope run`` does). Elsewhere than Linux, Prefect's own start is used.
"""

from __future__ import annotations

import os
import subprocess
import sys

# Run by ``python -c`` with argv: the parent's pid, then uvicorn's arguments. PR_SET_PDEATHSIG
# is option 1 of prctl, SIGKILL signal 9. A parent that died before prctl ran is caught by
# comparing getppid with the pid it was given.
_DIE_WITH_PARENT = (
    "import ctypes, os, sys\n"
    "if ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0) != 0 or os.getppid() != int(sys.argv[1]):\n"
    "    os._exit(1)\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])\n"
)


def temporary_server():
    """Prefect's temporary API server for this process, running, dying with it; its
    ``api_url`` is what the flow's clients talk to."""
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()  # Prefect's own instance for this process (keyed by port None)
    if sys.platform == "linux" and not server.running:
        server._run_uvicorn_command = lambda: _start_uvicorn(server.port)  # Prefect's start, our command
    server.start()
    return server


def _start_uvicorn(port: int) -> subprocess.Popen:
    """Prefect 3's ``SubprocessASGIServer._run_uvicorn_command``, through ``_DIE_WITH_PARENT``."""
    import prefect
    from prefect.settings import get_current_settings

    env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1",
           **get_current_settings().to_environment_variables(exclude_unset=True)}
    uvicorn = ["-m", "uvicorn", "--app-dir", str(prefect.__module_path__.parent), "--factory",
               "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(port),
               "--log-level", "error", "--lifespan", "on"]
    return subprocess.Popen([sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), *uvicorn], env=env)


__all__ = ["temporary_server"]
