"""Where a night's parsing runs: the process pool the nightly's parse tasks hand their chunks
to (``stage_chunk``), and, for a local bucket, the threads that recognise contents the
warehouse holds already (``recognise_held``: hashed, not parsed).

Parsing is CPU-bound Python: the Prefect task stays a cheap thread and the chunk runs in a
worker process started with ``spawn``, not ``fork`` (the flow process runs Prefect's
threads). One pool per night, created by the first task that needs it and shut down once
the parse is over; each worker exits with the process that started it
(``staging.exit_with_parent``). A spawned worker imports this module and
``flows.ingest.staging``: neither imports Prefect nor DuckDB (``tests/test_layout.py``).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

from flows.ingest import staging
from flows.ingest.bucket_access import connect
from flows.ingest.staging import Outcome, exit_with_parent
from transforms.layout import BucketObject

_POOL: ProcessPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def process_pool(workers: int) -> ProcessPoolExecutor:
    """The night's pool of ``workers`` processes (created at the first call)."""
    global _POOL
    with _POOL_LOCK:  # parse_chunk tasks run in threads: create the pool once, not once per thread
        if _POOL is None:  # spawn, not fork: the flow process runs Prefect's threads
            _POOL = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                        initializer=exit_with_parent, initargs=(os.getpid(),))
        return _POOL


def shut_down_pool() -> None:
    """Wait for the pool's workers to finish and let them go (their memory is not needed again)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is not None:
            _POOL.shutdown(wait=True)
            _POOL = None


def recognise_held(bucket: str, storage_options: dict | None, objects: list[BucketObject], staging_dir: Path,
                   held: dict[str, dict], workers: int) -> list[Outcome]:
    """Outcomes of the objects whose content the warehouse holds (``staging.recognise_held``),
    for a local bucket; the others are left to the parse workers."""
    if not held or not objects:
        return []
    fs, _ = connect(bucket, storage_options)
    if "file" not in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)):
        return []
    with ThreadPoolExecutor(max_workers=workers) as threads:
        found = threads.map(lambda o: staging.recognise_held(fs, o, staging_dir, held), objects)
        return [Outcome(o, r) for o, r in zip(objects, found) if r is not None]


def chunks_of(items: list, n: int) -> list[list]:
    """``items`` in at most ``n`` chunks of equal size (the last shorter): one parse task each."""
    if not items:
        return []
    size = max(1, -(-len(items) // n))
    return [items[i : i + size] for i in range(0, len(items), size)]
