"""Throughput, latency and scale of the streaming job, measured on this machine.

    .venv/bin/python bench/throughput.py --quick          # 1,000 clusters x 12 brokers
    .venv/bin/python bench/throughput.py                  # 100, 1,000 and 5,000 clusters, table + chart
    .venv/bin/python bench/throughput.py --quick --json   # last line: one JSON object
    .venv/bin/python bench/throughput.py --sources        # the two sources over a real Kafka 4.4 bus

Per fleet size, in one run and on one embedded Tansu broker per phase:
(a) raw ingest ceiling: a backlog pre-loaded from the simulator, read by the same source and
    parse stage as the job, into Spark's no-op sink;
(b) the full job's maximum throughput over the same backlog (detection, state, store);
(c) a live fleet at its real event rate (the simulator in its own process, started once the
    job has finished its first micro-batch, a fault every `--fault-every` seconds) for
    `--live-seconds`: offered rate (events sent / time), processed rate (rows of the batches
    that finished while the fleet ran / that time; "sustained" when it is within 2% of the
    offered rate and every event was processed), batch durations, consumer lag, and the
    detection latency of each alert: wall time from the moment its condition became
    detectable (the alert's `starts_at`: the live fleet's event time is wall time) to the
    moment its row was written to the store (`alert_history.recorded_at`);
(d) the yardstick (issue 45): the reference detector of bench/reference/ (plain Python, one process)
    and `fleetwatch replay`, each as the whole command, over the backlog's events as a file: their CPU
    per 100k events, replay's events/s against the reference's, and the live job's CPU per event
    against the reference's.

`--sources` measures only the ingest of a 1,000 x 12 backlog on a real Apache Kafka 4.4 broker
(`make jars`): read by Spark's kafka connector (the production source for a configured bus) and
by the project's Python reader, each with the parse stage into the no-op sink.

Throughput is input rows over the busy time of the batches after the first (Spark's
processedRowsPerSecond over the run; the first batch of a query starts its Python workers and
creates the detection state), so (a) and (b) compare like with like. Memory is the peak resident set
of this process, its JVM and Spark's Python workers together (the broker and the simulator
are the fleet, not fleetwatch, and are left out), and the peak proportional set size of the
same processes, which counts the pages the forked Python workers share once; that peak is also
given per phase (`peak_pss_by_phase_mb`), since (d)'s `fleetwatch replay` runs a Spark of its own
beside this process's idle one: the live job's memory is the "live" phase's.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

# bench/ is this script's folder, first on sys.path when it runs.
from replay_vs_reference import run_command
from sqlalchemy import select
from throughput_measures import (
    BatchListener,
    BatchLog,
    FleetResult,
    RssSampler,
    busy_rate,
    cpu_per_100k,
    events_per_s,
    iso_ms,
    limited_by,
    percentile,
    sent_events,
)
from throughput_report import print_table, write_chart

from streaming.bus import EmbeddedBus
from streaming.collect.simulate import FAULT_KINDS, FleetSpec, Simulation, produce_live, write_events
from streaming.config import FleetwatchConfig
from streaming.detect import SecondPass
from streaming.job import QUERY_NAME, CheckpointLayout, spark_session, start_live_query, stop_gracefully
from streaming.pipeline import build_pipeline, counting_messages, read_parsed_telemetry
from streaming.records import topics
from streaming.sinks import BatchWriter
from streaming.source import PYTHON_SOURCE, SPARK_SOURCE
from streaming.store import Store, alert_history
from streaming.workshop.kraft import KRaftCluster
from streaming.workshop.polling import poll

ROOT = Path(__file__).resolve().parents[1]
# Telemetry topics get several partitions, as in production: one partition per topic would cap
# the parse stage at one task per topic.
PARTITIONS = 4
BACKLOG_EVENTS = 800_000  # four full micro-batches at the default cap


def _drain(spark: SparkSession, query: StreamingQuery, log: BatchLog, name: str, total: int,
           timeout_s: float) -> None:
    poll(lambda: sum(b["rows"] for b in log.rows if b["query"] == name) >= total or not query.isActive,
         timeout_s, f"{name} to read {total} events", interval_s=0.5, error=TimeoutError)
    if query.exception() is not None:
        raise RuntimeError(f"{name} failed: {query.exception()}")
    stop_gracefully(spark, query)
    spark.sparkContext.setLogLevel("WARN")


def _produce_backlog(spec: FleetSpec, bootstrap: str) -> int:
    """The backlog's events, sent as fast as the bus takes them; the number sent."""
    return produce_live(Simulation(spec), bootstrap, realtime=False).sent


