"""Real faults in a real Apache Kafka 4.4 cluster: how long Kafka takes to react, and fleetwatch.

    .venv/bin/python bench/real_faults.py [--runs 5] [--json]
    .venv/bin/python bench/real_faults.py --healthy-minutes 10      # no fault: count false alerts

One KRaft cluster (3 controllers, 3 brokers; broker 2 can be cut off from the quorum) with Kafka's
default timing (`broker.session.timeout.ms` 9000, `broker.heartbeat.interval.ms` 2000), watched by the
probe at its defaults (rounds every 5 s, exchanges bounded by 3 s, a quorum reading every second) -> the
embedded bus -> the live Spark job (a micro-batch every 250 ms at most, fleetwatch's default:
`--trigger-ms`) -> SQLite, with fleetwatch's default rules (a 9 s session, `broker.stalled` at a 2.5 s
fetch age: `--stall-after-ms`, the watermark's 5 s lateness). Each fault comes at a random moment of the
trigger's period. For each fault, every run measures from the moment the fault is injected (wall clock):
- Kafka's own reaction, seen by asking Kafka: the broker fenced (DescribeCluster v2), a new active
  controller elected (DescribeQuorum to the controllers), or a controlled shutdown done (the broker fenced
  after its SIGTERM);
- fleetwatch's: the `recorded_at` of the first warning about the broker in the store (`broker.stalled`) and
  of its page (the first critical alert about it: `broker.heartbeat_lost`, `broker.partitioned`), and for
  the faults Kafka means (a failover, a controlled shutdown) every broker alert it raised (none is right).
Printed per fault: the median and the worst over the runs of each, and of the page after Kafka's fence,
against the goals (issue 44: a frozen broker warned at most 3 s after the freeze, median; worst 4 s;
paged at most 2 s after Kafka fenced it, median).

`--healthy-minutes N` runs no fault but what Kafka does on purpose, over N minutes of a healthy cluster:
a controller failover (the active controller killed, started again 30 s later), a restart of the active
controller (SIGTERM, started again at once), and a rolling restart of every broker (each a controlled
shutdown, started again, back in sync before the next); then every alert of the cluster the store holds
(none is right).

Also printed: the start-up time and resident memory of each node, and the probe's event-time disorder over
the whole run (`bench/disorder.py`'s arithmetic on every telemetry record the probe sent), with the events
the job refused as late (`late_event`). `--controller-view` adds the controllers' JMX exporter and the
probe's controller view (STOPPING seen); `--probe-interval-ms`, `--lateness-ms` change the defaults.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

# bench/ is this script's folder, first on sys.path when it runs.
from disorder import disorder, read_sent, report
from sqlalchemy import func, select

from streaming.bus import EmbeddedBus
from streaming.collect.probe import ProbeOptions
from streaming.config import FleetwatchConfig, RuleSettings, SparkConfig
from streaming.job import spark_session, start_live_query
from streaming.records import topics
from streaming.store import Store, alerts, controller_history, quarantine
from streaming.workshop.kraft import BackgroundProbe, KRaftCluster, target_of
from streaming.workshop.polling import poll

# Kafka's defaults (SPEC section 1).
SESSION_TIMEOUT_MS = 9000
HEARTBEAT_INTERVAL_MS = 2000
WARN_GOAL_S, WARN_WORST_S, PAGE_AFTER_FENCE_GOAL_S = 3.0, 4.0, 2.0
WARNING, PAGES = "broker.stalled", ("broker.heartbeat_lost", "broker.partitioned")
BROKER_RULES = ("broker.stalled", "broker.heartbeat_late", "broker.heartbeat_lost", "broker.partitioned",
                "broker.fenced")

# TimeoutError: a wait that may fail is caught as such.
_poll = functools.partial(poll, interval_s=0.05, retry_on=(), error=TimeoutError)


class Rig:
    def __init__(self, store: Store, cluster: KRaftCluster) -> None:
        self.store = store
        self.cluster = cluster
        self.cid = cluster.cluster_id

    def first_recorded(self, rules: tuple[str, ...], since_ms: float, broker: int | None = None
                       ) -> tuple[float, str] | None:
        """(wall time in s it was stored, rule) of the first alert of `rules` about the cluster (the broker)
        whose event time is after `since_ms`."""
        query = select(alerts.c.recorded_at, alerts.c.rule).where(
            alerts.c.rule.in_(rules), alerts.c.starts_at >= since_ms - 10_000, alerts.c.cluster_id == self.cid)
        if broker is not None:
            query = query.where(alerts.c.broker_id == broker)
        with self.store.engine.connect() as conn:
            row = conn.execute(query.order_by(alerts.c.recorded_at)).first()
        return None if row is None else (row[0] / 1000, row[1])

    def raised(self, since_ms: float, rules: tuple[str, ...] | None = None, besides: int | None = None) -> list[str]:
        """Every alert of the cluster that started after `since_ms` ("rule broker"), or of `rules`; with
        `besides`, those about any other broker than that one (a fault's false alerts)."""
        query = select(alerts.c.rule, alerts.c.broker_id).where(alerts.c.cluster_id == self.cid,
                                                                  alerts.c.starts_at >= since_ms)
        if rules is not None:
            query = query.where(alerts.c.rule.in_(rules))
        if besides is not None:
            query = query.where(alerts.c.broker_id.is_distinct_from(besides))
        with self.store.engine.connect() as conn:
            return sorted(f"{rule} {broker if broker is not None else ''}".strip()
                          for rule, broker in conn.execute(query).all())

    def all_resolved(self) -> bool:
        """No alert of the cluster firing but the flapping ones: the bench breaks the same brokers
        and kills the active controller again and again, which is flapping by the rules (4 state
        changes of a broker, 3 moves of the controller, in 5 minutes)."""
        with self.store.engine.connect() as conn:
            return conn.execute(select(alerts.c.alert_id).where(
                alerts.c.status == "firing", alerts.c.cluster_id == self.cid,
                alerts.c.rule.not_in(("broker.flapping", "cluster.controller_flapping")))).first() is None

    def controller_in_store(self, controller: int) -> bool:
        with self.store.engine.connect() as conn:
            latest = conn.execute(select(controller_history.c.controller_id).where(
                controller_history.c.cluster_id == self.cid).order_by(controller_history.c.ts.desc())).first()
        return latest is not None and latest[0] == controller

    def watermark_past(self, wall_ms: float, timeout_s: float = 120) -> None:
        """Wait until the job's watermark (event time) passed `wall_ms`: what it would raise by then is stored."""
        from streaming.store import pipeline_progress

        def passed() -> bool:
            with self.store.engine.connect() as conn:
                latest = conn.execute(select(pipeline_progress.c.watermark_ms)
                                      .order_by(pipeline_progress.c.batch_id.desc()).limit(1)).scalar()
            return latest is not None and latest > wall_ms

        _poll(passed, timeout_s, "the job's watermark past the fault")

    def settle(self) -> None:
        """Every broker unfenced and every alert of the cluster resolved before the next fault."""
        self.cluster.wait_unfenced(timeout_s=120)
        _poll(self.all_resolved, 120, "every alert of the cluster resolved")


def _warned_and_paged(rig: Rig, broker: int, t0: float) -> dict[str, Any]:
    warned = _poll(lambda: rig.first_recorded((WARNING,), t0 * 1000, broker), 60, "the warning")
    paged = _poll(lambda: rig.first_recorded(PAGES, t0 * 1000, broker), 60, "the page")
    return {"warning": warned[0] - t0, "page": paged[0] - t0, "page_rule": paged[1], "t0": t0, "broker": broker}


def shown(sent: list[Any], result: dict[str, Any], stall_after_ms: int) -> dict[str, float]:
    """When the probe's own readings showed what the warning and the page say (the first quorum reading
    after the fault with the broker's fetch `stall_after_ms` old, and the first with it fenced or a session
    old), in seconds after the fault: the probe's part of the times above; the job's micro-batches do the
    rest."""
    t0, broker = result["t0"], result["broker"]
    warn = page = math.nan
    for event in sent:
        if event.type != "quorum_reading" or event.ts < t0 * 1000:
            continue
        reading = json.loads(event.value)
        age, fenced = next(((a, f) for n, a, f in reading["fetches"] if n == broker), (None, None))
        if age is not None and age >= stall_after_ms and math.isnan(warn):
            warn = event.ts / 1000 - t0
        if (fenced or (age is not None and age >= SESSION_TIMEOUT_MS)) and math.isnan(page):
            page = event.ts / 1000 - t0
    return {"warning_shown": warn, "page_shown": page}


def freeze(rig: Rig) -> dict[str, Any]:
    t0 = time.time()
    rig.cluster.freeze(3)
    try:
        fenced = rig.cluster.wait_fenced(3, 60)
        seen = _warned_and_paged(rig, 3, t0)
    finally:
        rig.cluster.thaw(3)
    rig.settle()
    return {"kafka": fenced - t0, **seen, "others": rig.raised(t0 * 1000, BROKER_RULES, besides=3)}


def partition(rig: Rig) -> dict[str, Any]:
    t0 = time.time()
    rig.cluster.cut_from_quorum(2)
    try:
        fenced = rig.cluster.wait_fenced(2, 60)
        seen = _warned_and_paged(rig, 2, t0)
    finally:
        rig.cluster.heal(2)
    rig.settle()
    return {"kafka": fenced - t0, **seen, "others": rig.raised(t0 * 1000, BROKER_RULES, besides=2)}


def controlled_shutdown(rig: Rig) -> dict[str, Any]:
    """SIGTERM to broker 1, which leads partitions (else Kafka grants an immediate shutdown), started
    again at once: Kafka's time is the shutdown done (the broker fenced); fleetwatch should raise nothing."""
    _lead_partitions(rig.cluster, 1)
    t0 = time.time()
    rig.cluster.nodes[1].signal(signal.SIGTERM)
    try:
        done = rig.cluster.wait_fenced(1, 60)
    finally:
        rig.cluster.stop_node(1)
        rig.cluster.restart_node(1, 120)
    rig.cluster.wait_unfenced(timeout_s=120)
    rig.watermark_past(time.time() * 1000 + SESSION_TIMEOUT_MS)
    return {"kafka": done - t0, "false": rig.raised(t0 * 1000, BROKER_RULES)}


def _lead_partitions(cluster: KRaftCluster, broker: int) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=[n.address for n in cluster.brokers if n.running],
                             client_id="real-faults")
    try:
        others = [b.node_id for b in cluster.brokers if b.node_id != broker]
        admin.create_topics([NewTopic(f"led-by-{broker}-{time.monotonic_ns()}", num_partitions=-1,
                                      replication_factor=-1,
                                      replica_assignments={p: [broker, *others] for p in range(4)})])
    finally:
        admin.close()


