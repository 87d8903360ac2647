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
    moment its row was written to the store (`alert_history.recorded_at`).

`--sources` measures only the ingest of a 1,000 x 12 backlog on a real Apache Kafka 4.4 broker
(`make jars`): read by Spark's kafka connector (the production source for a configured bus) and
by the project's Python reader, each with the parse stage into the no-op sink.

Throughput is input rows over the busy time of the batches after the first (Spark's
processedRowsPerSecond over the run; the first batch of a query starts its Python workers and
creates the detection state), so (a) and (b) compare like with like. Memory is the peak resident set
of this process, its JVM and Spark's Python workers together (the broker and the simulator
are the fleet, not fleetwatch, and are left out).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from sqlalchemy import select

from streaming import topics
from streaming.bus import EmbeddedBus
from streaming.clock import now_ms
from streaming.collect.simulate import FAULT_KINDS, FleetSpec, Simulation, produce_live
from streaming.config import FleetwatchConfig, RuleSettings
from streaming.job import build_pipeline, parse_stage, spark_session
from streaming.kraft import KRaftCluster
from streaming.live import QUERY_NAME, start_job, stop_gracefully
from streaming.progress import ProgressRecorder
from streaming.sinks.batch_writer import BatchWriter
from streaming.source.telemetry import PYTHON_SOURCE, SPARK_SOURCE, read_telemetry
from streaming.store import Store, alert_history

# Telemetry topics get several partitions, as in production: one partition per topic would cap
# the parse stage at one task per topic.
PARTITIONS = 4
BACKLOG_EVENTS = 800_000  # four full micro-batches at the default cap
SESSION_TIMEOUT_MS = RuleSettings().session_timeout_ms  # the bench runs the default rules


@dataclass
class FleetResult:
    fleet: str
    clusters: int
    brokers: int
    backlog_events: int = 0
    raw_ingest_events_per_s: float = 0.0
    max_events_per_s: float = 0.0
    ratio_to_raw: float = 0.0
    offered_events_per_s: float = 0.0
    processed_events_per_s: float = 0.0
    live_events: int = 0
    live_processed: int = 0
    sustained: bool = False
    p50_detection_latency_ms: float | None = None
    p99_detection_latency_ms: float | None = None
    alerts_measured: int = 0
    max_batch_duration_ms: int = 0
    median_batch_duration_ms: float = 0.0
    max_lag_s: float = 0.0
    final_lag_s: float = 0.0
    state_rows: int = 0
    peak_rss_mb: float = 0.0
    limited_by: str = ""
    latencies_by_rule: dict[str, float] = field(default_factory=dict)

    def json_line(self) -> dict[str, Any]:
        keys = ("fleet", "offered_events_per_s", "processed_events_per_s", "max_events_per_s",
                "raw_ingest_events_per_s", "ratio_to_raw", "p99_detection_latency_ms",
                "max_batch_duration_ms", "state_rows", "peak_rss_mb")
        everything = asdict(self)
        return {k: everything[k] for k in keys} | {k: v for k, v in everything.items() if k not in keys}


class RssSampler:
    """Peak RSS of this process tree, minus the processes that are the fleet (broker, simulator)."""

    def __init__(self, interval_s: float = 0.5) -> None:
        self.interval_s = interval_s
        self.excluded: set[int] = set()
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(self.interval_s):
            total = 0
            skip: set[int] = set()
            for pid in self.excluded:
                try:
                    skip |= {pid} | {c.pid for c in psutil.Process(pid).children(recursive=True)}
                except psutil.Error:
                    continue
            for proc in [me, *me.children(recursive=True)]:
                if proc.pid in skip:
                    continue
                try:
                    total += proc.memory_info().rss
                except psutil.Error:
                    continue
            self.peak_bytes = max(self.peak_bytes, total)


def _wait_for(predicate: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.5) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(poll_s)  # polling, bounded by the deadline above


def _events_per_s(clusters: int, brokers: int) -> float:
    # A heartbeat per broker every heartbeat interval; a probe round per cluster every probe
    # interval: one bootstrap answer and one answer per broker endpoint.
    return clusters * 1000 * (brokers / FleetSpec.heartbeat_interval_ms + (brokers + 1) / FleetSpec.probe_interval_ms)


@dataclass
class BatchLog:
    """Every progress event of the queries of a phase (the listener's stats keep only totals)."""

    rows: list[dict[str, Any]] = field(default_factory=list)


