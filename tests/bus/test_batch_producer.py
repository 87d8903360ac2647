"""`BatchProducer` (streaming/bus/batch_producer.py) on real buses: Tansu, the embedded default, and a
real Kafka 4.4 node (the production bus)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kafka.errors import KafkaError, MessageSizeTooLargeError
from support.bus_records import consume_all

from streaming.bus import BatchProducer, EmbeddedBus
from streaming.records import topics

TOPICS = sorted(topics.TELEMETRY)[:2]


@pytest.fixture(scope="module")
def tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with EmbeddedBus(topics=topics.TELEMETRY, partitions=4,
                     log_path=tmp_path_factory.mktemp("tansu") / "tansu.log") as embedded:
        yield embedded.bootstrap


@pytest.fixture(params=["tansu", "kafka"])
def bootstrap(request: pytest.FixtureRequest) -> str:
    return request.getfixturevalue("tansu" if request.param == "tansu" else "kafka_bus")


@pytest.mark.broker
def test_every_record_reaches_its_partition_once_in_the_order_added_with_its_key_and_time(bootstrap) -> None:
    # 3,000 records of ~400 bytes: a flush asked for, and more than one started by the size waiting.
    added: dict[tuple[str, int], list[tuple[bytes, bytes]]] = {}
    before = int(time.time() * 1000)
    with BatchProducer(bootstrap, client_id="test-batches") as producer:
        partitions = {topic: producer.partitions_for(topic) for topic in TOPICS}
        for i in range(3_000):
            topic = TOPICS[i % 2]
            partition = partitions[topic][i // 2 % len(partitions[topic])]
            key, value = f"cluster-{i % 7}".encode(), f'{{"n":{i},"pad":"{"x" * 380}"}}'.encode()
            producer.add(topic, partition, key, value)
            added.setdefault((topic, partition), []).append((key, value))
            if i == 1_000:
                producer.flush()
    after = int(time.time() * 1000)
    received = consume_all(bootstrap, TOPICS, 3_000)
    assert len(received) == 3_000
    got: dict[tuple[str, int], list[tuple[bytes, bytes]]] = {}
    for record in sorted(received, key=lambda r: (r.topic, r.partition, r.offset)):
        got.setdefault((record.topic, record.partition), []).append((record.key, record.value))
        assert before <= record.timestamp <= after  # the time it was added (CreateTime)
    assert got == added
    assert len(got) > 2


@pytest.mark.broker
def test_a_record_the_bus_refuses_fails_the_flush_at_once_naming_its_partition(kafka_bus) -> None:
    # Kafka takes record batches up to message.max.bytes (1 MiB by default); an error it does not call
    # retriable is not tried again until the timeout.
    started = time.monotonic()
    with BatchProducer(kafka_bus, client_id="test-batches", timeout_s=60) as producer:
        topic = TOPICS[0]
        partition = producer.partitions_for(topic)[0]
        with pytest.raises(MessageSizeTooLargeError, match=f"{topic}-{partition}"):
            producer.add(topic, partition, b"k", b"x" * (2 * 1024 * 1024))
        assert time.monotonic() - started < 60


@pytest.mark.broker
def test_a_bus_that_stopped_answering_fails_the_flush_when_its_timeout_is_over(tmp_path) -> None:
    with EmbeddedBus(topics=topics.TELEMETRY, partitions=1, log_path=tmp_path / "tansu.log") as embedded:
        producer = BatchProducer(embedded.bootstrap, client_id="test-batches", timeout_s=3)
        producer.add(TOPICS[0], producer.partitions_for(TOPICS[0])[0], b"k", b"v")
        producer.flush()
    producer.add(TOPICS[0], 0, b"k", b"v")
    started = time.monotonic()
    with pytest.raises(KafkaError) as raised:
        producer.close()
    assert raised.value.retriable  # retried (a connection refused) until the timeout, then raised
    assert time.monotonic() - started >= 3
