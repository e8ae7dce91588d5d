"""The one measurement harness of ``benchmarks/``: wall time, CPU time, peak RSS, best-of-N, JSON.

A command (``run``, ``run_json``) is measured in a fresh process, started by a launcher
(``_LAUNCHER``: Python with nothing but ``os``, ``sys`` and ``json`` imported, ~10 MiB)
that spawns it and reports ``os.wait4``'s rusage. Linux keeps a process's peak RSS across
fork and exec (a child started by vfork, as ``subprocess`` does, inherits its parent's
peak): a command started straight from a benchmark that had grown would report the
benchmark's peak as its own. Through the launcher its floor is the launcher's. Figures:

- ``wall_s``: ``time.perf_counter`` from the command's spawn to its exit (in the launcher);
- ``cpu_s`` (``cpu_user_s`` + ``cpu_sys_s``): CPU time of the command and of every
  descendant it waited for (wait4);
- ``peak_rss_mib``: the largest single process among those (wait4's ``ru_maxrss``);
- ``peak_rss_tree_mib``: the largest sum of RSS over the command's whole process tree
  (Prefect's server, parse workers...), polled every ``poll_s`` with psutil;
  ``max_processes``: the most processes seen in it at once.

In a process: ``best_of(fn, n)`` (the least wall and the least CPU seconds of ``n``
calls), ``peak_rss_self_mib()`` (``VmHWM``: this process's peak since its exec).
``best(runs)`` picks the fastest of several runs; ``write_json`` writes the figures.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

MiB = 1 << 20

_LAUNCHER = r"""
import json, os, sys, time
report, setsid, argv = sys.argv[1], sys.argv[2] == "1", sys.argv[3:]
t0 = time.perf_counter()
pid = os.posix_spawnp(argv[0], argv, os.environ, setsid=setsid)
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
with open(report, "w") as out:
    json.dump({"returncode": os.waitstatus_to_exitcode(status), "wall_s": wall,
               "cpu_user_s": ru.ru_utime, "cpu_sys_s": ru.ru_stime,
               "peak_rss_mib": ru.ru_maxrss / 1024, "oublock_bytes": ru.ru_oublock * 512}, out)
"""


def run(argv: list[str], *, cwd: Path | str | None = None, env: dict | None = None, stdout=None, stderr=None,
        capture: bool = False, timeout: float | None = None, new_session: bool = False, poll_s: float = 0.05,
        on_poll: Callable[[list[psutil.Process]], None] | None = None) -> dict:
    """Run ``argv`` in a fresh process and measure it (module docstring).

    ``stdout``/``stderr``: file objects (or ``subprocess.STDOUT`` for stderr), passed on;
    ``capture``: keep the output instead, as ``stdout`` and ``stderr`` in the result (with
    ``stderr=subprocess.STDOUT``, both in ``stdout``). ``timeout``: SIGKILL the command's
    tree after that many seconds (``timed_out``). ``new_session``: the command leads a
    session of its own. ``on_poll``: called with the tree's processes at each poll.
    """
    with tempfile.TemporaryDirectory(prefix="bench-harness-") as tmp:
        report = Path(tmp, "rusage.json")
        files = []
        if capture:
            files = [open(Path(tmp, "out"), "w+b"), open(Path(tmp, "err"), "w+b")]
            stdout, stderr = files[0], stderr if stderr == subprocess.STDOUT else files[1]
        try:
            t0 = time.perf_counter()
            launcher = subprocess.Popen([sys.executable, "-c", _LAUNCHER, str(report), "1" if new_session else "0",
                                         *map(str, argv)], cwd=cwd, env=env, stdout=stdout, stderr=stderr)
            root = psutil.Process(launcher.pid)
            peak_tree, peak_procs, timed_out = 0, 0, False
            while launcher.poll() is None:
                try:
                    tree = root.children(recursive=True)
                except psutil.Error:
                    tree = []
                rss = 0
                for p in tree:
                    try:
                        rss += p.memory_info().rss
                    except psutil.Error:
                        pass
                if on_poll:
                    on_poll(tree)
                peak_tree, peak_procs = max(peak_tree, rss), max(peak_procs, len(tree))
                if timeout is not None and time.perf_counter() - t0 > timeout:
                    if not tree:  # the launcher has not spawned the command yet (a loaded machine): it goes
                        launcher.kill()
                    timed_out = True
                    _kill(tree, new_session)  # each poll: a command spawned since the last is killed too
                try:
                    launcher.wait(poll_s)
                except subprocess.TimeoutExpired:
                    pass
            got = json.loads(report.read_text()) if report.exists() else {  # the launcher itself failed
                "returncode": launcher.returncode, "wall_s": time.perf_counter() - t0, "cpu_user_s": 0.0,
                "cpu_sys_s": 0.0, "peak_rss_mib": 0.0, "oublock_bytes": 0}
            text = {}
            if capture:
                for name, f in zip(("stdout", "stderr"), files):
                    f.seek(0)
                    text[name] = f.read().decode(errors="replace")
        finally:
            for f in files:
                f.close()
    return got | {"cpu_s": got["cpu_user_s"] + got["cpu_sys_s"],
                  "peak_rss_tree_mib": peak_tree / MiB, "max_processes": peak_procs, "timed_out": timed_out} | text


def _kill(tree: list[psutil.Process], group: bool) -> None:
    if group and tree:
        try:
            os.killpg(tree[0].pid, signal.SIGKILL)  # the session (and group) the command leads
            return
        except OSError:
            pass
    for p in tree:
        try:
            p.kill()
        except psutil.Error:
            pass


def run_json(argv: list[str], **kw) -> tuple[dict, dict]:
    """``run`` a command that prints one JSON object as its last line of output: that object,
    and the measurement. A failed command raises with its stderr."""
    m = run(argv, capture=True, **kw)
    if m["returncode"] != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))[-200:]}: exit {m['returncode']}\n{m['stderr'][-3000:]}")
    return json.loads(m["stdout"].strip().splitlines()[-1]), m


def best_of(fn: Callable[[], object], n: int = 3, *, warm: int = 0) -> dict:
    """Call ``fn`` ``warm`` times unmeasured, then ``n`` times: the least wall and the least CPU
    seconds (each on its own: a shared machine's load falls on the wall clock), every figure,
    and the last call's result."""
    for _ in range(warm):
        fn()
    walls, cpus, result = [], [], None
    for _ in range(max(n, 1)):
        w, c = time.perf_counter(), time.process_time()
        result = fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return {"wall_s": min(walls), "cpu_s": min(cpus), "walls_s": walls, "cpus_s": cpus, "result": result}


def best(runs: list[dict], key: str = "wall_s") -> dict:
    """The run with the least ``key`` (best of N)."""
    return min(runs, key=lambda r: r[key])


def peak_rss_self_mib() -> float:
    """This process's peak RSS since its exec (``VmHWM``; ``ru_maxrss`` would include what a
    parent held at the fork)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise OSError("no VmHWM in /proc/self/status")


def write_json(path: Path | str, figures: object, indent: int = 1) -> Path:
    """The figures as JSON (values JSON does not know as strings), parent directories made."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(figures, indent=indent, default=str) + "\n")
    return path


def add_json_option(parser, default: Path | None) -> None:
    """``--json FILE``: where a benchmark writes its figures."""
    parser.add_argument("--json", type=Path, default=default, metavar="FILE",
                        help=f"write the figures here as JSON (default: {default or 'none'})")
