"""The embedded Tansu bus and the telemetry source, against a real broker and real Spark."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streaming.bus import BusError, EmbeddedBus, ensure_topics
from streaming.config import BusConfig, ConfigError
from streaming.records import topics
from streaming.source import (
    PYTHON_SOURCE,
    KafkaReaderOptions,
    KafkaSourceError,
    KafkaStreamReader,
    TopicPartitionRange,
    choose_source,
    jvm_kafka_available,
    kafka_reader,
    read_telemetry,
)
from streaming.source.kafka_ranges import ranges_of
from streaming.workshop.polling import poll

# (topic, partition, offset) -> (key, value, timestamp ms)
Records = dict[tuple[str, int, int], tuple[str | None, str, int]]

TWO_PARTITIONS = topics.METADATA
ONE_PARTITION = topics.HEARTBEATS
LATE_TOPIC = topics.BROKER_STATES  # does not exist when the first query starts
STREAM_TOPICS = (TWO_PARTITIONS, ONE_PARTITION, LATE_TOPIC)
INVALID_UTF8 = b'{"broken": "\xff\xfe"}'


@pytest.fixture(scope="module")
def bus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBus]:
    log_path = tmp_path_factory.mktemp("bus") / "tansu.log"
    with EmbeddedBus(
        topics=(TWO_PARTITIONS, ONE_PARTITION), partitions={TWO_PARTITIONS: 2}, log_path=log_path
    ) as running:
        yield running


def produce(bootstrap: str, counts: Mapping[tuple[str, int], int], tag: str) -> Records:
    """Send `counts` messages per topic-partition, flushing every 7 so that each partition
    holds several record batches: on Tansu the last one is invisible to ListOffsets."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50)
    futures = []
    try:
        for (topic, partition), count in counts.items():
            for i in range(count):
                key = None if i % 5 == 0 else f"cluster-{i % 3}"
                value = INVALID_UTF8 if i == 3 else json.dumps({"tag": tag, "i": i}).encode()
                futures.append((key, value, producer.send(topic, key=key and key.encode(), value=value,
                                                          partition=partition)))
                if i % 7 == 6:
                    producer.flush()
        producer.flush()
    finally:
        producer.close()
    records: Records = {}
    for key, value, future in futures:
        meta = future.get(timeout=10)
        records[(meta.topic, meta.partition, meta.offset)] = (
            key, value.decode("utf-8", errors="replace"), meta.timestamp)
    return records


