"""Many small records to a Kafka bus, a record batch per partition per flush: `BatchProducer`.

For a sender that makes many small records and can wait for a flush now and then (the fleet
simulator). kafka-python's `KafkaProducer` spends ~65 us of CPU per record beyond building it: a
future per record, its accumulator's locks, its sender thread's callbacks per record (a 1,000 x 12
simulated fleet in real time, ~10,000 records a second: 98 us an event in all, the simulation 31
of them; two thirds of a core, on the machine the job runs on in the demo and the benches). Here
the caller adds records and flushes: each flush builds one record batch per partition with
kafka-python's own builder (~3 us a record; 33 us an event in all) and sends one produce request
per partition leader through kafka-python's client (its connections, security and metadata), then
waits for every answer. Nothing is in flight between flushes, so a partition's records keep their
order, a retried request's too; a retry after an answer that did not come may write a batch twice
(at least once, as `KafkaProducer` without idempotence).
"""

from __future__ import annotations

import time
from collections import defaultdict
from types import TracebackType
from typing import Self

import kafka.errors as errors
from kafka.net.compat import KafkaNetClient
from kafka.protocol.producer.produce import ProduceRequest
from kafka.record.memory_records import MemoryRecordsBuilder
from kafka.structs import TopicPartition

from streaming.bus.access import BusAccess

__all__ = ["BatchProducer"]

_MAGIC = 2  # record batches of Kafka 0.11 and later, the only ones Kafka 4 takes
_NO_COMPRESSION = 0
# A flush starts when this much is added: under Kafka's default message.max.bytes (1 MiB) for the
# largest partition's batch, and a request of a few hundred ms of a large fleet.
_FLUSH_BYTES = 512 * 1024
_RETRY_BACKOFF_S = 0.1