class _BatchListener(ProgressRecorder):
    def __init__(self, log: BatchLog) -> None:
        super().__init__(None)
        self.log = log

    def onQueryProgress(self, event) -> None:
        super().onQueryProgress(event)
        p = event.progress
        self.log.rows.append({
            "query": p.name, "batch_id": p.batchId, "rows": p.numInputRows, "wall_ms": now_ms(),
            "duration_ms": int((p.durationMs or {}).get("triggerExecution", 0)),
            "max_event": (p.eventTime or {}).get("max"),
            "state_rows": sum(op.numRowsTotal for op in p.stateOperators),
        })


def _busy_rate(log: BatchLog, query: str) -> tuple[int, float]:
    # Without the first batch: it also starts the query's Python workers and, in the full job,
    # creates every shard's detection state, a start-up cost of each query, not its throughput.
    batches = [b for b in log.rows if b["query"] == query and b["rows"] > 0][1:]
    rows = sum(b["rows"] for b in batches)
    busy_s = sum(b["duration_ms"] for b in batches) / 1000
    return rows, rows / busy_s if busy_s else 0.0


def _drain(spark: SparkSession, query: StreamingQuery, log: BatchLog, name: str, total: int,
           timeout_s: float) -> None:
    _wait_for(lambda: sum(b["rows"] for b in log.rows if b["query"] == name) >= total or not query.isActive,
              timeout_s, f"{name} to read {total} events")
    if query.exception() is not None:
        raise RuntimeError(f"{name} failed: {query.exception()}")
    stop_gracefully(spark, query)
    spark.sparkContext.setLogLevel("WARN")


def _backlog_phases(spark: SparkSession, config: FleetwatchConfig, result: FleetResult, workdir: Path,
                    log: BatchLog, progress: Callable[[str], None]) -> None:
    rate = _events_per_s(result.clusters, result.brokers)
    seconds = max(20, math.ceil(BACKLOG_EVENTS / rate))
    spec = FleetSpec(clusters=result.clusters, brokers=result.brokers, faults=FAULT_KINDS,
                     start_ms=1_764_000_000_000, duration_ms=seconds * 1000, fault_every_ms=20_000)
    with EmbeddedBus(topics=topics.ALL, partitions=PARTITIONS, log_path=workdir / "tansu-backlog.log") as bus:
        progress(f"pre-loading {seconds} s of a {result.fleet} fleet into the broker")
        started = time.monotonic()
        run = produce_live(Simulation(spec), bus.bootstrap, realtime=False)
        result.backlog_events = run.sent
        progress(f"  {run.sent:,} events in {time.monotonic() - started:.0f} s")

        progress("(a) raw ingest: source + parse + no-op sink")
        raw = spark_read(spark, config, bus.bootstrap)
        parsed = parse_stage(raw, config.rule_book(), config.spark.state_buckets)
        query = (parsed.writeStream.queryName("raw").format("noop")
                 .option("checkpointLocation", str(workdir / "cp-raw"))
                 .trigger(processingTime=f"{config.spark.trigger_ms} milliseconds").start())
        _drain(spark, query, log, "raw", run.sent, timeout_s=1800)
        _, result.raw_ingest_events_per_s = _busy_rate(log, "raw")
        progress(f"  {result.raw_ingest_events_per_s:,.0f} events/s")

        progress("(b) full job over the same backlog")
        store = Store(f"sqlite:///{workdir / 'backlog.db'}")
        raw = spark_read(spark, config, bus.bootstrap)
        query = (build_pipeline(raw, config.rule_book(), config.spark.state_buckets).writeStream.queryName("full")
                 .foreachBatch(BatchWriter(store))
                 .option("checkpointLocation", str(workdir / "cp-full"))
                 .trigger(processingTime=f"{config.spark.trigger_ms} milliseconds").start())
        _drain(spark, query, log, "full", run.sent, timeout_s=3600)
        store.close()
        _, result.max_events_per_s = _busy_rate(log, "full")
        result.ratio_to_raw = result.max_events_per_s / result.raw_ingest_events_per_s
        progress(f"  {result.max_events_per_s:,.0f} events/s ({result.ratio_to_raw:.2f} x raw)")


def spark_read(spark: SparkSession, config: FleetwatchConfig, bootstrap: str,
               source: str = PYTHON_SOURCE) -> DataFrame:
    return read_telemetry(spark, bootstrap, topics.TELEMETRY, max_records_per_batch=config.spark.max_records_per_batch,
                          source=source)


def _ingest(spark: SparkSession, config: FleetwatchConfig, bootstrap: str, source: str, name: str, total: int,
            workdir: Path, log: BatchLog) -> float:
    """Events/s of `source` + the parse stage into the no-op sink, over a backlog of `total`."""
    parsed = parse_stage(spark_read(spark, config, bootstrap, source), config.rule_book(), config.spark.state_buckets)
    query = (parsed.writeStream.queryName(name).format("noop")
             .option("checkpointLocation", str(workdir / f"cp-{name}"))
             .trigger(processingTime=f"{config.spark.trigger_ms} milliseconds").start())
    _drain(spark, query, log, name, total, timeout_s=1800)
    return _busy_rate(log, name)[1]


