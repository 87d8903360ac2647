"""`fleetwatch demo`: the whole product on the embedded default, in one command.

Embedded Tansu broker, a simulated fleet with a fault about every minute, the Spark job, and
the dashboard on http://127.0.0.1:8050. Ctrl-C (or SIGTERM) stops every part.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from streaming import topics
from streaming.bus import EmbeddedBus
from streaming.collect.simulate import FAULT_KINDS, FleetSpec, Simulation, produce_live
from streaming.config import FleetwatchConfig
from streaming.job import spark_session
from streaming.live import AlertPublisher, start_job, stop_gracefully, stop_on_signals
from streaming.sinks.store import Store

__all__ = ["run_demo"]

log = logging.getLogger(__name__)


def run_demo(config: FleetwatchConfig, *, clusters: int, brokers: int, port: int, workdir: Path) -> int:
    stop = threading.Event()
    stop_on_signals(stop)
    # A demo starts from scratch: old state would replay an old fleet's alerts.
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    store_url = f"sqlite:///{workdir / 'fleetwatch.db'}"
    store = Store(store_url)
    config = config.model_copy(update={
        "spark": config.spark.model_copy(update={"checkpoint_dir": str(workdir / "checkpoint")}),
    })
    dashboard: subprocess.Popen | None = None
    with EmbeddedBus(topics=topics.ALL, log_path=workdir / "tansu.log") as bus:
        print(f"embedded broker on {bus.bootstrap}", file=sys.stderr)
        spec = FleetSpec(clusters=clusters, brokers=brokers, faults=FAULT_KINDS,
                         start_ms=int(time.time() * 1000), duration_ms=7 * 24 * 3600 * 1000,
                         fault_every_ms=60_000, first_fault_ms=30_000)
        simulator = threading.Thread(
            target=produce_live, name="simulator", daemon=True,
            args=(Simulation(spec), bus.bootstrap), kwargs={"realtime": True, "stop": stop})
        simulator.start()
        dashboard = subprocess.Popen([sys.executable, "-m", "streaming.cli", "dashboard",
                                      "--store-url", store_url, "--port", str(port)])
        spark = spark_session(config, "fleetwatch-demo")
        stop_on_signals(stop)
        publisher = AlertPublisher(bus.bootstrap)
        query, _ = start_job(spark, config, bus.bootstrap, store, publisher)
        print(f"dashboard on http://127.0.0.1:{port}  (Ctrl-C stops everything)", file=sys.stderr)
        try:
            while not stop.is_set() and query.isActive:
                stop.wait(1.0)
            failure = query.exception()
        finally:
            print("stopping...", file=sys.stderr)
            stop.set()
            stop_gracefully(spark, query)
            publisher.close()
            spark.stop()
            if dashboard is not None:
                dashboard.terminate()
                try:
                    dashboard.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    dashboard.kill()
            simulator.join(timeout=10)
            store.close()
    if failure is not None:
        print(f"fleetwatch demo: the streaming job failed: {failure}", file=sys.stderr)
        return 1
    return 0
