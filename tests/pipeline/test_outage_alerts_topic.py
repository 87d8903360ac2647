"""The outbox first (issue 19): a micro-batch's alerts reach the store and the outbox before anything
else; the alerts topic is best effort, checked, and created by the job.

Real parts: Spark DataFrames into the job's writer, a real Tansu bus, and for a bus without
automatic topic creation a real Apache Kafka 4.4 broker (auto.create.topics.enable=false).
"""

from __future__ import annotations

import json

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from sqlalchemy import func, select

from streaming.bus import EmbeddedBus, ensure_topics
from streaming.job import start_live_query
from streaming.metrics import render_metrics
from streaming.pipeline.state import OUTPUT_SCHEMA
from streaming.records import topics
from streaming.records.alert import Alert
from streaming.records.job_output import Row, alert_row
from streaming.sinks.alerts_topic import AlertPublisher
from streaming.sinks.batch_writer import BatchWriter
from streaming.store import Store, alert_history, alerts, outbox
from streaming.workshop.polling import poll

pytestmark = pytest.mark.spark

AT = 1_764_000_039_002


def _alert_row(broker_id: int, summary: str) -> Row:
    return alert_row(Alert.firing("broker.heartbeat_lost", f"c1/{broker_id}", AT, summary, cluster_id="c1",
                                  broker_id=broker_id))


def _published(bootstrap: str, timeout_s: float = 30) -> list[dict]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, consumer_timeout_ms=2000)
    try:
        poll(lambda: topics.ALERTS in consumer.topics(), timeout_s, "the alerts topic on the bus", interval_s=0.2)
        partitions = [TopicPartition(topics.ALERTS, p) for p in consumer.partitions_for_topic(topics.ALERTS) or ()]
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        return [json.loads(record.value) for record in consumer]
    finally:
        consumer.close()


def _metric(text: str, name: str) -> float | None:
    return next((float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")), None)


def test_an_alert_the_bus_refuses_is_still_stored_and_in_the_outbox(spark, tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    with EmbeddedBus(topics=topics.ALL, log_path=tmp_path / "tansu.log") as bus:
        publisher = AlertPublisher(bus.bootstrap)
        before = _metric(render_metrics(store.engine), "fleetwatch_alert_publish_failures_total")
        writer = BatchWriter(store, on_alerts=publisher)
        huge = "x" * (1024 * 1024 + 1)  # over the producer's 1 MiB request limit
        batch = spark.createDataFrame([_alert_row(1, huge), _alert_row(2, "broker 2 lost")], OUTPUT_SCHEMA)
        writer(batch, 0)  # must not raise: the batch is done once the store has it
        with store.engine.connect() as conn:
            assert conn.scalar(select(func.count()).select_from(alerts)) == 2
            assert conn.scalar(select(func.count()).select_from(outbox)) == 2
            assert len(conn.scalar(select(outbox.c.body).where(outbox.c.body.contains(huge[:100])))) > 1024 * 1024
        assert [a["broker_id"] for a in _published(bus.bootstrap)] == [2]
        assert (publisher.published, publisher.failed) == (1, 1)
        after = _metric(render_metrics(store.engine), "fleetwatch_alert_publish_failures_total")
        assert before is not None and after == before + 1
        publisher.close()


@pytest.mark.real_kafka
def test_the_job_creates_the_alerts_topic_on_a_bus_that_creates_none(spark, test_config, tmp_path):
    from streaming.collect.simulate import FleetSpec, Simulation
    from streaming.workshop.kraft import KRaftCluster

    sim = Simulation(FleetSpec(clusters=2, brokers=3, faults=("broker.heartbeat_lost",), start_ms=1_764_000_000_000,
                               duration_ms=90_000, seed=7, first_fault_ms=30_000, fault_every_ms=60_000))
    with KRaftCluster(tmp_path / "kafka", brokers=1, extra={"auto.create.topics.enable": "false"}) as kafka:
        bootstrap = kafka.bootstrap[0]
        ensure_topics(bootstrap, topics.TELEMETRY)  # the collectors' topics exist; the alerts topic does not
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        assert topics.ALERTS not in admin.list_topics()
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
        for topic, event in sim.events():
            producer.send(topic, value=json.dumps(event).encode())
        producer.flush()
        producer.close()
        store = Store(f"sqlite:///{tmp_path / 'store.db'}")
        config = test_config.model_copy(update={"spark": test_config.spark.model_copy(
            update={"checkpoint_dir": str(tmp_path / "checkpoint"), "trigger_ms": 500})})
        publisher = AlertPublisher(bootstrap)
        job = start_live_query(spark, config, bootstrap, store, publisher)
        query, recorder = job.query, job.recorder
        try:
            assert topics.ALERTS in admin.list_topics()

            def stored() -> set[tuple[str, str]]:
                with store.engine.connect() as conn:
                    return set(conn.execute(select(alert_history.c.alert_id, alert_history.c.status)).all())

            poll(lambda: stored() or not query.isActive, 240, "an alert stored", interval_s=0.5)
            assert stored(), f"no alert stored; query failed: {query.exception()}"
            published = _published(bootstrap)
            assert {(a["alert_id"], a["status"]) for a in published} == stored()
            assert publisher.failed == 0 and query.isActive
        finally:
            job.stop()
            spark.streams.removeListener(recorder)
            publisher.close()
            admin.close()
