"""Spark's Python worker daemon for fleetwatch (`spark.python.daemon.module`).

Spark starts one daemon per executor and Python executable; it forks a worker per concurrent
task and reuses it for later tasks. Three costs of the stock daemon showed up under py-spy in
bench/throughput.py, all paid again and again, not once:
- Before every task, a worker calls `importlib.invalidate_caches()`, which makes every zip
  importer re-read its archive's directory. With pyspark imported from Spark's `pyspark.zip`
  and spark-core's jar on the path (Spark puts it there) that is ~60 ms of CPU per task: the
  jar's 5,400 entries and the zip's 1,300, once per sub-package importer: 9-18% of the Python
  workers' samples at 1,000 clusters.
- Every forked worker imported pyspark.sql, pandas, pyarrow and pydantic for itself (pyspark from
  the zip, where Python keeps no bytecode, so compiling its source): 1-2 s of CPU per worker.
- After every task the daemon runs a full `gc.collect()` in the worker, which walks every object
  of those modules: ~55 ms per task, up to a fifth of the workers' time.

So this daemon imports pyspark from the installed package when Spark's zips are that very
package's own copies (a `pip install pyspark`, as here: same files, so nothing changes but the
importer), imports the job's modules once, before it forks, and then freezes those objects out
of the collector (`gc.freeze()`: they live as long as the process; what a task allocates is
still collected). On a cluster whose Spark ships its own pyspark, the zips stay first on the
path, as Spark intends.

A worker also hands the C heap's free memory back to the system after a task that left much of it
(`_release_free_heap`): glibc keeps what a task freed for the next one, and a worker that read and
detected a backlog's big micro-batches kept ~50 MB of it each through the live job after it
(bench/throughput.py's phases; `malloc_trim` from gdb returned it).
"""

from __future__ import annotations

import ctypes
import gc
import importlib.machinery
import socket
import sys
from collections.abc import Callable
from pathlib import Path

__all__: list[str] = []


_ARCHIVES = (".zip", ".jar")


def _installed_package_dir(name: str, path: list[str]) -> Path | None:
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def _prefer_installed_pyspark() -> None:
    """Drops the archives inside the installed pyspark package (its pyspark and py4j zips, and
    the spark-core jar Spark also puts on the path) from sys.path and from the importers that
    finding this module already cached for them, when pyspark and py4j import without them."""
    plain = [entry for entry in sys.path if not entry.endswith(_ARCHIVES)]
    pyspark_dir = _installed_package_dir("pyspark", plain)
    if pyspark_dir is None or _installed_package_dir("py4j", plain) is None:
        return
    bundled = [entry for entry in sys.path
               if entry.endswith(_ARCHIVES) and Path(entry).resolve().is_relative_to(pyspark_dir)]
    sys.path[:] = [entry for entry in sys.path if entry not in bundled]
    for cached in list(sys.path_importer_cache):
        if any(cached == archive or cached.startswith(archive + "/") for archive in bundled):
            del sys.path_importer_cache[cached]


_prefer_installed_pyspark()

# Free memory in the C heap above which a worker hands it back between tasks: below it, what a task
# frees is what the next one allocates again (each page handed back costs a page fault later).
_RELEASE_FREE_BYTES = 16 * 2**20


class _MallInfo2(ctypes.Structure):
    _fields_ = [(field, ctypes.c_size_t) for field in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _heap_release() -> Callable[[], None]:
    """A function that returns the C heap's free pages to the system (`malloc_trim`) when the heap
    holds more than `_RELEASE_FREE_BYTES` free (`mallinfo2`); one that does nothing where the C
    library is not glibc 2.33 or later."""
    try:
        libc = ctypes.CDLL(None)
        mallinfo2, malloc_trim = libc.mallinfo2, libc.malloc_trim
    except (OSError, AttributeError):
        return lambda: None
    mallinfo2.restype = _MallInfo2
    malloc_trim.argtypes = [ctypes.c_size_t]

    def release() -> None:
        if mallinfo2().fordblks > _RELEASE_FREE_BYTES:
            malloc_trim(0)

    return release


_release_free_heap = _heap_release()


def _releasing_free_heap(run_task: Callable[[socket.socket, bool], int]) -> Callable[[socket.socket, bool], int]:
    """pyspark.daemon's `worker`, which a forked worker calls once per task (after the daemon's
    `gc.collect()` of the task before), releasing the free heap first: as soon as the last task is
    done, before the worker waits for the next."""

    def worker(sock: socket.socket, authenticated: bool) -> int:
        _release_free_heap()
        return run_task(sock, authenticated)

    return worker


# Imported here, once, so that every forked worker starts with them loaded. pyspark.daemon
# reads the worker module to run (sys.argv[1]) when it is imported.
from pyspark import daemon  # noqa: E402

# The readers (which parse as they read) and the detection stages run here.
from streaming.pipeline import ParsingJsonlSource, ParsingKafkaDataSource, build_pipeline  # noqa: E402, F401

daemon.worker = _releasing_free_heap(daemon.worker)  # pyspark.daemon.manager() calls it by this name
gc.freeze()

if __name__ == "__main__":
    daemon.manager()
