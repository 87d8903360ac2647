"""`python -m streaming.job.startup`: what makes Spark start fast, prepared once by `make`.

Every start of the job (`run`, `replay`, `demo`, the tests' and benches' sessions) paid twice for
work whose result never changes between starts:

1. **pyspark's bytecode.** Spark starts its Python processes with its `pyspark.zip` (and
   py4j's) first on the path, and Python keeps no bytecode for what it imports from a zip: each
   process compiled pyspark's sources again, 0.5 s of CPU. `streaming.job.spark_daemon` takes the installed package
   instead for the UDF workers, but the data source's planners and streaming runner, and the
   state driver, are Spark's stock modules, started one after another (7 in a replay). This
   adds, beside each module of the archive, its bytecode as an unchecked-hash `.pyc`, which
   zipimport loads without comparing times. The sources stay, so tracebacks are unchanged; an
   interpreter of another Python version ignores the `.pyc` (another magic number).
2. **The JVM's classes.** The driver's JVM loaded and verified Spark's classes from its jars at
   every start: half of the 6 s a session took to run its first job. This runs a small replay
   once in a JVM that writes the classes it loaded to an archive at exit (AppCDS,
   `-XX:ArchiveClassesAtExit`); `spark_session` starts the JVM with that archive when one was
   made for this pyspark and this Java (`class_archive`), and without it otherwise.

A Spark installed elsewhere (SPARK_HOME) is left alone: its zips are that installation's.
Nothing here is needed for correctness: a step that fails says why in one line and the job
starts as before.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from streaming.job.prepared import ARCHIVE_PREFIX, bundled_zips, class_archive, precompile

__all__ = ["build_class_archive", "main"]

_DUMP_TIMEOUT_S = 600
_SIMULATED_START_MS = 1_764_000_000_000  # any real time: the contract refuses a `ts` before 2000


def _dump_classes(target: Path) -> None:
    """In this process: a small replay in a JVM that writes the classes it loaded to `target` at exit."""
    from streaming.collect.simulate import FAULT_KINDS, FleetSpec, Simulation, write_events
    from streaming.config import FleetwatchConfig
    from streaming.job.replay import replay_file

    with tempfile.TemporaryDirectory(prefix="fleetwatch-classes-") as work:
        events = Path(work) / "events.jsonl"
        spec = FleetSpec(clusters=2, brokers=3, faults=FAULT_KINDS, start_ms=_SIMULATED_START_MS, duration_ms=60_000)
        write_events(Simulation(spec), events)
        defaults = FleetwatchConfig().spark.driver_java_options
        config = FleetwatchConfig.model_validate({"spark": {
            "master": "local[2]", "checkpoint_dir": str(Path(work) / "checkpoint"),
            "driver_java_options": f"{defaults} -XX:ArchiveClassesAtExit={target}"}})
        replay_file(events, Path(work) / "alerts.jsonl", config)
    from pyspark import SparkContext

    jvm = SparkContext._gateway.proc if SparkContext._gateway is not None else None
    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    if jvm is not None:
        jvm.stdin.close()  # the gateway exits at the end of its input, and writes the archive then
        jvm.wait(timeout=_DUMP_TIMEOUT_S)


def build_class_archive() -> str:
    """Make the class archive for this environment unless it exists; one line saying what happened."""
    target = class_archive()
    if target is None:
        return "no java found: the JVM starts without a class archive"
    if target.is_file():
        return f"{target}: already made"
    target.parent.mkdir(parents=True, exist_ok=True)
    for old in target.parent.glob(f"{ARCHIVE_PREFIX}*"):
        old.unlink()  # made for another pyspark or Java
    partial = target.with_name(target.name + ".partial")
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "streaming.job.startup", "--dump-classes", str(partial)],
                         capture_output=True, text=True, timeout=_DUMP_TIMEOUT_S, check=False)
    if run.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        last = (run.stderr.strip().splitlines() or ["no output"])[-1]
        return f"could not make the JVM class archive (exit {run.returncode}: {last}); the JVM starts without it"
    os.replace(partial, target)
    return f"{target}: made in {time.monotonic() - started:.0f} s ({target.stat().st_size // 2**20} MB)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m streaming.job.startup",
                                     description="Prepare pyspark's bytecode and the JVM's class archive "
                                                 "(run by make).")
    parser.add_argument("--dump-classes", type=Path, metavar="ARCHIVE",
                        help="(internal) run a small replay in a JVM that writes its classes to ARCHIVE at exit")
    args = parser.parse_args(argv)
    if args.dump_classes:
        _dump_classes(args.dump_classes)
        return 0
    zips = bundled_zips()
    if not zips:
        print("pyspark ships no zips here (not pip-installed): nothing to precompile")
    for archive in zips:
        added = precompile(archive)
        print(f"{archive}: bytecode added for {added} modules" if added else f"{archive}: already precompiled")
    print(build_class_archive())
    return 0


if __name__ == "__main__":
    sys.exit(main())