def preload(spec: FleetSpec, bootstrap: str) -> int:
    """`_produce_backlog` in a process of its own: the simulator is the fleet, not fleetwatch, and
    the memory it allocated would stay in this process, which the RSS sampler counts as the driver."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_produce_backlog, spec, bootstrap).result()


def backlog_spec(result: FleetResult) -> FleetSpec:
    """The fleet of the backlog phases (a) and (b), and of the yardstick (d): about BACKLOG_EVENTS events."""
    seconds = max(20, math.ceil(BACKLOG_EVENTS / events_per_s(result.clusters, result.brokers)))
    return FleetSpec(clusters=result.clusters, brokers=result.brokers, faults=FAULT_KINDS,
                     start_ms=1_764_000_000_000, duration_ms=seconds * 1000, fault_every_ms=20_000)


def _backlog_phases(spark: SparkSession, config: FleetwatchConfig, result: FleetResult, workdir: Path,
                    log: BatchLog, rss: RssSampler, progress: Callable[[str], None]) -> None:
    spec = backlog_spec(result)
    seconds = spec.duration_ms // 1000
    with EmbeddedBus(topics=topics.ALL, partitions=PARTITIONS, log_path=workdir / "tansu-backlog.log") as bus:
        progress(f"pre-loading {seconds} s of a {result.fleet} fleet into the broker")
        started = time.monotonic()
        result.backlog_events = sent = preload(spec, bus.bootstrap)
        progress(f"  {sent:,} events in {time.monotonic() - started:.0f} s")

        rss.excluded.add(bus.pid)
        progress("(a) raw ingest: source + parse + no-op sink")
        parsed = counting_messages(parsed_read(spark, config, bus.bootstrap))
        query = (parsed.writeStream.queryName("raw").format("noop")
                 .option("checkpointLocation", str(workdir / "cp-raw"))
                 .trigger(processingTime=f"{config.spark.trigger_ms} milliseconds").start())
        _drain(spark, query, log, "raw", sent, timeout_s=1800)
        _, result.raw_ingest_events_per_s = busy_rate(log, "raw")
        progress(f"  {result.raw_ingest_events_per_s:,.0f} events/s")

        progress("(b) full job over the same backlog")
        store = Store(f"sqlite:///{workdir / 'backlog.db'}")
        cpu_before = rss.cpu_s()
        telemetry = parsed_read(spark, config, bus.bootstrap)
        layout = CheckpointLayout.new(config.spark.state_buckets, config.spark.shuffle_partitions)
        query = (build_pipeline(telemetry, config.rule_book(), config.spark.state_buckets,
                                config.spark.max_records_per_batch, layout.time_mode, layout.bucket_keys)
                 .writeStream.queryName("full")
                 .foreachBatch(BatchWriter(store, second_pass=SecondPass(config.rule_book())))
                 .option("checkpointLocation", str(workdir / "cp-full"))
                 .trigger(processingTime=f"{config.spark.trigger_ms} milliseconds").start())
        _drain(spark, query, log, "full", sent, timeout_s=3600)
        result.full_cpu_s_per_100k = cpu_per_100k(cpu_before, rss.cpu_s(), sent)
        store.close()
        _, result.max_events_per_s = busy_rate(log, "full")
        result.ratio_to_raw = result.max_events_per_s / result.raw_ingest_events_per_s
        progress(f"  {result.max_events_per_s:,.0f} events/s ({result.ratio_to_raw:.2f} x raw)")


def _yardstick_phase(spec: FleetSpec, result: FleetResult, workdir: Path, progress: Callable[[str], None]) -> None:
    """(d) The yardstick (issue 45): the reference detector (bench/reference/, plain Python in one process)
    and `fleetwatch replay` over the backlog's events as a file, each the whole command a user would type.
    Their CPU per 100k events, and the ratios against the reference: the live job's CPU per event, and
    replay's events/s."""
    events = workdir / "backlog.jsonl"
    write_events(Simulation(spec), events)
    with events.open("rb") as fh:
        lines = sum(1 for _ in fh)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    progress(f"(d) the yardstick: the reference detector and fleetwatch replay over the backlog ({lines:,} events)")
    reference = run_command("reference", [sys.executable, str(ROOT / "bench/reference_detector.py"), str(events),
                                          "--alerts-out", str(workdir / "reference.jsonl")], env)
    replay = run_command("fleetwatch", [sys.executable, "-m", "streaming.cli", "replay", str(events),
                                        "--alerts-out", str(workdir / "replay.jsonl")], env)
    result.reference_cpu_s_per_100k = round(reference.cpu_s * 1e5 / lines, 2)
    result.replay_cpu_s_per_100k = round(replay.cpu_s * 1e5 / lines, 2)
    result.replay_to_reference = round(reference.wall_s / replay.wall_s, 2)
    live = result.live_cpu_s_per_100k.get("all")
    result.live_to_reference_cpu = None if live is None else round(live / result.reference_cpu_s_per_100k, 2)
    progress(f"  reference {result.reference_cpu_s_per_100k} CPU s per 100k events; replay "
             f"{result.replay_to_reference} x its events/s (whole command); live job {result.live_to_reference_cpu} x "
             "its CPU per event")