class BatchProducer:
    """Records added with `add` go to the bus at the next `flush` (or when `_FLUSH_BYTES` are
    waiting). Every failure is a kafka-python `KafkaError`: one that Kafka calls retriable (a
    leader that moved, a connection lost) is retried until `timeout_s` has passed since the flush
    began, with the partitions' leaders read again; any other at once."""

    def __init__(self, bus: str | BusAccess, *, client_id: str, acks: int = 1, timeout_s: float = 30.0) -> None:
        access = BusAccess.of(bus)
        self._acks = acks
        self._timeout_s = timeout_s
        self._client = KafkaNetClient(bootstrap_servers=access.bootstrap, client_id=client_id,
                                      request_timeout_ms=int(timeout_s * 1000), **access.client_settings)
        try:
            self._client.check_version(timeout_ms=int(timeout_s * 1000))
        except BaseException:
            self._client.close()
            raise
        self._batches: dict[TopicPartition, MemoryRecordsBuilder] = {}
        self._waiting_bytes = 0

    def partitions_for(self, topic: str) -> list[int]:
        """The topic's partitions, sorted (read from the bus's metadata the first time)."""
        cluster = self._client.cluster
        deadline = time.monotonic() + self._timeout_s
        while (partitions := cluster.partitions_for_topic(topic)) is None:
            if time.monotonic() + _RETRY_BACKOFF_S >= deadline:
                raise errors.KafkaTimeoutError(f"no metadata for topic {topic} after {self._timeout_s:g} s")
            update = cluster.add_topic(topic)
            if update.is_done:  # known already, without partitions yet (a topic being created): ask again
                time.sleep(_RETRY_BACKOFF_S)
                update = cluster.request_update()
            self._client.poll(timeout_ms=_remaining_ms(deadline), future=update)
        return sorted(partitions)

    def add(self, topic: str, partition: int, key: bytes | None, value: bytes) -> None:
        """One record for the next flush, its timestamp now (CreateTime, as `KafkaProducer` sets it)."""
        tp = TopicPartition(topic, partition)
        batch = self._batches.get(tp)
        if batch is None:
            batch = self._batches[tp] = MemoryRecordsBuilder(_MAGIC, _NO_COMPRESSION, 2 * _FLUSH_BYTES)
        if batch.append(int(time.time() * 1000), key, value, []) is None:  # full: a record of over a MiB
            self.flush()
            self.add(topic, partition, key, value)
            return
        self._waiting_bytes += len(value) + (0 if key is None else len(key))
        if self._waiting_bytes >= _FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        """Send every record added since the last flush and wait until the bus has them all."""
        if not self._batches:
            return
        pending: dict[TopicPartition, bytes] = {}
        for tp, batch in self._batches.items():
            batch.close()
            pending[tp] = bytes(batch.buffer())
        self._batches, self._waiting_bytes = {}, 0
        deadline = time.monotonic() + self._timeout_s
        while True:
            failed = self._send(pending, deadline)
            pending = {tp: pending[tp] for tp in failed}
            if not pending:
                return
            error = next((e for e in failed.values() if not e.retriable), next(iter(failed.values())))
            if not error.retriable or time.monotonic() + _RETRY_BACKOFF_S >= deadline:
                raise error
            time.sleep(_RETRY_BACKOFF_S)  # Kafka's retry backoff, before the leaders are read again
            self._client.poll(timeout_ms=_remaining_ms(deadline), future=self._client.cluster.request_update())

    def _send(self, pending: dict[TopicPartition, bytes], deadline: float) -> dict[TopicPartition, errors.KafkaError]:
        """One produce request per leader of `pending`'s partitions; the partitions that failed, and why."""
        failed: dict[TopicPartition, errors.KafkaError] = {}
        by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in pending:
            leader = self._client.cluster.leader_for_partition(tp)
            if leader is None or leader < 0:
                failed[tp] = errors.LeaderNotAvailableError(f"no leader known for {tp.topic}-{tp.partition}")
            else:
                by_leader[leader].append(tp)
        sent = []
        for leader, tps in by_leader.items():
            try:
                self._client.await_ready(leader, timeout_ms=_remaining_ms(deadline))
            except errors.KafkaError as exc:
                failed |= dict.fromkeys(tps, exc)
                continue
            sent.append((tps, self._client.send(leader, self._request(tps, pending))))
        for tps, future in sent:
            self._client.poll(timeout_ms=_remaining_ms(deadline), future=future)
            if not future.is_done:
                failed |= dict.fromkeys(tps, errors.KafkaTimeoutError(f"no produce answer in {self._timeout_s:g} s"))
            elif future.failed():
                exc = future.exception
                failed |= dict.fromkeys(tps, exc if isinstance(exc, errors.KafkaError)
                                        else errors.KafkaConnectionError(f"{type(exc).__name__}: {exc}"))
            else:
                for topic in future.value.responses:
                    for answer in topic.partition_responses:
                        if answer.error_code:
                            error = errors.for_code(answer.error_code)
                            failed[TopicPartition(topic.name, answer.index)] = error(
                                f"{topic.name}-{answer.index}: {answer.error_message or error.message}")
        return failed

    def _request(self, tps: list[TopicPartition], pending: dict[TopicPartition, bytes]) -> ProduceRequest:
        topic_data = ProduceRequest.TopicProduceData
        by_topic: dict[str, list[TopicPartition]] = defaultdict(list)
        for tp in tps:
            by_topic[tp.topic].append(tp)
        return ProduceRequest(
            transactional_id=None, acks=self._acks, timeout_ms=int(self._timeout_s * 1000),
            topic_data=[topic_data(name=topic, partition_data=[
                topic_data.PartitionProduceData(index=tp.partition, records=pending[tp]) for tp in partitions])
                for topic, partitions in by_topic.items()],
            # Record batches (magic 2) need Produce v3 or later; v9 is the newest kafka-python speaks.
            min_version=3, max_version=9)

    def close(self) -> None:
        """Flush what is waiting, then close the connections (they close even when the flush fails)."""
        try:
            self.flush()
        finally:
            self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.close()
        else:  # what was added after the failure is not sent
            self._client.close()


def _remaining_ms(deadline: float) -> int:
    return max(0, int((deadline - time.monotonic()) * 1000))