def run_available_now(df: DataFrame, checkpoint: Path) -> list[tuple]:
    """Run the stream to the end of what is available now; return the rows it saw."""
    seen: list[tuple] = []

    def collect(batch: DataFrame, _batch_id: int) -> None:
        rows = batch.select("topic", "partition", "offset", "key", "value",
                            F.unix_millis("timestamp").alias("ts")).collect()
        seen.extend(tuple(row) for row in rows)

    query = (df.writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(timeout=90), "streaming query did not finish within 90 s"
    finally:
        query.stop()
    assert query.exception() is None, query.exception()
    return seen


def as_records(rows: list[tuple]) -> Records:
    records: Records = {}
    for topic, partition, offset, key, value, ts in rows:
        assert (topic, partition, offset) not in records, f"read twice: {topic}:{partition}@{offset}"
        records[(topic, partition, offset)] = (key, value, ts)
    return records


@pytest.mark.broker
@pytest.mark.spark
def test_stream_reads_every_message_exactly_once_across_restart(
    bus: EmbeddedBus, spark: SparkSession, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "checkpoint"
    first = produce(bus.bootstrap, {(TWO_PARTITIONS, 0): 23, (TWO_PARTITIONS, 1): 17, (ONE_PARTITION, 0): 30}, "a")
    df = read_telemetry(spark, bus.bootstrap, STREAM_TOPICS)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema] == [
        ("key", "string"), ("value", "string"), ("topic", "string"), ("partition", "int"),
        ("offset", "bigint"), ("timestamp", "timestamp")]
    # The timestamp must be an instant, independent of the session time zone.
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        assert as_records(run_available_now(df, checkpoint)) == first
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    assert first[(TWO_PARTITIONS, 0, 3)][1] == '{"broken": "\ufffd\ufffd"}'

    ensure_topics(bus.bootstrap, [LATE_TOPIC])  # appears while the stream is stopped
    second = produce(bus.bootstrap, {(TWO_PARTITIONS, 1): 9, (ONE_PARTITION, 0): 1, (LATE_TOPIC, 0): 12}, "b")
    restarted = read_telemetry(spark, bus.bootstrap, STREAM_TOPICS)
    assert as_records(run_available_now(restarted, checkpoint)) == second

    assert run_available_now(read_telemetry(spark, bus.bootstrap, STREAM_TOPICS), checkpoint) == []


@pytest.mark.broker
@pytest.mark.spark
def test_capped_batches_resume_where_the_checkpoint_left_off(
    bus: EmbeddedBus, spark: SparkSession, tmp_path: Path
) -> None:
    # Starting from "latest" leaves the other test's messages out; ours arrive afterwards.
    checkpoint = tmp_path / "checkpoint"
    assert run_available_now(
        read_telemetry(spark, bus.bootstrap, [TWO_PARTITIONS], starting_offsets="latest"), checkpoint) == []
    produced = produce(bus.bootstrap, {(TWO_PARTITIONS, 0): 20, (TWO_PARTITIONS, 1): 10}, "capped")
    seen: Records = {}
    # availableNow asks a 4.1 Python source for its latest offset once: one capped batch per run.
    for cap, expected in ((12, 12), (12, 12), (0, 6)):
        rows = as_records(run_available_now(
            read_telemetry(spark, bus.bootstrap, [TWO_PARTITIONS], max_records_per_batch=cap), checkpoint))
        assert len(rows) == expected
        assert not rows.keys() & seen.keys(), "a restart re-read records"
        seen |= rows
    assert seen == produced


@pytest.mark.broker
def test_a_tansu_bus_is_read_by_the_python_source_even_with_the_connector(
    bus: EmbeddedBus, spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tansu's ListOffsets answers an offset inside the last batch, which Spark's source would trust
    # (issue 26: a Tansu bus configured by address got the connector, and false heartbeat_lost alerts).
    assert jvm_kafka_available(spark), "make jars fetches the connector; spark_session puts it on the classpath"
    assert choose_source(spark, BusConfig(), str(tmp_path / "a")) == PYTHON_SOURCE  # the embedded broker
    configured = BusConfig(bootstrap_servers=bus.bootstrap)
    caplog.clear()  # the line above may be captured too, when an earlier test left the logger at INFO
    with caplog.at_level(logging.INFO, logger="streaming.source.telemetry"):
        assert choose_source(spark, configured, str(tmp_path / "b")) == PYTHON_SOURCE
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("telemetry source:")]
    assert line.startswith("telemetry source: Python kafka reader (bus.source auto: the bus at ")
    assert "Tansu-like" in line
    assert (tmp_path / "b" / f"source={PYTHON_SOURCE}").exists()
    # Asked for by name, the connector is refused on such a bus: it would raise false alerts.
    with pytest.raises(ConfigError, match="cannot read this bus") as refused:
        choose_source(spark, configured.model_copy(update={"source": "spark"}), str(tmp_path / "c"))
    assert "\n" not in str(refused.value) and not (tmp_path / "c").exists()
    asked = configured.model_copy(update={"source": "python"})
    assert choose_source(spark, asked, str(tmp_path / "d")) == PYTHON_SOURCE
    # A bus the check cannot reach: the choice is pinned for good, so it is not guessed.
    monkeypatch.setattr("streaming.source.telemetry.CHECK_TIMEOUT_S", 2.0)
    with pytest.raises(ConfigError, match=r"cannot tell how the bus at 127\.0\.0\.1:9 answers"):
        choose_source(spark, BusConfig(bootstrap_servers="127.0.0.1:9"), str(tmp_path / "e"))


@pytest.mark.broker
def test_read_returns_exactly_its_range(bus: EmbeddedBus) -> None:
    produce(bus.bootstrap, {(ONE_PARTITION, 0): 10}, "range")
    reader = KafkaStreamReader(KafkaReaderOptions(bus.bootstrap, (ONE_PARTITION,)))
    try:
        end = reader.latestOffset()[f"{ONE_PARTITION}:0"]
    finally:
        reader.stop()
    rows = [row for batch in reader.read(TopicPartitionRange(ONE_PARTITION, 0, end - 7, end - 2))
            for row in batch.to_pylist()]
    assert [row["offset"] for row in rows] == list(range(end - 7, end - 2))
    assert {row["topic"] for row in rows} == {ONE_PARTITION}
    assert all(row["timestamp"].tzinfo is not None for row in rows)


@pytest.mark.broker
def test_latest_offsets_ask_the_bus_for_metadata_once_a_call_and_after_the_end_offsets(
        bus: EmbeddedBus, monkeypatch: pytest.MonkeyPatch) -> None:
    """The topics' ids must be as new as the end offsets (a topic recreated under the reader may already
    hold more records than were read), and a second metadata round trip within ~100 ms of the first
    waits out kafka-python's spacing of refreshes: a live 1,000 x 12 batch's latestOffset took 107 ms
    with one before the end offsets and one after, 30 ms with one."""
    reader = KafkaStreamReader(KafkaReaderOptions(bus.bootstrap, (ONE_PARTITION,)))
    try:
        reader.latestOffset()
        consumer = reader._driver_consumer()
        asked: list[str] = []

        def spied(name: str):
            call = getattr(consumer, name)

            def spy(*args, **kwargs):
                asked.append(name)
                return call(*args, **kwargs)
            return spy

        for name in ("topics", "end_offsets"):
            monkeypatch.setattr(consumer, name, spied(name))
        # Every call as one 2 s (the discovery interval) after the last, as a live job's batches come.
        monkeypatch.setattr(kafka_reader, "_DISCOVERY_INTERVAL_S", 0.0)
        for round_ in range(3):
            produce(bus.bootstrap, {(ONE_PARTITION, 0): 3}, f"more-{round_}")
            asked.clear()
            reader.latestOffset()
            assert asked == ["end_offsets", "topics"]
        asked.clear()
        reader.latestOffset()  # nothing new, but time to look for new topics: still once, after
        assert asked == ["end_offsets", "topics"]
        # Nothing new within the interval: the partitions as known, no metadata asked.
        monkeypatch.setattr(kafka_reader, "_DISCOVERY_INTERVAL_S", 3600.0)
        asked.clear()
        reader.latestOffset()
        assert asked == ["end_offsets"]
    finally:
        reader.stop()


@pytest.mark.broker
@pytest.mark.parametrize(("limits", "task_sizes"), [
    ({"max_partitions": "2"}, [9, 10]),  # sizes 9, 6 and 4: the largest alone, the two others together
    ({"min_task_records": "10"}, [19]),  # 19 records, a task per 10 at most: one task reads them all
    ({"min_task_records": "5"}, [4, 6, 9]),  # three tasks allowed: one per topic-partition, as without
    ({"min_task_records": "5", "max_partitions": "2"}, [9, 10]),  # the lower of the two limits
])
def test_ranges_are_read_by_as_many_tasks_as_the_limits_allow_and_each_record_once(
        bus: EmbeddedBus, limits: dict[str, str], task_sizes: list[int]) -> None:
    produce(bus.bootstrap, {(TWO_PARTITIONS, 0): 9, (TWO_PARTITIONS, 1): 4, (ONE_PARTITION, 0): 6}, "grouped")
    options = KafkaReaderOptions.parse({"bootstrap_servers": bus.bootstrap,
                                        "topics": f"{TWO_PARTITIONS},{ONE_PARTITION}", **limits})
    reader = KafkaStreamReader(options)
    try:
        end = {key: offset for key, offset in reader.latestOffset().items() if key != "topic_ids"}
        start = {key: max(0, offset - {f"{TWO_PARTITIONS}:0": 9, f"{TWO_PARTITIONS}:1": 4}.get(key, 6))
                 for key, offset in end.items()}
        tasks = reader.partitions(start, end)
    finally:
        reader.stop()
    assert sorted(sum(r.end - r.start for r in ranges_of(task)) for task in tasks) == task_sizes
    read = sorted((row["topic"], row["partition"], row["offset"])
                  for task in tasks for batch in reader.read(task) for row in batch.to_pylist())
    wanted = sorted((key.rsplit(":", 1)[0], int(key.rsplit(":", 1)[1]), offset)
                    for key in end for offset in range(start[key], end[key]))
    assert read == wanted


@pytest.mark.broker
def test_read_fails_clearly_when_the_broker_goes_away_mid_read() -> None:
    with EmbeddedBus(topics=[ONE_PARTITION], stop_timeout_s=1) as short_lived:
        produce(short_lived.bootstrap, {(ONE_PARTITION, 0): 3}, "gone")
        reader = KafkaStreamReader(KafkaReaderOptions(short_lived.bootstrap, (ONE_PARTITION,), timeout_ms=1000))
        # Offsets 3..9 do not exist yet, so the reader must go back to the broker for them.
        rows = reader.read(TopicPartitionRange(ONE_PARTITION, 0, 0, 10))
        next(rows)
    started = time.monotonic()
    with pytest.raises(KafkaSourceError, match="is the broker down"):
        list(rows)
    assert time.monotonic() - started < 10


@pytest.mark.broker
def test_stop_leaves_no_tansu_process_even_with_connected_clients() -> None:
    bus = EmbeddedBus(topics=[ONE_PARTITION], stop_timeout_s=1).start()
    pid = bus.pid
    assert pid is not None
    consumer = KafkaConsumer(bootstrap_servers=bus.bootstrap)
    try:
        assert consumer.partitions_for_topic(ONE_PARTITION) == {0}
        bus.stop()
        bus.stop()  # idempotent
    finally:
        consumer.close()
    assert not os.path.exists(f"/proc/{pid}"), "the tansu process survived stop()"
    with pytest.raises(BusError, match="not running"):
        _ = bus.bootstrap


@pytest.mark.broker
def test_a_taken_port_is_a_clear_error(bus: EmbeddedBus) -> None:
    port = int(bus.bootstrap.rsplit(":", 1)[1])
    with pytest.raises(BusError, match="already in use"):
        EmbeddedBus(port=port).start()


@pytest.mark.broker
def test_the_reader_waits_out_a_bus_restart_and_reads_the_new_records_once(tmp_path: Path) -> None:
    import signal

    key = f"{ONE_PARTITION}:0"
    first = EmbeddedBus(topics=[ONE_PARTITION], log_path=tmp_path / "tansu-1.log").start()
    port = int(first.bootstrap.rsplit(":", 1)[1])
    reader = KafkaStreamReader(KafkaReaderOptions(first.bootstrap, (ONE_PARTITION,), timeout_ms=1000))
    second = None
    try:
        produce(first.bootstrap, {(ONE_PARTITION, 0): 10}, "before")
        start = reader.initialOffset()
        end = reader.latestOffset()
        assert end[key] == 10
        reader.partitions(start, end)
        reader.commit(end)

        os.killpg(first.pid, signal.SIGKILL)
        first.stop()
        # The bus is away: no new data, and no failure (the query keeps running).
        assert reader.latestOffset() == end

        second = EmbeddedBus(topics=[ONE_PARTITION], port=port, log_path=tmp_path / "tansu-2.log").start()
        new = produce(second.bootstrap, {(ONE_PARTITION, 0): 13}, "after")  # more than was read before
        latest = poll(lambda: (offsets := reader.latestOffset()) != end and offsets, 30,
                      "the reader to see the restarted bus", interval_s=0.2)
        ranges = reader.partitions(end, latest)
        rows = [row for r in ranges for batch in reader.read(r) for row in batch.to_pylist()]
        assert [(row["offset"], row["value"]) for row in rows] == [
            (offset, value) for (_, _, offset), (_, value, _) in sorted(new.items())]
    finally:
        reader.stop()
        for bus in (first, second):
            if bus is not None:
                bus.stop()


@pytest.mark.broker
def test_a_topic_that_restarted_is_read_from_the_beginning_in_every_partition(tmp_path: Path) -> None:
    # One partition comes back with fewer records than were read, the other already with more:
    # both are the new topic's, both are read from their beginning.
    import signal

    first = EmbeddedBus(topics=[TWO_PARTITIONS], partitions=2, log_path=tmp_path / "tansu-1.log").start()
    port = int(first.bootstrap.rsplit(":", 1)[1])
    reader = KafkaStreamReader(KafkaReaderOptions(first.bootstrap, (TWO_PARTITIONS,), timeout_ms=1000))
    second = None
    try:
        produce(first.bootstrap, {(TWO_PARTITIONS, 0): 10, (TWO_PARTITIONS, 1): 4}, "before")
        start, end = reader.initialOffset(), reader.latestOffset()
        reader.partitions(start, end)
        reader.commit(end)
        os.killpg(first.pid, signal.SIGKILL)
        first.stop()
        second = EmbeddedBus(topics=[TWO_PARTITIONS], partitions=2, port=port,
                             log_path=tmp_path / "tansu-2.log").start()
        new = produce(second.bootstrap, {(TWO_PARTITIONS, 0): 3, (TWO_PARTITIONS, 1): 9}, "after")
        latest = reader.latestOffset()
        rows = [row for r in reader.partitions(end, latest) for batch in reader.read(r) for row in batch.to_pylist()]
        assert sorted((row["partition"], row["offset"]) for row in rows) == sorted((p, o) for _, p, o in new)
    finally:
        reader.stop()
        for bus in (first, second):
            if bus is not None:
                bus.stop()
