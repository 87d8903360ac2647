"""What bench/throughput.py measures and how: the result of one fleet, the instruments (peak RSS,
every micro-batch's progress) and the arithmetic on them (rates, lag, what limited the job)."""

from __future__ import annotations

import datetime as dt
import math
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil

from streaming.collect.simulate import FleetSpec
from streaming.config import RuleSettings
from streaming.job import ProgressRecorder
from streaming.plumbing.clock import now_ms
from streaming.source import messages_read

__all__ = [
    "SESSION_TIMEOUT_MS",
    "BatchListener",
    "BatchLog",
    "FleetResult",
    "RssSampler",
    "busy_rate",
    "cpu_per_100k",
    "events_per_s",
    "iso_ms",
    "limited_by",
    "percentile",
    "sent_events",
]

SESSION_TIMEOUT_MS = RuleSettings().session_timeout_ms  # the bench runs the default rules
DRIVER = "driver (Python)"  # the kind of this process, where the job's driver runs


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
    p90_batch_duration_ms: float = 0.0
    max_lag_s: float = 0.0
    final_lag_s: float = 0.0
    state_rows: int = 0
    peak_rss_mb: float = 0.0
    # What the peak was made of, at its moment: this driver process, Spark's JVM, the Python workers.
    peak_rss_parts_mb: dict[str, float] = field(default_factory=dict)
    # The same tree's peak proportional set size: a page shared by several processes (the Python
    # workers are forked from one daemon) counts once in all, not once per process as in RSS.
    peak_pss_mb: float = 0.0
    peak_pss_parts_mb: dict[str, float] = field(default_factory=dict)
    # The peak PSS of each phase ("backlog": (a) and (b); "live": (c); "yardstick": (d), whose
    # `fleetwatch replay` runs a Spark of its own beside this one's, idle), with its parts: the whole
    # run's peak above is the largest of them; the live job's is "live".
    peak_pss_by_phase_mb: dict[str, dict[str, float]] = field(default_factory=dict)
    limited_by: str = ""
    latencies_by_rule: dict[str, float] = field(default_factory=dict)
    # Per rule: [p50, p99] of the detection latency (ms); `latencies_by_rule` keeps each rule's largest.
    latency_p50_p99_by_rule: dict[str, list[float]] = field(default_factory=dict)
    # CPU seconds per 100,000 events by kind of process ("all": their sum) over the full job's
    # backlog (b) and over the live phase (c), the fleet's processes (broker, simulator) left out.
    full_cpu_s_per_100k: dict[str, float] = field(default_factory=dict)
    live_cpu_s_per_100k: dict[str, float] = field(default_factory=dict)
    # The yardstick (d), issue 45: the reference detector's CPU per 100k events over the backlog's events
    # as a file, `fleetwatch replay`'s over the same file, replay's events/s over the reference's (whole
    # commands), and the live job's CPU per event over the reference's.
    reference_cpu_s_per_100k: float | None = None
    replay_cpu_s_per_100k: float | None = None
    replay_to_reference: float | None = None
    live_to_reference_cpu: float | None = None

    def json_line(self) -> dict[str, Any]:
        keys = ("fleet", "offered_events_per_s", "processed_events_per_s", "max_events_per_s",
                "raw_ingest_events_per_s", "ratio_to_raw", "p99_detection_latency_ms",
                "max_batch_duration_ms", "state_rows", "peak_rss_mb")
        everything = asdict(self)
        return {k: everything[k] for k in keys} | {k: v for k, v in everything.items() if k not in keys}