def controller_failover(rig: Rig) -> dict[str, Any]:
    first = rig.cluster.quorum_leader()
    _poll(lambda: rig.controller_in_store(first), 60, f"controller {first} in the store")
    t0 = time.time()
    rig.cluster.kill_node(first)
    try:
        _poll(lambda: max(rig.cluster.quorum_leader(), 0), 60, "a new active controller")
        elected = time.time()
    finally:
        rig.cluster.restart_node(first)
    rig.watermark_past(time.time() * 1000 + SESSION_TIMEOUT_MS)
    return {"kafka": elected - t0, "false": rig.raised(t0 * 1000, BROKER_RULES)}


FAULTS: dict[str, tuple[Callable[[Rig], dict[str, Any]], str]] = {
    "broker frozen (SIGSTOP)": (freeze, "fenced by the controller"),
    "broker cut off from the quorum": (partition, "fenced by the controller"),
    "active controller killed (failover)": (controller_failover, "new controller elected"),
    "controlled shutdown (SIGTERM), restart": (controlled_shutdown, "shutdown done (fenced)"),
}


def healthy(rig: Rig, minutes: float) -> dict[str, Any]:
    """N minutes of what Kafka does on purpose (the module docstring); every alert of the cluster then."""
    cluster, t0 = rig.cluster, time.time()
    steps: list[tuple[float, str]] = []

    def step(what: str) -> None:
        steps.append((round(time.time() - t0, 1), f"{what} (load {os.getloadavg()[0]:.1f})"))
        print(f"{steps[-1][0]:7.1f} s  {what}", file=sys.stderr, flush=True)

    def at(offset_s: float) -> None:
        _poll(lambda: time.time() - t0 >= offset_s, offset_s + 600, f"{offset_s} s into the run")

    at(60)
    first = cluster.quorum_leader()
    step(f"failover: active controller {first} killed")
    cluster.kill_node(first)
    step(f"controller {_poll(lambda: max(cluster.quorum_leader(), 0), 60, 'a new controller')} elected")
    at(90)
    cluster.restart_node(first)
    step(f"controller {first} started again")
    at(180)
    active = cluster.quorum_leader()
    step(f"active controller {active} restarted (SIGTERM, started again at once)")
    cluster.stop_node(active)
    cluster.restart_node(active)
    step(f"controller {active} back; active now {cluster.quorum_leader()}")
    at(300)
    for broker in (1, 2, 3):
        step(f"rolling restart: broker {broker} stopped (SIGTERM)")
        cluster.stop_node(broker)
        cluster.restart_node(broker, 120)
        cluster.wait_unfenced(timeout_s=120)
        step(f"broker {broker} back in sync")
    at(minutes * 60)
    step("end")
    rig.watermark_past(time.time() * 1000)
    return {"minutes": minutes, "steps": steps, "alerts": rig.raised(t0 * 1000)}


