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
"""

from __future__ import annotations

import gc
import importlib.machinery
import sys
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

# Imported here, once, so that every forked worker starts with them loaded. pyspark.daemon
# reads the worker module to run (sys.argv[1]) when it is imported.
from pyspark import daemon  # noqa: E402

# The readers (which parse as they read) and the detection stages run here.
from streaming.pipeline import ParsingJsonlSource, ParsingKafkaDataSource, build_pipeline  # noqa: E402, F401

gc.freeze()

if __name__ == "__main__":
    daemon.manager()