def parsed_read(spark: SparkSession, config: FleetwatchConfig, bootstrap: str,
                source: str = PYTHON_SOURCE) -> DataFrame:
    """The parse stage's rows of the telemetry, as the job reads them with `source`."""
    return read_parsed_telemetry(spark, bootstrap, topics.TELEMETRY, config.rule_book(), config.spark.state_buckets,
                                 config.spark.max_records_per_batch, source=source)


def _ingest(spark: SparkSession, config: FleetwatchConfig, bootstrap: str, source: str, name: str, total: int,
            workdir: Path, log: BatchLog) -> float:
    """Events/s of `source` + the parse stage into the no-op sink, over a backlog of `total`."""
    parsed = counting_messages(parsed_read(spark, config, bootstrap, source))
    query = (parsed.writeStream.queryName(name).format("noop")
             .option("checkpointLocation", str(workdir / f"cp-{name}"))
             .trigger(processingTime=f"{config.spark.trigger_ms} milliseconds").start())
    _drain(spark, query, log, name, total, timeout_s=1800)
    return busy_rate(log, name)[1]


def compare_sources(spark: SparkSession, config: FleetwatchConfig, clusters: int, brokers: int,
                    progress: Callable[[str], None]) -> dict[str, Any]:
    """The same backlog on one real Kafka 4.4 broker, read by both sources in turn."""
    log = BatchLog()
    listener = BatchListener(log)
    spark.streams.addListener(listener)
    rate = events_per_s(clusters, brokers)
    seconds = max(20, math.ceil(BACKLOG_EVENTS / rate))
    spec = FleetSpec(clusters=clusters, brokers=brokers, faults=FAULT_KINDS, start_ms=1_764_000_000_000,
                     duration_ms=seconds * 1000, fault_every_ms=20_000)
    try:
        with (tempfile.TemporaryDirectory(prefix="fleetwatch-bench-", ignore_cleanup_errors=True) as tmp,
              KRaftCluster(Path(tmp) / "kafka", brokers=1,
                           extra={"num.partitions": str(PARTITIONS)}) as kafka):
            workdir, bootstrap = Path(tmp), kafka.bootstrap[0]
            progress(f"pre-loading {seconds} s of a {clusters} x {brokers} fleet into Kafka 4.4 ({bootstrap})")
            sent = preload(spec, bootstrap)
            progress(f"  {sent:,} events")
            rates = {}
            for source in (SPARK_SOURCE, PYTHON_SOURCE):
                rates[source] = _ingest(spark, config, bootstrap, source, f"ingest_{source}", sent, workdir, log)
                progress(f"  {source}: {rates[source]:,.0f} events/s")
    finally:
        spark.streams.removeListener(listener)
    return {"fleet": f"{clusters}x{brokers}", "backlog_events": sent,
            "spark_connector_events_per_s": round(rates[SPARK_SOURCE]),
            "python_reader_events_per_s": round(rates[PYTHON_SOURCE]),
            "connector_to_python": round(rates[SPARK_SOURCE] / rates[PYTHON_SOURCE], 2)}


