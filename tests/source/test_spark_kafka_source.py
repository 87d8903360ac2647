"""Spark's own Kafka source (`spark-sql-kafka-0-10`, fetched by `make jars`) over a real Apache
Kafka 4.4 bus, against `replay` of the same events.

The production ingest path: a configured bus is read by Spark's `kafka` format. A simulated
fleet with every fault kind is produced to a real Kafka broker; the live job reading it through
the connector must put exactly the alert lines in the store that `fleetwatch replay` gives for
the same events. A checkpoint keeps the source that started it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from kafka import KafkaProducer
from sqlalchemy import select

from streaming.bus import check_list_offsets
from streaming.collect.simulate import FAULT_KINDS, FleetSpec, Simulation, write_events
from streaming.config import ConfigError, FleetwatchConfig
from streaming.job import replay_file, start_live_query
from streaming.records import topics
from streaming.records.contract import topic_of
from streaming.source import SPARK_SOURCE, choose_source, jvm_kafka_available
from streaming.store import Store, alert_history
from streaming.workshop.polling import poll

pytestmark = [pytest.mark.real_kafka, pytest.mark.spark]

START_MS = 1_764_000_000_000


def _config(tmp_path: Path, test_config: FleetwatchConfig, bootstrap: str, source: str) -> FleetwatchConfig:
    return test_config.model_copy(update={
        "bus": test_config.bus.model_copy(update={"bootstrap_servers": bootstrap, "source": source}),
        "spark": test_config.spark.model_copy(update={"checkpoint_dir": str(tmp_path / "checkpoint"),
                                                      "trigger_ms": 500}),
    })


def _produce(bootstrap: str, events_file: Path) -> int:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    count = 0
    with events_file.open("rb") as fh:
        for line in fh:
            event = json.loads(line)
            producer.send(topic_of(event["type"]), key=(event.get("cluster_id") or "").encode(),
                          value=line.rstrip(b"\n"))
            count += 1
    producer.send(topics.METADATA, value=b"\x00{not json")  # quarantined by both paths
    producer.flush()
    producer.close()
    return count + 1


def _lines(store: Store) -> set[tuple[str, str]]:
    with store.engine.connect() as conn:
        return set(conn.execute(select(alert_history.c.alert_id, alert_history.c.status)).all())


def test_the_connector_over_real_kafka_gives_exactly_the_alerts_of_replay(spark, test_config, kafka_bus, tmp_path):
    assert jvm_kafka_available(spark), "make jars fetches the connector and spark_session puts it on the classpath"
    events = tmp_path / "events.jsonl"
    sim = Simulation(FleetSpec(clusters=8, brokers=3, faults=FAULT_KINDS, start_ms=START_MS, duration_ms=900_000,
                               seed=11, first_fault_ms=30_000, fault_every_ms=45_000))
    write_events(sim, events)
    replayed = replay_file(events, None, test_config)
    expected = {(a["alert_id"], a["status"]) for a in replayed.alerts}
    assert len({a["rule"] for a in replayed.alerts}) >= 8, "the fleet should raise many kinds of alert"

    produced = _produce(kafka_bus, events)
    config = _config(tmp_path, test_config, kafka_bus, "spark")
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    job = start_live_query(spark, config, kafka_bus, store)
    query, recorder = job.query, job.recorder
    try:
        assert recorder.wait("fleetwatch", lambda s: s.input_rows >= produced, timeout_s=240)
        poll(lambda: _lines(store) == expected, 120, lambda: f"the replay's alert lines in the store (missing "
             f"{expected - _lines(store)}, unexpected {_lines(store) - expected})", interval_s=0.5)
        assert recorder.stats["fleetwatch"].input_rows == produced
        assert "Kafka" in query.lastProgress["sources"][0]["description"]  # Spark's KafkaV2 source read it
    finally:
        job.stop()
        spark.streams.removeListener(recorder)


def test_a_checkpoint_keeps_the_source_that_started_it(spark, test_config, kafka_bus, tmp_path, caplog):
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    job = start_live_query(spark, _config(tmp_path, test_config, kafka_bus, "spark"), kafka_bus, store)
    job.stop()
    spark.streams.removeListener(job.recorder)
    assert (tmp_path / "checkpoint" / "fleetwatch" / f"source={SPARK_SOURCE}").exists()
    with pytest.raises(ConfigError, match="cannot switch sources"):
        start_live_query(spark, _config(tmp_path, test_config, kafka_bus, "python"), kafka_bus, store)
    # `auto` resumes with the checkpoint's source.
    caplog.clear()  # the first start's line is captured too when an earlier test left the logger at INFO
    with caplog.at_level(logging.INFO, logger="streaming.source.telemetry"):
        job = start_live_query(spark, _config(tmp_path, test_config, kafka_bus, "auto"), kafka_bus, store)
    job.stop()
    spark.streams.removeListener(job.recorder)
    assert [r.source for r in caplog.records if r.getMessage().startswith("telemetry source:")] == [SPARK_SOURCE]


def test_real_kafka_answers_list_offsets_with_the_high_watermark(kafka_bus):
    check = check_list_offsets(kafka_bus, timeout_s=60, cached=False)
    print(f"\nListOffsets check on Kafka 4.4: {check.took_s:.3f} s")
    assert check.verdict is True, check
    assert check.listed == check.acked_end == check.fetched


def test_auto_reads_a_configured_real_kafka_bus_with_the_connector(spark, test_config, kafka_bus, tmp_path, caplog):
    assert jvm_kafka_available(spark)
    bus = _config(tmp_path, test_config, kafka_bus, "auto").bus
    with caplog.at_level(logging.INFO, logger="streaming.source.telemetry"):
        assert choose_source(spark, bus, str(tmp_path / "checkpoint")) == SPARK_SOURCE
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("telemetry source:")]
    assert line == (f"telemetry source: Spark kafka connector (bus.source auto: the bus at {kafka_bus} answers "
                    "ListOffsets(LATEST) with the high watermark)")
    assert (tmp_path / "checkpoint" / f"source={SPARK_SOURCE}").exists()
