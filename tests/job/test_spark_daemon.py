"""The processes fleetwatch starts Spark in, in real Spark: the Python workers from fleetwatch's
daemon (streaming.job.spark_daemon), the driver's JVM with `spark.driver_java_options` and the class
archive, the stock Python processes from a precompiled pyspark.zip (streaming.job.startup)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator

import pandas as pd
import psutil
import pytest
from support.paths import EXAMPLES

from streaming.job import replay_file
from streaming.job.prepared import bundled_zips, class_archive, precompile
from streaming.workshop.polling import poll

pytestmark = pytest.mark.spark


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
        assert row.daemon.endswith("streaming/job/spark_daemon.py")
        # pyspark and py4j come from the installed packages: no zip importer re-reads its
        # archive before every task (importlib.invalidate_caches() in pyspark's worker).
        assert json.loads(row.zipped) == []
        # The job's modules were imported before the fork and are out of the collector's walk.
        assert row.preloaded
        assert row.frozen > 10_000


def test_a_worker_hands_the_heap_a_task_freed_back_to_the_system_before_the_next_task(spark) -> None:
    def fragment_heap(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        import builtins
        import os

        import psutil

        for _ in batches:
            pass
        # 200 MB of 1 KB blocks (above pymalloc's 512 B: from the C heap), freed but the last one,
        # which the worker keeps: the heap's top stays in use, so glibc cannot shrink it by itself.
        blocks = [bytes(1024) for _ in range(200_000)]
        builtins.fleetwatch_test_kept_block = blocks[-1]
        del blocks
        yield pd.DataFrame({"pid": [os.getpid()], "rss": [psutil.Process().memory_info().rss]})

    (pid, rss_after_task), = spark.range(1, numPartitions=1).mapInPandas(fragment_heap, "pid long, rss long").collect()
    worker = psutil.Process(pid)
    poll(lambda: worker.memory_info().rss < rss_after_task - 150 * 2**20, 30,
         lambda: f"worker {pid} to hand back the freed heap (RSS {rss_after_task >> 20} MB after its task, "
                 f"{worker.memory_info().rss >> 20} MB now)")


def test_both_stages_of_the_job_share_one_pool_of_python_workers(spark, test_config, tmp_path) -> None:
    # Spark keeps one daemon, with its own idle workers, per set of worker environment variables.
    out = tmp_path / "alerts.jsonl"
    replay_file(EXAMPLES / "identity.jsonl", out, test_config)
    assert out.read_text().strip(), "the replay raised no alert: its stateful stage did not run"
    jvm = psutil.Process(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    daemons = [cmdline for cmdline in map(_cmdline, jvm.children()) if "streaming.job.spark_daemon" in cmdline]
    assert len(daemons) == 1, [" ".join(cmdline) for cmdline in daemons]


def _cmdline(process: psutil.Process) -> list[str]:
    """A process's command line; none for one that ended (a Python runner of an earlier query
    the JVM has not reaped yet is a zombie)."""
    try:
        return process.cmdline()
    except (psutil.ZombieProcess, psutil.NoSuchProcess):
        return []


def test_the_driver_jvm_runs_with_the_configured_options(spark, test_config) -> None:
    # The conftest's session is the first Spark of the test process: it launched the JVM.
    wanted = test_config.spark.driver_java_options.split()
    management = spark.sparkContext._jvm.java.lang.management.ManagementFactory
    assert wanted == ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-XX:MinHeapFreeRatio=10",
                      "-XX:MaxHeapFreeRatio=30", "-XX:TrimNativeHeapInterval=10000"]
    assert [option for option in management.getRuntimeMXBean().getInputArguments() if option in wanted] == wanted
    # The serial collector's two generations (a heap that G1 would keep at its peak: runtime.py says why).
    assert sorted(bean.getName() for bean in management.getGarbageCollectorMXBeans()) == ["Copy", "MarkSweepCompact"]


def test_the_pyspark_zip_that_spark_puts_first_on_the_path_is_loaded_as_bytecode() -> None:
    # `make` precompiled it: the Python processes Spark starts with its stock modules (the data
    # source's planners, its streaming runner) do not compile pyspark's sources at every start.
    zips = {path.name.split("-")[0].removesuffix(".zip"): path for path in bundled_zips()}
    script = "import pyspark.sql.types as s, py4j.java_gateway as g; print(s.__file__); print(g.__file__)"
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(map(str, zips.values()))})
    assert loaded.stdout.split() == [f"{zips['pyspark']}/pyspark/sql/types.pyc",
                                     f"{zips['py4j']}/py4j/java_gateway.pyc"]


def test_precompiling_an_archive_keeps_its_sources_and_runs_once(tmp_path) -> None:
    archive = tmp_path / "lib.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("pkg/__init__.py", "")
        zf.writestr("pkg/mod.py", "def answer():\n    raise ValueError('from the source line')\n")
    assert precompile(archive) == 2 and precompile(archive) == 0
    script = ("import traceback, pkg.mod as m\ntry:\n    m.answer()\nexcept ValueError:\n"
              "    print(m.__file__); traceback.print_exc()")
    run = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(archive)},
                         capture_output=True, text=True, check=True)
    assert run.stdout.strip() == f"{archive}/pkg/mod.pyc"
    assert "raise ValueError('from the source line')" in run.stderr  # the source is still there


def test_a_driver_jvm_fleetwatch_starts_loads_sparks_classes_from_the_archive_make_made(tmp_path) -> None:
    archive = class_archive()
    assert archive is not None and archive.is_file(), "make did not make the class archive"
    log = tmp_path / "classes.log"
    script = (
        "from streaming.config import FleetwatchConfig\n"
        "from streaming.job import spark_session\n"
        "options = FleetwatchConfig().spark.driver_java_options + ' -Xlog:class+load=info:file=" + str(log) + "'\n"
        "spark = spark_session(FleetwatchConfig.model_validate({'spark': {'master': 'local[1]', "
        "'driver_java_options': options}}))\n"
        "spark.range(3).count()\n"
        "spark.stop()\n")
    subprocess.run([sys.executable, "-c", script], capture_output=True, check=True, timeout=300)
    # Spark's classes read from a file: from the archive `make` made (the top layer over the
    # JDK's own archive), or from a jar. (Lambdas and proxies are made at run time, from neither.)
    sources = [line.split(" source: ", 1)[1] for line in log.read_text().splitlines()
               if "org.apache.spark." in line and " source: " in line]
    from_archive = sources.count("shared objects file (top)")
    from_jars = sum(1 for source in sources if source.startswith(("jar:", "file:")))
    assert from_archive > 1000 and from_archive > 10 * from_jars
