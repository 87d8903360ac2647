"""What the job does and says when the bus drops telemetry it had not read, on a real Apache Kafka 4.4
bus, with both telemetry sources (Spark's kafka connector and the Python reader, `bus.source`).

- DeleteRecords while the job is stopped (what retention does to a job down for too long): the
  restarted job counts exactly the records it lost (`fleetwatch_bus_records_lost_total`), says so in
  one log line, keeps running, and raises no alert a healthy fleet does not deserve, even for a
  loss longer than a broker session: the lost time is blindness, not silence (issue 27). A broker
  still silent after the loss fires one session after its end.
- The Python reader alone: a planned range whose topic is deleted before it is read ends at once,
  instead of failing the query after `timeout_ms` (which a restart of the query would meet again),
  without creating the topic again; once created again, its records are read from 0, once.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from kafka.partitioner.default import murmur2
from support.live_fleet import produce
from support.supervised import SupervisedJob

from streaming.collect.simulate import FleetSpec, Simulation
from streaming.detect import detect
from streaming.metrics import render_metrics
from streaming.records import topics
from streaming.records.contract import event_from_dict
from streaming.source import KafkaReaderOptions, KafkaStreamReader
from streaming.store import Store, alert_history
from streaming.workshop.polling import poll

pytestmark = [pytest.mark.real_kafka]

START_MS = 1_764_000_000_000


def _lost_total(store: Store) -> float:
    [line] = [line for line in render_metrics(store.engine).splitlines()
              if line.startswith("fleetwatch_bus_records_lost_total ")]
    return float(line.split()[1])


def _ends(bootstrap: str) -> dict[TopicPartition, int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tps = [TopicPartition(t, p) for t in topics.TELEMETRY for p in consumer.partitions_for_topic(t)]
        return consumer.end_offsets(tps)
    finally:
        consumer.close()


def _lose_while_stopped(spark, config, kafka_bus: str, store: Store, caplog, events: list,
                        lost_from_ms: int, lost_until_ms: int) -> tuple[list[logging.LogRecord], float]:
    """The job reads the events before `lost_from_ms` and stops; those up to `lost_until_ms` are
    produced and deleted (DeleteRecords) unread, the rest produced; the job restarts and reads
    them. The loss lines of the restarted job's log, and what it added to the counter."""
    read = [e for e in events if e[1]["ts"] < lost_from_ms]
    lost = [e for e in events if lost_from_ms <= e[1]["ts"] < lost_until_ms]
    rest = [e for e in events if e[1]["ts"] >= lost_until_ms]
    assert lost and rest

    def run_until(rows: int) -> None:
        with SupervisedJob(spark, config, kafka_bus, store) as job:
            assert job.recorder.wait("fleetwatch", lambda s: s.input_rows >= rows or job.unexpected(), 120)
            assert job.unexpected() is None

    produce(kafka_bus, read)
    run_until(len(read))
    before = _ends(kafka_bus)
    produce(kafka_bus, lost)  # the job is stopped: it never reads these
    after = _ends(kafka_bus)
    assert sum(after.values()) - sum(before.values()) == len(lost)
    admin = KafkaAdminClient(bootstrap_servers=kafka_bus)
    try:
        admin.delete_records({tp: end for tp, end in after.items() if end > before[tp]})
    finally:
        admin.close()
    produce(kafka_bus, rest)
    counted = _lost_total(store)
    with caplog.at_level(logging.INFO, logger="streaming.job.progress"):
        run_until(len(rest))
    lines = [r for r in caplog.records if r.getMessage().startswith("bus data loss:")]
    return lines, _lost_total(store) - counted


