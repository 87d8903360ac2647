"""Spark's Python workers start from fleetwatch's daemon (streaming.spark_daemon), in real Spark."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pandas as pd


def test_workers_run_under_the_fleetwatch_daemon(spark) -> None:
    def worker_facts(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        # Defined here, so that Spark ships it by value (tests are not importable by workers).
        import gc
        import sys

        for _ in batches:
            pass
        zipped = sorted(key for key, finder in sys.path_importer_cache.items()
                        if type(finder).__name__ == "zipimporter")
        yield pd.DataFrame({"daemon": [sys.argv[0]], "zipped": [json.dumps(zipped)],
                            "preloaded": ["streaming.pipeline.graph" in sys.modules],
                            "frozen": [gc.get_freeze_count()]})

    facts = spark.range(2).repartition(2).mapInPandas(
        worker_facts, "daemon string, zipped string, preloaded boolean, frozen long").collect()
    for row in facts:
        assert row.daemon.endswith("streaming/spark_daemon.py")
        # pyspark and py4j come from the installed packages: no zip importer re-reads its
        # archive before every task (importlib.invalidate_caches() in pyspark's worker).
        assert json.loads(row.zipped) == []
        # The job's modules were imported before the fork and are out of the collector's walk.
        assert row.preloaded
        assert row.frozen > 10_000