def _pair(stats: tuple[float, float]) -> str:
    return f"{stats[0]:.2f} / {stats[1]:.2f}"


def _stats(values: list[float]) -> tuple[float, float]:
    return (round(statistics.median(values), 2), round(max(values), 2)) if values else (math.nan, math.nan)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each fault (default 5; medians over them)")
    parser.add_argument("--healthy-minutes", type=float, metavar="N",
                        help="no fault: N minutes of a healthy cluster through a failover, an active-controller "
                             "restart and a rolling restart; count its alerts")
    parser.add_argument("--lateness-ms", type=int, default=5000, help="the watermark's allowed lateness (default 5000)")
    parser.add_argument("--probe-interval-ms", type=int, default=5000, help="the probe's rounds (default 5000)")
    parser.add_argument("--probe-timeout-ms", type=int, default=3000, help="one exchange's bound (default 3000)")
    parser.add_argument("--quorum-interval-ms", type=int, default=1000, help="the quorum readings (default 1000)")
    parser.add_argument("--controller-view", action="store_true",
                        help="the controllers' JMX exporter and the probe's controller view (off by default)")
    parser.add_argument("--stall-after-ms", type=int, default=RuleSettings().stall_after_ms,
                        help="broker.stalled's fetch age (default: fleetwatch's, 2500)")
    parser.add_argument("--trigger-ms", type=int, default=SparkConfig().trigger_ms,
                        help="the job's micro-batch trigger (default: fleetwatch's, 250)")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    workdir = Path(tempfile.mkdtemp(prefix="fleetwatch-real-faults-"))
    config = FleetwatchConfig.model_validate({
        "spark": {"master": "local[2]", "shuffle_partitions": 2, "trigger_ms": args.trigger_ms,
                  "checkpoint_dir": str(workdir / "checkpoint")},
        "rules": {"session_timeout_ms": SESSION_TIMEOUT_MS, "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
                  "allowed_lateness_ms": args.lateness_ms, "stall_after_ms": args.stall_after_ms}})
    store = Store(f"sqlite:///{workdir / 'store.db'}")
    print(f"work folder {workdir}", file=sys.stderr)
    loads = [os.getloadavg()[0]]  # the 1-minute load average at the start and at each fault
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in FAULTS}
    quiet: dict[str, Any] | None = None
    with EmbeddedBus(partitions={t: 2 for t in topics.TELEMETRY}, log_path=workdir / "tansu.log") as bus:
        spark = spark_session(config, "fleetwatch-real-faults")
        job = start_live_query(spark, config, bus.bootstrap, store)
        cluster = KRaftCluster(workdir / "cluster", brokers=3, controllers=3, partitionable=[2],
                               session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
                               metrics_exporter=args.controller_view)
        started = time.monotonic()
        cluster.start()
        boot_s = time.monotonic() - started
        nodes = {n.node_id: (round(n.started_s or 0, 1), n.rss_bytes() // 2**20) for n in cluster.nodes.values()}
        target = replace(target_of("bench", cluster.bootstrap), controller_metrics=tuple(cluster.controller_metrics),
                         session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
                         stall_after_ms=args.stall_after_ms)
        probe = BackgroundProbe([target], bus.bootstrap,
                                ProbeOptions(interval_ms=args.probe_interval_ms, timeout_ms=args.probe_timeout_ms,
                                             quorum_interval_ms=args.quorum_interval_ms,
                                             source="bench-real-faults")).start()
        rig = Rig(store, cluster)
        try:
            _poll(lambda: rig.controller_in_store(cluster.quorum_leader()), 120, "the job's first view")
            if args.healthy_minutes:
                quiet = healthy(rig, args.healthy_minutes)
            else:
                for run in range(args.runs):
                    for name, (fault, _) in FAULTS.items():
                        loads.append(os.getloadavg()[0])
                        # A fault comes at any moment of the job's trigger period, not in step with it (the
                        # runs' own waits would keep each fault at one phase of Spark's trigger clock).
                        time.sleep(random.uniform(0, args.trigger_ms / 1000))
                        result = fault(rig)
                        results[name].append(result)
                        print(f"run {run + 1}: {name}: " + ", ".join(
                            f"{k} {v:.2f} s" if isinstance(v, float) else f"{k} {v}" for k, v in result.items()),
                            file=sys.stderr, flush=True)
        finally:
            probe.stop()
            cluster.stop_all()
            job.stop()
            spark.streams.removeListener(job.recorder)
            spark.stop()
        sent = read_sent(bus.bootstrap, values=True)
    probe_disorder = disorder(sent)
    for runs in results.values():
        for result in runs:
            if "t0" in result:
                result |= shown(sent, result, args.stall_after_ms)
    with (workdir / "probe-events.jsonl").open("wb") as fh:
        fh.writelines(b'{"sent_at":%d,"event":%s}\n' % (event.created, event.value) for event in sent)
    with store.engine.connect() as conn:
        late = conn.execute(select(func.count()).select_from(quarantine)
                            .where(quarantine.c.reason == "late_event")).scalar()
    loads.append(os.getloadavg()[0])
    table = []
    for name, (_, kafka_what) in FAULTS.items():
        runs = results[name]
        if not runs:
            continue
        row: dict[str, Any] = {"fault": name, "kafka_reaction": kafka_what, "runs": len(runs),
                               "kafka_s": _stats([r["kafka"] for r in runs])}
        if "warning" in runs[0]:
            row |= {"warning_s": _stats([r["warning"] for r in runs]), "page_s": _stats([r["page"] for r in runs]),
                    "page_after_kafka_s": _stats([r["page"] - r["kafka"] for r in runs]),
                    "warning_shown_s": _stats([r["warning_shown"] for r in runs]),
                    "page_shown_after_kafka_s": _stats([r["page_shown"] - r["kafka"] for r in runs]),
                    "page_rules": sorted({r["page_rule"] for r in runs}),
                    "false_alerts": sorted(a for r in runs for a in r["others"])}
        else:
            row["false_alerts"] = sorted(a for r in runs for a in r["false"])
        table.append(row)
    summary = {"lateness_ms": args.lateness_ms, "session_timeout_ms": SESSION_TIMEOUT_MS,
               "probe_interval_ms": args.probe_interval_ms, "quorum_interval_ms": args.quorum_interval_ms,
               "controller_view": args.controller_view,
               "load_average": {"min": min(loads), "median": statistics.median(loads), "max": max(loads)},
               "probe_disorder": probe_disorder, "late_events": late, "cluster_start_s": round(boot_s, 1),
               "nodes": {str(k): {"start_s": v[0], "rss_mb": v[1]} for k, v in nodes.items()}, "faults": table,
               "healthy": quiet}
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"real Kafka 4.4 cluster (3 controllers + 3 brokers): started in {boot_s:.1f} s; per node "
          + ", ".join(f"{k}: {v[0]} s {v[1]} MB" for k, v in nodes.items()))
    print(f"Kafka's defaults (session {SESSION_TIMEOUT_MS} ms, heartbeats every {HEARTBEAT_INTERVAL_MS} ms); the probe "
          f"at rounds of {args.probe_interval_ms} ms, quorum readings every {args.quorum_interval_ms} ms"
          f"{', controller view on' if args.controller_view else ''}; the job's trigger {args.trigger_ms} ms; "
          f"fleetwatch's rules, broker.stalled at {args.stall_after_ms} ms, lateness {args.lateness_ms} ms; "
          f"load average (1 min, at each fault) "
          f"{min(loads):.1f} to {max(loads):.1f}, median {statistics.median(loads):.1f} ({os.cpu_count()} cores)")
    if quiet is not None:
        print(f"{quiet['minutes']:g} minutes of a healthy cluster: "
              + "; ".join(f"{s} s {w}" for s, w in quiet["steps"]))
        print(f"alerts of the cluster: {len(quiet['alerts'])} {quiet['alerts'] or ''}")
    else:
        print(f"seconds after the fault, median / worst over {args.runs} run(s); warned, paged: the alert stored "
              "by the job; shown: the probe's first quorum reading that shows it (the stall; the fence)")
        print(f"{'fault':<40} {'Kafka':<26} {'Kafka s':>11}  {'warned s':>11}  {'paged s':>11}  {'paged - Kafka':>13}"
              f"  {'shown: stall':>12}  {'fence - Kafka':>13}")
        for row in table:
            cells = f"{row['fault']:<40} {row['kafka_reaction']:<26} {_pair(row['kafka_s']):>11}"
            if "warning_s" in row:
                cells += (f"  {_pair(row['warning_s']):>11}  {_pair(row['page_s']):>11}  "
                          f"{_pair(row['page_after_kafka_s']):>13}  {_pair(row['warning_shown_s']):>12}  "
                          f"{_pair(row['page_shown_after_kafka_s']):>13}  {' '.join(row['page_rules'])}; "
                          f"about other brokers: {len(row['false_alerts'])} {row['false_alerts'] or ''}")
            else:
                cells += f"  alerts raised: {len(row['false_alerts'])} {row['false_alerts'] or ''}"
            print(cells)
        frozen = table[0]
        print(f"goals (issue 44): warned <= {WARN_GOAL_S:g} s after the freeze (median {frozen['warning_s'][0]:.2f}: "
              f"{'met' if frozen['warning_s'][0] <= WARN_GOAL_S else 'NOT met'}; worst <= {WARN_WORST_S:g} s: "
              f"{frozen['warning_s'][1]:.2f}, {'met' if frozen['warning_s'][1] <= WARN_WORST_S else 'NOT met'}); "
              f"paged <= {PAGE_AFTER_FENCE_GOAL_S:g} s after Kafka's fence "
              f"(median {frozen['page_after_kafka_s'][0]:.2f}: "
              f"{'met' if frozen['page_after_kafka_s'][0] <= PAGE_AFTER_FENCE_GOAL_S else 'NOT met'})")
    print(f"the probe's events ({workdir / 'probe-events.jsonl'}); {late} refused as late by the job:")
    print(report(probe_disorder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