def _first_ts_after_loss(bootstrap: str, cluster_id: str) -> int:
    """The event time of the first record the bus still holds in the heartbeats partition of
    `cluster_id` (collectors key their records by cluster id): where the job's blindness ends."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        partitions = sorted(consumer.partitions_for_topic(topics.HEARTBEATS))
        tp = TopicPartition(topics.HEARTBEATS,
                            partitions[(murmur2(cluster_id.encode()) & 0x7FFFFFFF) % len(partitions)])
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        records = poll(lambda: consumer.poll(timeout_ms=1000).get(tp), 30, "the partition's first record")
        return json.loads(records[0].value)["ts"]
    finally:
        consumer.close()


def _job_config(test_config, kafka_bus: str, tmp_path: Path, source: str):
    return test_config.model_copy(update={
        "bus": test_config.bus.model_copy(update={"bootstrap_servers": kafka_bus, "source": source}),
        "spark": test_config.spark.model_copy(update={"checkpoint_dir": str(tmp_path / "checkpoint"),
                                                      "trigger_ms": 500}),
    })


@pytest.mark.spark
@pytest.mark.parametrize("source", ["spark", "python"])
def test_a_long_loss_is_counted_raises_nothing_and_a_broker_silent_after_it_fires_at_its_end(
        spark, test_config, kafka_bus, tmp_path, caplog, source):
    """30 s of a fleet's telemetry deleted unread (longer than the 9 s broker session), and one
    broker that sends nothing after them (nor answers): the loss is counted in one line, the job goes
    on, the silent broker's `broker.heartbeat_lost` fires one session after the first record of its
    partition after the loss (the end of the job's blindness), and nothing else does. Before
    detection knew of the loss (issue 27), the job stored what the detector makes of the records it
    read: `broker.heartbeat_lost` for every broker (at its last heartbeat before the loss + 9 s), a
    false page made by the job's blindness. (One test for the three: each run of it is a job
    stopped, restarted and read to its end, with each source.)"""
    started = time.monotonic()
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    # The telemetry of collectors that do not say their rounds (no quorum readings): the job's blindness to
    # the loss is told by the bus offsets alone (a probe's rounds tell it too: "Collectors" in the README).
    events = list(Simulation(FleetSpec(clusters=2, brokers=3, faults=(), start_ms=START_MS,
                                       duration_ms=90_000, seed=5, quorum_interval_ms=0)).events())
    lost_from, lost_until = START_MS + 30_000, START_MS + 60_000
    cluster = events[0][1]["cluster_id"]

    def silent(e: dict) -> bool:
        return e["ts"] >= lost_until and e["cluster_id"] == cluster and 3 in (
            e.get("broker_id"), e.get("responder_node_id"))

    events = [(topic, e) for topic, e in events if not silent(e)]
    lost = [e for e in events if lost_from <= e[1]["ts"] < lost_until]
    lines, counted = _lose_while_stopped(spark, _job_config(test_config, kafka_bus, tmp_path, source), kafka_bus,
                                         store, caplog, events, lost_from, lost_until)
    assert [r.lost for r in lines] == [len(lost)] and counted == len(lost)
    read = [event_from_dict(e) for _, e in events if not lost_from <= e["ts"] < lost_until]
    brokers = {(e["cluster_id"], e["broker_id"]) for _, e in events if e.get("kind") == "heartbeat"}
    # What the job stored before issue 27: the detector over the records it read, blind to the loss.
    blind = [(a.rule, a.status) for a in detect(read)]
    assert blind.count(("broker.heartbeat_lost", "firing")) == len(brokers) == 6
    print(f"\n{source}: {len(lost)} deleted records counted in one line; {len(_stored(store))} alerts stored "
          f"({len(blind)} lines blind to the loss); test took {time.monotonic() - started:.1f} s")
    until = _first_ts_after_loss(kafka_bus, cluster)
    assert lost_until <= until < lost_until + 2_000
    assert [(a["rule"], a["status"], a["cluster_id"], a["broker_id"], a["starts_at"]) for a in _stored(store)] == [
        ("broker.heartbeat_lost", "firing", cluster, 3, until + 9_000)]


def _stored(store: Store) -> list[dict]:
    """The alert lines stored, in event-time order."""
    with store.engine.connect() as conn:
        bodies = [json.loads(row.body) for row in conn.execute(alert_history.select())]
    return sorted(bodies, key=lambda b: (b["starts_at"], b["rule"], b["status"]))


def test_a_range_whose_topic_is_deleted_before_it_is_read_ends_at_once(kafka_bus):
    topic = "deleted-under-a-range"
    admin = KafkaAdminClient(bootstrap_servers=kafka_bus)
    reader = KafkaStreamReader(KafkaReaderOptions(kafka_bus, (topic,), timeout_ms=20_000))
    try:
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
        produce(kafka_bus, [(topic, {"i": i}) for i in range(10)])
        start = reader.initialOffset()
        end = poll(lambda: (e := reader.latestOffset()).get(f"{topic}:0") == 10 and e, 30, "10 records", interval_s=0.5)
        (planned,) = reader.partitions(start, end)
        reader.commit(end)
        admin.delete_topics([topic])
        poll(lambda: topic not in admin.list_topics(), 30, "the topic deleted", interval_s=0.5)
        began = time.monotonic()
        assert list(reader.read(planned)) == []  # the records are gone with their topic
        took = time.monotonic() - began
        assert took < 10, f"the read took {took:.1f} s: it waited for records that cannot come"
        assert topic not in admin.list_topics(), "the reader created the deleted topic again"
        # Created again (by an SRE or a producer): its records are read from its beginning, once.
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
        produce(kafka_bus, [(topic, {"again": i}) for i in range(3)])
        latest = poll(lambda: (e := reader.latestOffset()).get(f"{topic}:0") == 3 and e, 30,
                      "the new topic's 3 records planned", interval_s=0.5)
        rows = [row for r in reader.partitions(end, latest) for batch in reader.read(r) for row in batch.to_pylist()]
        assert [row["offset"] for row in rows] == [0, 1, 2]
        print(f"\na range of a deleted topic ended in {took:.2f} s")
    finally:
        reader.stop()
        admin.close()
