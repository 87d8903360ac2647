"""A simulated fleet through the live job: the fleet, producing it to a bus, the alert lines it
must give (the engine's, as `replay` gives them) and the lines in the store, polled with a deadline.
Shared by the live job's tests and the outage tests (bus, store)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kafka import KafkaAdminClient, KafkaProducer
from sqlalchemy import select

from streaming.bus import BusError, ensure_topics
from streaming.collect.simulate import FleetSpec, Simulation
from streaming.config import RuleBook
from streaming.detect import detect
from streaming.records import topics
from streaming.records.contract import event_from_dict
from streaming.store import Store, alert_history
from streaming.workshop.kraft import KRaftCluster
from streaming.workshop.polling import poll

__all__ = ["CAP", "START_MS", "capped_fleet", "empty_topics", "expected_lines", "produce", "real_kafka_bus",
           "simulated_fleet", "stored_lines"]

START_MS = 1_764_000_000_000


def simulated_fleet(duration_ms: int = 150_000, clusters: int = 3) -> Simulation:
    return Simulation(FleetSpec(clusters=clusters, brokers=3, faults=("broker.heartbeat_lost",), start_ms=START_MS,
                                duration_ms=duration_ms, seed=7, first_fault_ms=30_000, fault_every_ms=60_000))


# A restart onto a backlog of `capped_fleet`'s last three minutes (about 1,300 records) under this
# cap reads it in half a dozen capped micro-batches or more (issue 41).
CAP = 200


def capped_fleet() -> Simulation:
    """4 minutes of 3 clusters with broker faults that write broker states (a sparse partition) through
    the backlog: what a restart in capped batches reads out of event-time order (issue 41)."""
    return Simulation(FleetSpec(clusters=3, brokers=3, start_ms=START_MS, duration_ms=240_000, seed=11,
                                faults=("broker.heartbeat_lost", "broker.fenced", "broker.flapping",
                                        "broker.stuck_stopping", "broker.partitioned"),
                                first_fault_ms=40_000, fault_every_ms=30_000))


@contextmanager
def real_kafka_bus(workdir: Path) -> Iterator[str]:
    """One real Kafka 4.4 node as the telemetry bus (its address), its topics with two partitions each."""
    with KRaftCluster(workdir, brokers=1) as cluster:
        bootstrap = cluster.bootstrap[0]
        empty_topics(bootstrap)
        yield bootstrap


def empty_topics(bootstrap: str, timeout_s: float = 60) -> None:
    """Every topic of the bus deleted (Kafka's own `__` topics aside) and the telemetry topics created
    again, empty, with two partitions each: a test on a node earlier tests wrote to (and deleted
    records or topics of) starts from a bus none of them touched."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        ours = [t for t in admin.list_topics() if not t.startswith("__")]
        if ours:
            admin.delete_topics(ours)
            poll(lambda: not set(ours) & set(admin.list_topics()), timeout_s, f"topics {ours} deleted")
    finally:
        admin.close()
    # A name whose deletion the controller has not finished is still taken, and ensure_topics then
    # waits for a topic its refused create never makes: short tries, until one is created.
    poll(lambda: ensure_topics(bootstrap, topics.TELEMETRY, 2, timeout_s=5) is None, timeout_s,
         "the telemetry topics created again", retry_on=(BusError,))


# Produced events are flushed every this much event time, as collectors that send as they probe.
_FLUSH_EVERY_MS = 5_000


def produce(bootstrap: str, items) -> int:
    """Produce `(topic, event)` items in order, waiting every `_FLUSH_EVERY_MS` of event time until
    everything sent so far is acknowledged.

    Without the waits, one partition can lag far behind the others in what the job can read
    (the producer holds a partition's batches while it learns its leader, as after a restart of
    the bus): a job reading meanwhile sees one partition minutes ahead in event time, and the
    other's events are late, which collectors sending as they go would never make them.
    """
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    count = 0
    flushed_to: int | None = None
    sent = []
    for topic, event in items:
        ts = event.get("ts")
        if isinstance(ts, int) and (flushed_to is None or ts - flushed_to >= _FLUSH_EVERY_MS):
            _delivered(producer, sent)
            flushed_to = ts
        sent.append(producer.send(topic, key=(event.get("cluster_id") or "").encode(),
                                  value=json.dumps(event).encode()))
        count += 1
    _delivered(producer, sent)
    producer.close()
    return count


def _delivered(producer: KafkaProducer, sent: list) -> None:
    """Wait until every record sent so far is acknowledged. With flush() alone, one partition's
    events still reached the job a minute of event time after the other partitions' (CI, after a
    restart of the bus) and were late; most likely flush() returned while that partition's
    records were held. The acknowledgements are what the job can read, whatever flush() does."""
    producer.flush()
    for future in sent:
        future.get(timeout=60)  # raises if the record could not be delivered
    sent.clear()


def stored_lines(store: Store) -> set[tuple[str, str]]:
    with store.engine.connect() as conn:
        return set(conn.execute(select(alert_history.c.alert_id, alert_history.c.status)).all())


def expected_lines(sim: Simulation, book: RuleBook | None = None) -> set[tuple[str, str]]:
    events = [event_from_dict(e) for _, e in sim.events()]
    return {(a.to_dict()["alert_id"], a.status) for a in detect(events, book)}