def compare_sources(spark: SparkSession, config: FleetwatchConfig, clusters: int, brokers: int,
                    progress: Callable[[str], None]) -> dict[str, Any]:
    """The same backlog on one real Kafka 4.4 broker, read by both sources in turn."""
    log = BatchLog()
    listener = _BatchListener(log)
    spark.streams.addListener(listener)
    rate = _events_per_s(clusters, brokers)
    seconds = max(20, math.ceil(BACKLOG_EVENTS / rate))
    spec = FleetSpec(clusters=clusters, brokers=brokers, faults=FAULT_KINDS, start_ms=1_764_000_000_000,
                     duration_ms=seconds * 1000, fault_every_ms=20_000)
    try:
        with (tempfile.TemporaryDirectory(prefix="fleetwatch-bench-", ignore_cleanup_errors=True) as tmp,
              KRaftCluster(Path(tmp) / "kafka", brokers=1,
                           extra={"num.partitions": str(PARTITIONS)}) as kafka):
            workdir, bootstrap = Path(tmp), kafka.bootstrap[0]
            progress(f"pre-loading {seconds} s of a {clusters} x {brokers} fleet into Kafka 4.4 ({bootstrap})")
            sent = produce_live(Simulation(spec), bootstrap, realtime=False).sent
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
        query, recorder = start_job(spark, live_config, bus.bootstrap, store)
        # A deployment is up before faults happen: the fleet starts once the job has finished its
        # first (empty) micro-batch, which plans the query and starts Spark's Python workers.
        _wait_for(lambda: any(b["query"] == QUERY_NAME for b in log.rows) or not query.isActive, 300,
                  "the live job's first micro-batch")
        progress(f"(c) live fleet for {live_s} s, a fault every {fault_every_s} s")
        simulator = subprocess.Popen(
            [sys.executable, "-m", "streaming.cli", "simulate", "--bootstrap", bus.bootstrap,
             "--clusters", str(result.clusters), "--brokers", str(result.brokers), "--faults", "all",
             "--duration", str(live_s), "--fault-every", str(fault_every_s)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        rss.excluded.add(simulator.pid)
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
        sent = _sent_events(output)
        result.live_events = sent
        # The simulator may fall behind real time on a large fleet: what it offered is what it sent.
        result.offered_events_per_s = sent / sim_s
        consumed = lambda: sum(b["rows"] for b in log.rows if b["query"] == QUERY_NAME)  # noqa: E731
        try:
            _wait_for(lambda: consumed() >= sent or not query.isActive, 120, "the job to read the live events")
        except TimeoutError:
            progress(f"  the job had read {consumed():,} of {sent:,} events 120 s after the fleet stopped")
        if query.exception() is not None:
            raise RuntimeError(f"live job failed: {query.exception()}")
        stop_gracefully(spark, query)
        spark.streams.removeListener(recorder)  # it writes to this phase's store, deleted below
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
    lags = [(b["wall_ms"] - _iso_ms(b["max_event"])) / 1000 for b in steady if b["max_event"]]
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
        result.p99_detection_latency_ms = float(every[min(len(every) - 1, math.ceil(0.99 * len(every)) - 1)])
    result.latencies_by_rule = {rule: float(max(v)) for rule, v in sorted(latencies.items())}


def _iso_ms(text: str) -> int:
    return int(dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def _sent_events(simulator_output: str) -> int:
    for line in reversed(simulator_output.splitlines()):
        if " events" in line and line.startswith("simulated"):
            return int(line.split(": ", 1)[1].split(" events", 1)[0])
    raise RuntimeError(f"no event count in the simulator's output: {simulator_output[-500:]}")


def _limit(result: FleetResult) -> str:
    real_rate = _events_per_s(result.clusters, result.brokers)
    if result.offered_events_per_s < 0.9 * real_rate:
        beyond_job = (f"; the full job's maximum here, {result.max_events_per_s:,.0f} events/s, is below it too"
                      if result.max_events_per_s < real_rate else "")
        return (f"the simulator could not offer the fleet's real rate of {real_rate:,.0f} events/s "
                f"(one Python process, 2 shared cores){beyond_job}")
    if not result.sustained:
        return "CPU: the job's Python stages (parse, detection) cannot keep up on 2 cores"
    if result.p99_detection_latency_ms and result.p99_detection_latency_ms > SESSION_TIMEOUT_MS + 3000:
        return "latency: batch duration and lag"
    return ("kept up; latency = lag + batch duration (a later event of the cluster proves a deadline "
            "passed; without one, the 5 s allowed lateness adds)")


def run_fleet(spark: SparkSession, config: FleetwatchConfig, clusters: int, brokers: int, live_s: int,
              fault_every_s: int, progress: Callable[[str], None]) -> FleetResult:
    result = FleetResult(fleet=f"{clusters}x{brokers}", clusters=clusters, brokers=brokers)
    log = BatchLog()
    listener = _BatchListener(log)
    spark.streams.addListener(listener)
    try:
        with (tempfile.TemporaryDirectory(prefix="fleetwatch-bench-", ignore_cleanup_errors=True) as tmp,
              RssSampler() as rss):
            workdir = Path(tmp)
            _backlog_phases(spark, config, result, workdir, log, progress)
            _live_phase(spark, config, result, workdir, log, rss, live_s, fault_every_s, progress)
            result.peak_rss_mb = round(rss.peak_bytes / 2**20, 1)
    finally:
        spark.streams.removeListener(listener)
    result.limited_by = _limit(result)
    return result


def print_table(results: list[FleetResult]) -> None:
    columns = [("fleet", "fleet", "{}"), ("offered/s", "offered_events_per_s", "{:,.0f}"),
               ("processed/s", "processed_events_per_s", "{:,.0f}"), ("max/s", "max_events_per_s", "{:,.0f}"),
               ("raw/s", "raw_ingest_events_per_s", "{:,.0f}"), ("max/raw", "ratio_to_raw", "{:.2f}"),
               ("p50 ms", "p50_detection_latency_ms", "{:,.0f}"), ("p99 ms", "p99_detection_latency_ms", "{:,.0f}"),
               ("alerts", "alerts_measured", "{}"), ("max batch ms", "max_batch_duration_ms", "{:,}"),
               ("max lag s", "max_lag_s", "{:.1f}"), ("state rows", "state_rows", "{:,}"),
               ("peak RSS MB", "peak_rss_mb", "{:,.0f}")]
    cells = [[head for head, _, _ in columns]]
    for r in results:
        values = asdict(r)
        cells.append(["-" if values[key] is None else fmt.format(values[key]) for _, key, fmt in columns])
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    for row in cells:
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))
    for r in results:
        print(f"{r.fleet}: {r.limited_by}; sustained={r.sustained}")


def write_chart(results: list[FleetResult], out_dir: Path) -> list[Path]:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    sizes = [r.clusters for r in results]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("throughput (events/s)", "detection latency (ms)"))
    # What the fleet would send in real time: above "offered" where the simulator fell behind.
    fig.add_trace(go.Scatter(x=sizes, y=[_events_per_s(r.clusters, r.brokers) for r in results],
                             name="fleet's real rate", mode="lines+markers", line={"dash": "dot"}), row=1, col=1)
    for name, key in (("offered", "offered_events_per_s"), ("processed (live)", "processed_events_per_s"),
                      ("full job max", "max_events_per_s"), ("raw ingest", "raw_ingest_events_per_s")):
        fig.add_trace(go.Scatter(x=sizes, y=[getattr(r, key) for r in results], name=name, mode="lines+markers"),
                      row=1, col=1)
    for name, key in (("p50", "p50_detection_latency_ms"), ("p99", "p99_detection_latency_ms")):
        fig.add_trace(go.Scatter(x=sizes, y=[getattr(r, key) for r in results], name=f"latency {name}",
                                 mode="lines+markers"), row=1, col=2)
    fig.add_hline(y=SESSION_TIMEOUT_MS + 3000, line_dash="dot", annotation_text="session timeout + 3 s", row=1, col=2)
    fig.update_xaxes(type="log", title_text="clusters (x12 brokers)")
    fig.update_layout(title="fleetwatch on this machine", width=1200, height=500)
    out_dir.mkdir(parents=True, exist_ok=True)
    html, png = out_dir / "throughput.html", out_dir / "throughput.png"
    fig.write_html(html, include_plotlyjs="cdn")
    fig.write_image(png)
    return [html, png]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="only the 1,000-cluster fleet (under 20 minutes)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per fleet, the last line last")
    parser.add_argument("--clusters", type=int, nargs="+", metavar="N",
                        help="fleet sizes to measure (default 100 1000 5000; --quick: 1000)")
    parser.add_argument("--brokers", type=int, default=12, help="brokers per cluster (default 12)")
    parser.add_argument("--live-seconds", type=int, default=180, help="length of the live phase (default 180)")
    parser.add_argument("--fault-every", type=int, default=15, help="seconds between live faults (default 15)")
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
