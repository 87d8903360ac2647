"""A telemetry topic deleted under the running job (issue 27 point 2), on a real Apache Kafka 4.4 bus,
with both telemetry sources (Spark's kafka connector and the Python reader, `bus.source`).

The job keeps running: no failed query, no restart loop; it does not create the topic again itself
(an empty topic under a new id would hide the deletion from the operator); and once the topic exists
again with new records, they are read and their alerts stored. Before the Spark source subscribed by
pattern, its admin client failed the query at once (UnknownTopicOrPartitionException).

The job's log names the topic: one warning when it is deleted, one info line when it is back (the
progress listener reads both from the batches' offsets: streaming/source/bus_loss.py). Before, no line of
the job's Python log named it with either source (the Python reader logs in Spark's Python worker,
Spark's connector in the JVM).
"""

from __future__ import annotations

import json
import logging
import time

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from support.live_fleet import produce

from streaming.collect.simulate import FleetSpec, Simulation
from streaming.job import start_live_query
from streaming.records import topics
from streaming.source import KafkaReaderOptions, KafkaStreamReader
from streaming.source.kafka_offsets import GONE_TOPICS, offsets_by_partition
from streaming.store import Store, alert_history
from streaming.workshop.polling import poll

pytestmark = [pytest.mark.real_kafka]

START_MS = 1_764_000_000_000
HELD_S = 20  # how long the topic stays deleted under the running job


def _heartbeat(ts: int, cluster_id: str, epoch: int) -> tuple[str, dict]:
    return topics.HEARTBEATS, {"schema": "fleetwatch.event/v1", "type": "broker_heartbeat", "ts": ts,
                               "source": "agent-test", "cluster_id": cluster_id, "broker_id": 1,
                               "kind": "heartbeat", "broker_epoch": epoch}


def _rules(store: Store) -> set[str]:
    with store.engine.connect() as conn:
        return {json.loads(row.body)["rule"] for row in conn.execute(alert_history.select())}


def _lines(caplog, start: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "streaming.job.progress" and r.getMessage().startswith(start)]


@pytest.mark.spark
@pytest.mark.parametrize("source", ["spark", "python"])
def test_a_telemetry_topic_deleted_under_the_job_is_read_again_once_it_is_back(
        spark, test_config, kafka_bus, tmp_path, caplog, source):
    started = time.monotonic()
    config = test_config.model_copy(update={
        "bus": test_config.bus.model_copy(update={"bootstrap_servers": kafka_bus, "source": source}),
        "spark": test_config.spark.model_copy(update={"checkpoint_dir": str(tmp_path / "checkpoint"),
                                                      "trigger_ms": 500}),
    })
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    events = list(Simulation(FleetSpec(clusters=1, brokers=3, faults=(), start_ms=START_MS,
                                       duration_ms=20_000, seed=5)).events())
    cluster_id = next(e["cluster_id"] for _, e in events if e.get("cluster_id"))
    admin = KafkaAdminClient(bootstrap_servers=kafka_bus)
    produce(kafka_bus, events)
    job = start_live_query(spark, config, kafka_bus, store)
    try:
        with caplog.at_level(logging.INFO):
            assert job.recorder.wait("fleetwatch", lambda s: s.input_rows >= len(events) or job.query.exception(), 180)
            admin.delete_topics([topics.HEARTBEATS])
            deleted = time.monotonic()
            poll(lambda: topics.HEARTBEATS not in admin.list_topics(), 30, "the topic deleted", interval_s=0.5)
            # Held deleted under the running job: it keeps running and does not bring the topic back.
            recreated_by_job = None
            while time.monotonic() - deleted < HELD_S:
                assert job.query.exception() is None and job.query.isActive
                if recreated_by_job is None and topics.HEARTBEATS in admin.list_topics():
                    recreated_by_job = round(time.monotonic() - deleted, 1)
                time.sleep(1)  # the observation period itself, not a synchronisation
            said = _lines(caplog, "bus topic deleted:")
            if recreated_by_job is None:
                admin.create_topics([NewTopic(topics.HEARTBEATS, num_partitions=2, replication_factor=1)])
            # New records: a stale process of broker 1 (a lower epoch) is an alert at its event.
            produce(kafka_bus, [_heartbeat(START_MS + 21_000, cluster_id, 9),
                                _heartbeat(START_MS + 21_500, cluster_id, 3)])
            poll(lambda: "broker.epoch_regression" in _rules(store) or job.query.exception(), 120,
                 "the alert from the recreated topic's records", interval_s=0.5)
            assert job.query.exception() is None and job.query.isActive
            # Other telemetry topics may be new in a batch (created by their first record): said too.
            # Said once the batch's progress reaches the listener, which can be after its alert is stored.
            back = poll(lambda: [r for r in _lines(caplog, "bus topic present again")
                                       if r.topic == topics.HEARTBEATS], 60, "the line saying the topic is back",
                        interval_s=0.5)
    finally:
        job.stop()
        spark.streams.removeListener(job.recorder)
        admin.close()
    print(f"\n{source}: topic recreated by the job after {recreated_by_job} s (None: not); "
          f"{len(said)} warning and {len(back)} info lines naming it; test took {time.monotonic() - started:.1f} s")
    assert recreated_by_job is None, f"the job created the deleted topic again after {recreated_by_job} s"
    assert [(r.levelno, r.topic) for r in said] == [(logging.WARNING, topics.HEARTBEATS)]
    assert [r.levelno for r in back] == [logging.INFO]


def test_the_reader_asks_again_when_a_topic_it_knew_is_deleted_before_its_offsets(kafka_bus):
    """kafka-python leaves a partition whose leader its cluster view no longer has out of its ListOffsets
    requests, then fails on the missing answer (a KeyError, 3.0.12). A topic deleted after the reader
    last looked at the topics, and dropped from that view by a metadata refresh before the reader asked
    for the end offsets, failed the live query (the test above, with the Python reader: once in a fresh
    clone's run). The reader looks at the topics again and asks for the offsets of those that exist."""
    kept, deleted = (f"fleetwatch.deleted-test.{name}.{time.monotonic_ns()}" for name in ("kept", "deleted"))
    admin = KafkaAdminClient(bootstrap_servers=kafka_bus)
    reader = KafkaStreamReader(KafkaReaderOptions(kafka_bus, (kept, deleted)))
    try:
        admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1) for name in (kept, deleted)])
        produce(kafka_bus, [(name, {"n": n}) for name in (kept, deleted) for n in range(3)])
        first = reader.latestOffset()
        assert offsets_by_partition(first) == {f"{kept}:0": 3, f"{deleted}:0": 3}
        reader.commit(first)  # as Spark does once the batch is read
        admin.delete_topics([deleted])
        poll(lambda: deleted not in admin.list_topics(), 30, "the topic deleted", interval_s=0.2)
        reader._driver_consumer().topics()  # the client's view refreshed without it, as its background refresh does
        produce(kafka_bus, [(kept, {"n": 3})])
        latest = reader.latestOffset()
        assert offsets_by_partition(latest) == {f"{kept}:0": 4, f"{deleted}:0": 3}  # the gone one's as read
        assert latest[GONE_TOPICS] == [deleted]
    finally:
        reader.stop()
        admin.close()