def _live_phase(spark: SparkSession, config: FleetwatchConfig, result: FleetResult, workdir: Path,
                log: BatchLog, rss: RssSampler, live_s: int, fault_every_s: int,
                progress: Callable[[str], None]) -> None:
    store_url = f"sqlite:///{workdir / 'live.db'}"
    store = Store(store_url)
    with EmbeddedBus(topics=topics.ALL, partitions=PARTITIONS, log_path=workdir / "tansu-live.log") as bus:
        rss.excluded.add(bus.pid)
        live_config = config.model_copy(update={
            "spark": config.spark.model_copy(update={"checkpoint_dir": str(workdir / "cp-live")})})
        job = start_live_query(spark, live_config, bus.bootstrap, store)
        # A deployment is up before faults happen: the fleet starts once the job has finished its
        # first (empty) micro-batch, which plans the query and starts Spark's Python workers.
        poll(lambda: any(b["query"] == QUERY_NAME for b in log.rows) or not job.query.isActive, 300,
             "the live job's first micro-batch", interval_s=0.5, error=TimeoutError)
        progress(f"(c) live fleet for {live_s} s, a fault every {fault_every_s} s")
        simulator = subprocess.Popen(
            [sys.executable, "-m", "streaming.cli", "simulate", "--bootstrap", bus.bootstrap,
             "--clusters", str(result.clusters), "--brokers", str(result.brokers), "--faults", "all",
             "--duration", str(live_s), "--fault-every", str(fault_every_s)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        rss.excluded.add(simulator.pid)
        cpu_before = rss.cpu_s()
        sim_started = time.time()
        try:
            output, _ = simulator.communicate(timeout=live_s + 30)
        except subprocess.TimeoutExpired:
            # It fell behind real time (a fleet larger than one Python process can produce):
            # stop it; it flushes and reports what it sent.
            simulator.send_signal(signal.SIGTERM)
            output, _ = simulator.communicate(timeout=120)
        sim_s = time.time() - sim_started
        if simulator.returncode not in (0, 130):
            raise RuntimeError(f"simulator failed: {output[-2000:]}")
        sent = sent_events(output)
        result.live_events = sent
        # The simulator may fall behind real time on a large fleet: what it offered is what it sent.
        result.offered_events_per_s = sent / sim_s
        consumed = lambda: sum(b["rows"] for b in log.rows if b["query"] == QUERY_NAME)  # noqa: E731
        try:
            poll(lambda: consumed() >= sent or not job.query.isActive, 120, "the job to read the live events",
                 interval_s=0.5, error=TimeoutError)
        except TimeoutError:
            progress(f"  the job had read {consumed():,} of {sent:,} events 120 s after the fleet stopped")
        if job.query.exception() is not None:
            raise RuntimeError(f"live job failed: {job.query.exception()}")
        result.live_cpu_s_per_100k = cpu_per_100k(cpu_before, rss.cpu_s(), consumed())
        job.stop()
        spark.streams.removeListener(job.recorder)  # it writes to this phase's store, deleted below
        spark.sparkContext.setLogLevel("WARN")
    batches = [b for b in log.rows if b["query"] == QUERY_NAME and b["rows"] > 0]
    result.live_processed = sum(b["rows"] for b in batches)
    # Processed = the job's rate while the fleet ran: the rows of the batches that finished
    # between its first batch with events and the fleet's end, over that time. With a steady lag
    # this equals the offered rate; a lag that grows makes it smaller.
    in_window = [b for b in batches if b["wall_ms"] <= (sim_started + sim_s) * 1000]
    if len(in_window) >= 2:
        span_s = (in_window[-1]["wall_ms"] - in_window[0]["wall_ms"]) / 1000
        result.processed_events_per_s = sum(b["rows"] for b in in_window[1:]) / span_s
    steady = batches[1:]  # the first batch with events also starts the detection stage's Python workers
    durations = [b["duration_ms"] for b in steady] or [0]
    result.max_batch_duration_ms = max(durations)
    result.median_batch_duration_ms = statistics.median(durations)
    result.p90_batch_duration_ms = percentile(durations, 0.9)
    lags = [(b["wall_ms"] - iso_ms(b["max_event"])) / 1000 for b in steady if b["max_event"]]
    result.max_lag_s = max(lags, default=0.0)
    result.final_lag_s = lags[-1] if lags else 0.0
    result.state_rows = max((b["state_rows"] for b in log.rows if b["query"] == QUERY_NAME), default=0)
    result.sustained = (result.live_processed >= sent
                        and result.processed_events_per_s >= 0.98 * result.offered_events_per_s)
    with store.engine.connect() as conn:
        fired = conn.execute(select(alert_history.c.body, alert_history.c.recorded_at)
                             .where(alert_history.c.status == "firing")).all()
    store.close()
    latencies: dict[str, list[int]] = {}
    for body, recorded_at in fired:
        alert = json.loads(body)
        latencies.setdefault(alert["rule"], []).append(recorded_at - alert["starts_at"])
    every = sorted(v for values in latencies.values() for v in values)
    result.alerts_measured = len(every)
    if every:
        result.p50_detection_latency_ms = float(statistics.median(every))
        result.p99_detection_latency_ms = float(percentile(every, 0.99))
    result.latencies_by_rule = {rule: float(max(v)) for rule, v in sorted(latencies.items())}
    result.latency_p50_p99_by_rule = {rule: [float(statistics.median(v)), float(percentile(v, 0.99))]
                                      for rule, v in sorted(latencies.items())}


def run_fleet(spark: SparkSession, config: FleetwatchConfig, clusters: int, brokers: int, live_s: int,
              fault_every_s: int, progress: Callable[[str], None]) -> FleetResult:
    result = FleetResult(fleet=f"{clusters}x{brokers}", clusters=clusters, brokers=brokers)
    log = BatchLog()
    listener = BatchListener(log)
    spark.streams.addListener(listener)
    try:
        with (tempfile.TemporaryDirectory(prefix="fleetwatch-bench-", ignore_cleanup_errors=True) as tmp,
              RssSampler() as rss):
            workdir = Path(tmp)
            rss.phase = "backlog"
            _backlog_phases(spark, config, result, workdir, log, rss, progress)
            rss.phase = "live"
            _live_phase(spark, config, result, workdir, log, rss, live_s, fault_every_s, progress)
            rss.phase = "yardstick"
            _yardstick_phase(backlog_spec(result), result, workdir, progress)
            result.peak_rss_mb = round(rss.peak_bytes / 2**20, 1)
            result.peak_rss_parts_mb = {kind: round(n / 2**20, 1) for kind, n in rss.peak_parts.items()}
            result.peak_pss_mb = round(rss.peak_pss_bytes / 2**20, 1)
            result.peak_pss_parts_mb = {kind: round(n / 2**20, 1) for kind, n in rss.peak_pss_parts.items()}
            result.peak_pss_by_phase_mb = {phase: {k: round(n / 2**20, 1) for k, n in {"all": sum(parts.values()),
                                                                                        **parts}.items()}
                                           for phase, parts in rss.peak_pss_by_phase.items()}
    finally:
        spark.streams.removeListener(listener)
    result.limited_by = limited_by(result)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="only the 1,000-cluster fleet (under 20 minutes)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per fleet, the last line last")
    parser.add_argument("--clusters", type=int, nargs="+", metavar="N",
                        help="fleet sizes to measure (default 100 1000 5000; --quick: 1000)")
    parser.add_argument("--brokers", type=int, default=12, help="brokers per cluster (default 12)")
    parser.add_argument("--live-seconds", type=int, default=180, help="length of the live phase (default 180)")
    # A fault a second: over 180 s, more than 100 alerts to measure the detection latency on.
    parser.add_argument("--fault-every", type=int, default=1, help="seconds between live faults (default 1)")
    parser.add_argument("--out", type=Path, default=Path("bench/out"), help="where the chart goes (default bench/out)")
    parser.add_argument("--sources", action="store_true",
                        help="only compare the two sources' ingest over a real Kafka 4.4 bus (1,000 clusters)")
    args = parser.parse_args(argv)
    sizes = args.clusters or ([1000] if args.quick else [100, 1000, 5000])
    chart = not (args.json or args.sources)
    if chart and not any(map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))):
        # Checked first: the PNG is written last, after the whole measurement.
        parser.exit(2, "bench/throughput.py: the PNG chart needs Chromium on the PATH (`make system` installs it), "
                       "or pass --json\n")

    def progress(text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    config = FleetwatchConfig()
    os.environ.setdefault("FLEETWATCH_LOG_LEVEL", "WARNING")
    spark = spark_session(config, "fleetwatch-bench")
    # Ctrl-C stops the bench and every process it started (brokers, simulator, JVM).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results = []
    try:
        if args.sources:
            compared = compare_sources(spark, config, (args.clusters or [1000])[0], args.brokers, progress)
            print(json.dumps(compared) if args.json else
                  f"{compared['fleet']}, {compared['backlog_events']:,} events on Kafka 4.4: Spark's connector "
                  f"{compared['spark_connector_events_per_s']:,} events/s, Python reader "
                  f"{compared['python_reader_events_per_s']:,} events/s ({compared['connector_to_python']:.2f} x)")
            return 0
        for clusters in sizes:
            progress(f"fleet {clusters} x {args.brokers}")
            results.append(run_fleet(spark, config, clusters, args.brokers, args.live_seconds, args.fault_every,
                                     progress))
            progress(f"  result: {json.dumps(results[-1].json_line())}")  # kept if a later fleet fails
    finally:
        spark.stop()
    if args.json:
        for r in results:
            print(json.dumps(r.json_line()))
        return 0
    print_table(results)
    for path in write_chart(results, args.out):
        print(f"chart: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
