"""The Python readers that parse as they read (streaming/pipeline/parsing_reader.py), driven as Spark
drives a data source's reader (plan on the driver, read in an executor): the Kafka one on a real
Tansu bus, the replay's on a file. The live job and the replay over them, with Spark, are
tests/job/test_live.py and test_replay.py."""

from __future__ import annotations

import json
import marshal
from collections.abc import Callable, Iterator

import pytest
from kafka import KafkaProducer

from streaming.bus import EmbeddedBus
from streaming.pipeline.packing import unpack
from streaming.pipeline.parse import QUARANTINE_BUCKET, SOURCE_CLOCK_BUCKET, ParseSettings
from streaming.pipeline.parsing_reader import ParsingJsonlReader, ParsingStreamReader
from streaming.plumbing import clock
from streaming.records import topics
from streaming.source import KafkaReaderOptions
from streaming.source.bus_loss import PLANNED_MS
from streaming.source.kafka_consumers import drop_executor_consumer

TOPIC = topics.HEARTBEATS
SETTINGS = ParseSettings(buckets=4, heartbeat_gap_ms=0, max_clock_skew_ms=300_000, max_source_lead_ms=1_000)


@pytest.fixture(scope="module")
def bus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBus]:
    with EmbeddedBus(topics=[TOPIC], log_path=tmp_path_factory.mktemp("bus") / "tansu.log") as running:
        yield running


@pytest.fixture
def kafka_readers(bus: EmbeddedBus) -> Iterator[Callable[[], ParsingStreamReader]]:
    """New parsing readers of the bus, each a restart of the job's: their clients are closed after
    the test (a client left behind keeps retrying, and logging, once the bus is gone)."""
    options = KafkaReaderOptions(bus.bootstrap, (TOPIC,))
    made: list[ParsingStreamReader] = []

    def new() -> ParsingStreamReader:
        made.append(ParsingStreamReader(options, SETTINGS, chunk_rows=3))
        return made[-1]

    yield new
    for reader in made:
        reader.stop()
    drop_executor_consumer(options)


def heartbeat(ts: int, broker_id: int) -> bytes:
    return json.dumps({"schema": "fleetwatch.event/v1", "type": "broker_heartbeat", "ts": ts, "source": "agent",
                       "cluster_id": "PayPayPayPayPayPayPayA", "broker_id": broker_id, "kind": "heartbeat",
                       "broker_epoch": 5}).encode()


def send(bootstrap: str, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for future in [producer.send(TOPIC, value=value) for value in values]:
        future.get(timeout=30)
    producer.close()


def read_batch(reader: ParsingStreamReader | ParsingJsonlReader, start: dict, end: dict) -> tuple[list, list, int]:
    """(accepted (broker id, ts), refused reasons, messages counted) of one planned batch, read as
    Spark's executors read its partitions."""
    accepted, refused, messages = [], [], 0
    for partition in reader.partitions(start, end):
        for batch in reader.read(partition):
            for row in batch.to_pylist():
                messages += row["messages"]
                if row["bucket"] == QUARANTINE_BUCKET:
                    refused += [reason for *_, reason, _, _ in marshal.loads(row["events"])]
                elif row["bucket"] != SOURCE_CLOCK_BUCKET and row["events"] is not None:
                    accepted += [(event.broker_id, event.ts) for *_, event in unpack(row["events"])]
    return sorted(accepted), sorted(refused), messages


@pytest.mark.broker
def test_the_reader_parses_what_it_read_with_the_clock_of_the_batchs_planning(bus: EmbeddedBus, kafka_readers):
    now = clock.now_ms()
    # 30 s behind the clock: accepted now, but 30 s ahead of a batch planned a minute ago.
    values = [heartbeat(now - 30_000 + i, broker_id=i) for i in range(7)] + [b"not json"]
    send(bus.bootstrap, values)
    reader = kafka_readers()
    start = reader.initialOffset()
    end = reader.latestOffset()
    assert now <= end[PLANNED_MS] <= clock.now_ms()
    # Nothing new: the same offsets, stamp and all, so that Spark plans no batch.
    assert reader.latestOffset() == end

    accepted, refused, messages = read_batch(reader, start, end)
    assert messages == 8  # counted over its chunks of at most 3 messages
    assert accepted == [(i, now - 30_000 + i) for i in range(7)]
    assert refused == ["not_json"]

    # A restarted job runs the batch again from the offset log: with the stamp written there, not
    # with its own clock. Stamped a minute earlier, the same heartbeats lead that clock by 30 s.
    again = kafka_readers()
    accepted, refused, messages = read_batch(again, start, {**end, PLANNED_MS: now - 60_000})
    assert (accepted, refused, messages) == ([], ["not_json"] + ["ts_ahead_of_clock"] * 7, 8)

    send(bus.bootstrap, [heartbeat(clock.now_ms(), broker_id=9)])
    moved = reader.latestOffset()
    assert moved[PLANNED_MS] >= end[PLANNED_MS] and moved != end
    assert read_batch(reader, end, moved)[2] == 1


def test_the_replays_reader_parses_every_line_once_planned(tmp_path):
    now = clock.now_ms()
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join([heartbeat(now - 5_000 + i, broker_id=i) for i in range(5)] + [b"{"]) + b"\n")
    reader = ParsingJsonlReader(str(path), 4, SETTINGS, chunk_rows=2)
    start, end = reader.initialOffset(), reader.latestOffset()
    assert reader.latestOffset() == end  # the file does not grow: no second batch
    accepted, refused, messages = read_batch(reader, start, end)
    assert (accepted, refused, messages) == ([(i, now - 5_000 + i) for i in range(5)], ["not_json"], 6)