class RssSampler:
    """Peak RSS and peak PSS of this process tree, minus the processes that are the fleet (broker,
    simulator), and what each was made of at its moment (bytes by kind of process; the Python
    workers' kind counts them); and the same processes' CPU seconds by kind (`cpu_s`).

    The RSS and CPU times are read every `interval_s`. The PSS is read where a peak can be: when
    the RSS sets a new peak, and every `pss_every_s`. Reading it (smaps_rollup) costs the kernel a
    walk of every mapped page, charged to this process: read with the RSS every 0.5 s from the
    ~14 processes of a 1,000 x 12 fleet, it took ~0.14 of a core (py-spy of bench/throughput.py
    --quick), beside a job that had two cores to share with its fleet. What the sampler spends is
    left out of the driver's CPU seconds.
    """

    def __init__(self, interval_s: float = 0.5, pss_every_s: float = 5.0) -> None:
        self.interval_s = interval_s
        self.pss_every_s = pss_every_s
        self.excluded: set[int] = set()
        # CPU seconds (user + system) of every process seen, by pid, at its last reading: a
        # process that ended keeps what it had used when last seen (up to `interval_s` short).
        self._cpu: dict[int, tuple[str, float]] = {}
        self._own_cpu_s = 0.0  # the sampler thread's, within the driver's
        self._cpu_lock = threading.Lock()
        self.peak_bytes = 0
        self.peak_parts: dict[str, int] = {}
        self.peak_pss_bytes = 0
        self.peak_pss_parts: dict[str, int] = {}
        self.phase = ""  # what the bench runs now (set by it): the PSS's peak is kept per phase too
        self.peak_pss_by_phase: dict[str, dict[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _processes(self, me: psutil.Process) -> list[psutil.Process]:
        skip: set[int] = set()
        for pid in self.excluded:
            try:
                skip |= {pid} | {c.pid for c in psutil.Process(pid).children(recursive=True)}
            except psutil.Error:
                continue
        return [proc for proc in [me, *me.children(recursive=True)] if proc.pid not in skip]

    def _run(self) -> None:
        me = psutil.Process()
        pss_read = -math.inf
        while not self._stop.wait(self.interval_s):
            seen: list[tuple[psutil.Process, str]] = []
            parts: dict[str, int] = {}
            for proc in self._processes(me):
                try:
                    kind = _process_kind(proc, me)
                    rss = proc.memory_info().rss
                    times = proc.cpu_times()
                except psutil.Error:
                    continue
                with self._cpu_lock:
                    self._cpu[proc.pid] = (kind, times.user + times.system)
                    if proc.pid == me.pid:
                        self._own_cpu_s = time.thread_time()  # as much of it as the driver's reading holds
                seen.append((proc, kind))
                parts[kind] = parts.get(kind, 0) + rss
            label = {"Python workers": f"Python workers ({sum(kind == 'Python workers' for _, kind in seen)})"}
            new_peak = sum(parts.values()) > self.peak_bytes
            if new_peak:
                self.peak_bytes = sum(parts.values())
                self.peak_parts = {label.get(k, k): n for k, n in parts.items()}
            if new_peak or time.monotonic() - pss_read >= self.pss_every_s:
                pss_read = time.monotonic()
                pss_parts: dict[str, int] = {}
                for proc, kind in seen:
                    try:
                        pss_parts[kind] = pss_parts.get(kind, 0) + proc.memory_full_info().pss
                    except psutil.Error:
                        continue
                total, labelled = sum(pss_parts.values()), {label.get(k, k): n for k, n in pss_parts.items()}
                if total > self.peak_pss_bytes:
                    self.peak_pss_bytes, self.peak_pss_parts = total, labelled
                if total > sum(self.peak_pss_by_phase.get(self.phase, {}).values()):
                    self.peak_pss_by_phase[self.phase] = labelled

    def cpu_s(self) -> dict[str, float]:
        """CPU seconds used so far by this tree's processes (but the excluded, and this sampler), by kind."""
        total: dict[str, float] = {}
        with self._cpu_lock:
            for kind, seconds in self._cpu.values():
                total[kind] = total.get(kind, 0.0) + seconds
            if DRIVER in total:
                total[DRIVER] -= self._own_cpu_s
        return total


def cpu_per_100k(before: dict[str, float], after: dict[str, float], events: int) -> dict[str, float]:
    """CPU seconds per 100,000 events between two `RssSampler.cpu_s` readings, by kind and in all."""
    used = {kind: after[kind] - before.get(kind, 0.0) for kind in after}
    used["all"] = sum(used.values())
    return {kind: round(seconds * 100_000 / events, 2) if events else 0.0 for kind, seconds in used.items()}


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile: the smallest value with `share` of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def _process_kind(proc: psutil.Process, me: psutil.Process) -> str:
    if proc.pid == me.pid:
        return DRIVER
    if proc.name().startswith("java"):
        return "JVM"
    return "Python workers"


def events_per_s(clusters: int, brokers: int) -> float:
    # A heartbeat per broker every heartbeat interval; a probe round per cluster every probe
    # interval: one bootstrap answer and one answer per broker endpoint.
    return clusters * 1000 * (brokers / FleetSpec.heartbeat_interval_ms + (brokers + 1) / FleetSpec.probe_interval_ms)


@dataclass
class BatchLog:
    """Every progress event of the queries of a phase (the listener's stats keep only totals)."""

    rows: list[dict[str, Any]] = field(default_factory=list)


class BatchListener(ProgressRecorder):
    """Spark's progress listener of the job, that also logs every progress event into a `BatchLog`."""

    def __init__(self, log: BatchLog) -> None:
        super().__init__(None)
        self.log = log

    def record(self, p: dict[str, Any]) -> None:
        super().record(p)
        self.log.rows.append({
            "query": p.get("name"), "batch_id": p["batchId"], "rows": messages_read(p), "wall_ms": now_ms(),
            "duration_ms": int((p.get("durationMs") or {}).get("triggerExecution", 0)),
            "max_event": (p.get("eventTime") or {}).get("max"),
            "state_rows": sum(op.get("numRowsTotal", 0) for op in p.get("stateOperators") or []),
        })


def busy_rate(log: BatchLog, query: str) -> tuple[int, float]:
    # Without the first batch: it also starts the query's Python workers and, in the full job,
    # creates every shard's detection state, a start-up cost of each query, not its throughput.
    batches = [b for b in log.rows if b["query"] == query and b["rows"] > 0][1:]
    rows = sum(b["rows"] for b in batches)
    busy_s = sum(b["duration_ms"] for b in batches) / 1000
    return rows, rows / busy_s if busy_s else 0.0


def iso_ms(text: str) -> int:
    return int(dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def sent_events(simulator_output: str) -> int:
    for line in reversed(simulator_output.splitlines()):
        if " events" in line and line.startswith("simulated"):
            return int(line.split(": ", 1)[1].split(" events", 1)[0])
    raise RuntimeError(f"no event count in the simulator's output: {simulator_output[-500:]}")


def limited_by(result: FleetResult) -> str:
    real_rate = events_per_s(result.clusters, result.brokers)
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
