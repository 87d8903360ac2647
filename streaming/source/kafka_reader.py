"""A PySpark streaming data source over kafka-python, for when Spark's Kafka connector is absent.

Short name `fleetwatch_kafka`. One input partition per topic-partition, or per group of them
(`max_partitions`, `kafka_ranges`); offsets are JSON objects of the next offset per
topic-partition and the topics' ids (`kafka_offsets`). Rows have the columns of Spark's `kafka`
source with key and value already cast to strings: see `raw_rows.SCHEMA`.

Options (`kafka_options`):
- `bootstrap_servers` (required), `topics` (required, comma separated);
- `starting_offsets`: `earliest` (default) or `latest`; partitions that appear later are
  always read from their beginning, like Spark's own Kafka source does;
- `max_records_per_batch`: cap on the rows of one micro-batch (default 200000, `0` = no cap);
- `timeout_ms`: how long a broker may stay silent before a read or offset query fails
  (default 60000);
- `max_partitions`: at most this many input partitions (Spark tasks) per micro-batch, the
  topic-partitions' ranges grouped by size (default `0`: one per topic-partition). Every task
  has a fixed cost; the job asks for two per core it has;
- `min_task_records`: at most one input partition per this many records of the micro-batch
  (default `0`: no such limit), so that a small batch is read by one task;
- `client.<setting>`: a kafka-python client setting of the bus's security (`client.security_protocol`,
  `client.sasl_mechanism`, `client.sasl_plain_username`, `client.sasl_plain_password`,
  `client.ssl_cafile`, ...), as `streaming.bus.BusAccess` resolves them.

Two things shape the design (measured, see NOTES.md):
- Tansu answers ListOffsets(LATEST) with an offset inside the last record batch (0.6.0: its base
  offset + 1), not the high watermark. The end of each partition is therefore taken from a Fetch response's high
  watermark as well; otherwise the last producer batch would wait for more data to arrive.
- The reader implements PySpark 4.1's interface, which 4.2 still calls: `latestOffset()` gets no
  start offset (no admission control). The reader learns where the stream stands from
  `partitions(start, end)` (Spark calls it first on a restart, also with an empty range) and caps
  relative to that, so a restart never plans a batch that ends before its start. Consequence:
  under `trigger(availableNow=True)` Spark asks for the latest offset once, so such a run stops
  after one capped batch.

Outages (deploy/README.md, "The streaming job"): while the bus does not answer,
`latestOffset()` reports the offsets already planned (no new data, the query keeps running) and
warns at most twice a minute; reading resumes when the bus is back. A partition that restarted
(its topic got a new topic id, or its end is below the offset already read: a recreated topic, an
in-memory bus that was restarted) is read again from its beginning, with a warning: what the bus
lost is lost, what it holds now is read once. A range whose records the bus dropped after it was
planned (its topic deleted, recreated or truncated; DeleteRecords or retention) is read as far as
the bus still holds it, without failing the query: the job counts what was skipped from the batch's
progress (`fleetwatch_bus_records_lost_total`, streaming/source/bus_loss.py), as it does for Spark's
connector with `failOnDataLoss=false`. A deleted topic is not created again by the reader (its
clients never ask for auto-creation); its partitions are read again once it exists again. While it
is gone, the offsets name it (`gone_topics`): the job's progress listener says when it went and
when it came back (streaming/source/bus_loss.py).

Values that are not valid UTF-8 are decoded with U+FFFD replacement characters (an Arrow
string column cannot carry the raw bytes); they are never valid event JSON, so the parser
quarantines them anyway.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.fetcher import ConsumerRecord
from kafka.errors import KafkaError
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from streaming.plumbing.errors import first_line
from streaming.plumbing.resilience import Throttle
from streaming.source.kafka_consumers import drop_executor_consumer, executor_consumer, new_consumer
from streaming.source.kafka_offsets import (
    GONE_TOPICS,
    TOPIC_IDS,
    Offsets,
    allocate,
    offsets_by_partition,
    partition_key,
    restarted_topics,
    topic_partition,
)
from streaming.source.kafka_options import SHORT_NAME, KafkaReaderOptions, KafkaSourceError
from streaming.source.kafka_ranges import TopicPartitionRange, plan_tasks, ranges_of
from streaming.source.raw_rows import ARROW_SCHEMA, SCHEMA

__all__ = ["FleetwatchKafkaDataSource", "KafkaStreamReader", "record_text"]

log = logging.getLogger(__name__)

_POLL_MS = 200
_POLL_RECORDS = 5_000
# A Fetch at the last batch returns within fetch_max_wait_ms; this only bounds a sick broker.
_HIGHWATER_WAIT_S = 2.0
# Polls that come back empty for this long make the reader look whether the range is still on the
# bus (its topic deleted, or recreated or truncated below the offset): then it ends the range at
# once instead of failing the query after `timeout_ms`, which the query's restart would meet again.
_GONE_CHECK_S = 1.0
# kafka-python rate-limits metadata refreshes (~100 ms each), and Spark asks for the latest
# offsets every few milliseconds when idle: look for new topics and partitions less often.
_DISCOVERY_INTERVAL_S = 2.0


def record_text(raw: bytes | None) -> str | None:
    """A record's key or value as the reader's rows carry it: invalid UTF-8 replaced (the parser
    quarantines it as not_utf8)."""
    return None if raw is None else raw.decode("utf-8", errors="replace")


def _arrow_batch(records: list[ConsumerRecord]) -> pa.RecordBatch:
    # Column-wise into Arrow (raw_rows.ARROW_SCHEMA). A timestamp of -1 means "none" in Kafka.
    timestamps = pa.array([r.timestamp if r.timestamp is not None and r.timestamp >= 0 else None for r in records],
                          pa.int64())
    return pa.RecordBatch.from_arrays([
        pa.array([record_text(r.key) for r in records], pa.string()),
        pa.array([record_text(r.value) for r in records], pa.string()),
        pa.array([r.topic for r in records], pa.string()),
        pa.array([r.partition for r in records], pa.int32()),
        pa.array([r.offset for r in records], pa.int64()),
        pc.multiply(timestamps, 1000).cast(pa.timestamp("us", tz="UTC")),
    ], schema=ARROW_SCHEMA)


class _PartitionGone(KafkaError):
    """A partition whose offsets were asked for is no longer in the client's view of the bus."""


def _listed(ask: Callable[..., dict[TopicPartition, int]], tps: list[TopicPartition],
            **options: Any) -> dict[TopicPartition, int]:
    """`ask` (the consumer's beginning_offsets or end_offsets) for `tps`. kafka-python (3.0.12) leaves a
    partition whose leader its cluster view no longer has (its topic deleted since the reader looked at
    the topics, and dropped from that view by a metadata refresh) out of its ListOffsets requests, and
    then fails on the missing answer with a KeyError: a query failed on it (a topic deleted under the
    live job)."""
    try:
        return ask(tps, **options)
    except KeyError as exc:
        raise _PartitionGone(f"no leader known for {exc.args[0] if exc.args else 'a partition'}") from exc


class KafkaStreamReader(DataSourceStreamReader):
    """Plans micro-batches on the driver and reads topic-partition ranges in executors."""

    def __init__(self, options: KafkaReaderOptions) -> None:
        self.options = options
        self._consumer: KafkaConsumer | None = None
        # Offsets Spark will start the next batch from, as far as we have been told.
        self._frontier: Offsets | None = None
        self._initial: Offsets | None = None
        self._partitions: list[TopicPartition] | None = None
        self._discovered_at = 0.0
        self._topic_ids: dict[str, str] = {}  # as the bus reported them last
        self._last_ends: dict[str, int] | None = None
        self._unavailable = Throttle()

    def __getstate__(self) -> dict[str, Any]:
        # The reader is pickled to executors; a live client (threads, sockets) is not.
        state = self.__dict__.copy()
        state["_consumer"] = None
        state["_unavailable"] = None
        return state

    # -- driver side -------------------------------------------------------------------

    def initialOffset(self) -> Offsets:
        try:
            with self._broker_errors("list offsets"):
                return dict(self._initial_offsets())
        except KafkaSourceError as exc:
            if self.options.starting_offsets != "earliest":
                raise
            # Every partition from its beginning: what "earliest" means, without asking the bus.
            self._warn_unavailable(exc)
            return {}

    def latestOffset(self) -> Offsets:
        try:
            with self._broker_errors("list offsets"):
                discover = time.monotonic() - self._discovered_at >= _DISCOVERY_INTERVAL_S
                try:
                    ends = self._end_offsets(self._partitions_known())
                except _PartitionGone:  # a topic deleted since the last look: look again, once
                    ends = self._end_offsets(self._discover())
                if ends != self._last_ends or discover:
                    # New data: the topic ids must be as new as these offsets (a bus that restarted
                    # empty may already hold more records than were read), so the one metadata round
                    # trip of the call comes after them (new topics and partitions too, read from
                    # the next batch on). A second one within ~100 ms waits out kafka-python's spacing
                    # of refreshes: a live batch's latestOffset took 107 ms with one before the offsets.
                    self._discover()
                    self._last_ends = ends
                base = self._frontier if self._frontier is not None else self._initial_offsets()
        except KafkaSourceError as exc:
            known = self._frontier if self._frontier is not None else self._initial
            self._warn_unavailable(exc)
            return dict(known or {})  # nothing new (a first start while the bus is away: nothing)
        ids = dict(sorted({**base.get(TOPIC_IDS, {}), **self._topic_ids}.items()))  # one order: one JSON text
        restarted = restarted_topics(base, {**ends, TOPIC_IDS: ids})
        positions = {key: 0 if topic_partition(key).topic in restarted else offset
                     for key, offset in offsets_by_partition(base).items()}
        lags = {key: max(0, end - positions.get(key, 0)) for key, end in ends.items()}
        cap = self.options.max_records_per_batch
        take = lags if cap is None else allocate(cap, lags)
        latest: Offsets = dict(positions)  # partitions that vanished keep their offset
        for key, rows in take.items():
            latest[key] = positions.get(key, 0) + rows
        if ids:
            latest[TOPIC_IDS] = ids
        # Topics read before that the bus no longer holds: named in the offsets, so the batch that
        # meets the deletion differs from the last one and the progress listener can say so.
        present = {tp.topic for tp in self._partitions or []}
        known = {topic_partition(key).topic for key in positions} | set(ids)
        gone = sorted(topic for topic in known if topic in self.options.topics and topic not in present)
        if gone:
            latest[GONE_TOPICS] = gone
        return latest

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        restarted = restarted_topics(start, end)
        for topic in sorted(restarted):
            log.warning("topic restarted: reading its partitions from their beginning (the bus lost what it "
                        "held)", extra={"topic": topic, "from": offsets_by_partition(start),
                                        "to": offsets_by_partition(end),
                                        "topic_id": end.get(TOPIC_IDS, {}).get(topic)})
        self._advance_frontier(end, restarted)
        ranges: list[TopicPartitionRange] = []
        for key, stop in sorted(offsets_by_partition(end).items()):
            tp = topic_partition(key)
            # A partition new in this batch starts at its beginning, and so does one that restarted.
            begin = 0 if tp.topic in restarted else start.get(key, 0)
            if stop > begin:
                ranges.append(TopicPartitionRange(tp.topic, tp.partition, begin, stop))
        return plan_tasks(ranges, self.options.max_partitions, self.options.min_task_records)

    def commit(self, end: Offsets) -> None:
        # Nothing to acknowledge in Kafka (no consumer group); it only confirms the frontier.
        self._advance_frontier(end, set())

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    @contextlib.contextmanager
    def _broker_errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except KafkaError as exc:
            raise KafkaSourceError(
                f"{SHORT_NAME}: cannot {action} on {self.options.bootstrap_servers}: {exc}"
            ) from exc

    def _warn_unavailable(self, exc: BaseException) -> None:
        # The bus may come back as another one (restarted empty, topics recreated): look at its
        # topics and their ids again at the first answer.
        self._discovered_at = float("-inf")
        if self._unavailable is None:
            self._unavailable = Throttle()
        self._unavailable.warning(log, "bus unavailable: no new data until it answers",
                                  bootstrap=self.options.bootstrap_servers, error=first_line(exc, named=True))

    def _advance_frontier(self, offsets: Offsets, restarted: set[str]) -> None:
        merged = dict(self._frontier or {})
        for key, offset in offsets_by_partition(offsets).items():
            # Never backwards, but in a topic that restarted: it starts over.
            restart = topic_partition(key).topic in restarted
            merged[key] = offset if restart else max(offset, merged.get(key, offset))
        if TOPIC_IDS in offsets:
            merged[TOPIC_IDS] = dict(sorted({**merged.get(TOPIC_IDS, {}), **offsets[TOPIC_IDS]}.items()))
        # As the last batch saw them: offsets reported while the bus is away must not bring a gone
        # topic back (nor hide it), or the job would say it came back and went again.
        merged.pop(GONE_TOPICS, None)
        if GONE_TOPICS in offsets:
            merged[GONE_TOPICS] = list(offsets[GONE_TOPICS])
        self._frontier = merged

    def _initial_offsets(self) -> Offsets:
        # Spark (4.1, 4.2) calls latestOffset() before initialOffset() on a fresh start; both must
        # agree, so the initial offsets are computed once and remembered.
        if self._initial is None:
            tps = self._partitions_known()
            initial: Offsets
            if self.options.starting_offsets == "latest":
                initial = dict(self._end_offsets(tps))
            else:
                begin = _listed(self._driver_consumer().beginning_offsets, tps) if tps else {}
                initial = {partition_key(tp.topic, tp.partition): offset for tp, offset in begin.items()}
            if self._topic_ids:
                initial[TOPIC_IDS] = dict(sorted(self._topic_ids.items()))
            self._initial = initial
            log.info(
                "initial offsets",
                extra={"starting_offsets": self.options.starting_offsets, "offsets": self._initial},
            )
        return self._initial

    def _partitions_known(self) -> list[TopicPartition]:
        """Partitions of the configured topics that exist (missing topics have none), as last
        discovered; discovered now at the first call, and after the bus was unavailable."""
        if self._partitions is None or self._discovered_at == float("-inf"):
            return self._discover()
        return self._partitions

    def _discover(self) -> list[TopicPartition]:
        """`_partitions_known` after a metadata round trip: new topics and partitions, and the topics' ids."""
        consumer = self._driver_consumer()
        existing = consumer.topics()
        self._partitions = [
            TopicPartition(topic, partition)
            for topic in self.options.topics
            if topic in existing
            for partition in sorted(consumer.partitions_for_topic(topic))
        ]
        self._discovered_at = time.monotonic()
        self._note_topic_ids(consumer, [t for t in self.options.topics if t in existing])
        return self._partitions

    def _note_topic_ids(self, consumer: KafkaConsumer, present: list[str]) -> None:
        """The ids of the topics (Metadata v10+): kafka-python keeps those of its last metadata
        answer in its cluster view only. A bus without ids leaves the end-offset check alone."""
        cluster = getattr(getattr(consumer, "_client", None), "cluster", None)
        topic_id = getattr(cluster, "topic_id", None)
        if topic_id is None:
            return
        for topic in present:
            new = topic_id(topic)
            if new is not None:
                self._topic_ids[topic] = str(new)

    def _end_offsets(self, tps: Sequence[TopicPartition]) -> dict[str, int]:
        """The high watermark of each partition, correct on Tansu too."""
        if not tps:
            return {}
        consumer = self._driver_consumer()
        listed = _listed(consumer.end_offsets, list(tps), timeout_ms=self.options.timeout_ms)
        # Re-assigning drops kafka-python's per-partition state, so every highwater() below
        # comes from a Fetch sent now and not from an earlier call.
        consumer.unsubscribe()
        consumer.assign(list(tps))
        for tp in tps:
            consumer.seek(tp, listed[tp])
        deadline = time.monotonic() + _HIGHWATER_WAIT_S
        while any(consumer.highwater(tp) is None for tp in tps) and time.monotonic() < deadline:
            consumer.poll(timeout_ms=5)
        ends: dict[str, int] = {}
        for tp in tps:
            highwater = consumer.highwater(tp)
            if highwater is None:
                log.warning("no high watermark, using ListOffsets", extra={"partition": str(tp)})
            ends[partition_key(tp.topic, tp.partition)] = max(listed[tp], highwater or 0)
        return ends

    def _driver_consumer(self) -> KafkaConsumer:
        if self._consumer is None:
            # Its fetches only learn high watermarks, and a partition with nothing past the seek holds
            # its fetch this long: 1 ms, not 10, made a latestOffset with new data 15 -> 9 ms (median,
            # the embedded bus). At 0 Tansu gives no high watermark at all.
            self._consumer = new_consumer(
                self.options, client_id="fleetwatch-source-driver", fetch_max_wait_ms=1
            )
        return self._consumer

    # -- executor side -----------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Yield exactly the records of a range (or of each range of a group), a poll at a time."""
        return map(_arrow_batch, self.read_records(partition))

    def read_records(self, partition: InputPartition) -> Iterator[list[ConsumerRecord]]:
        """Exactly the records of a range (or of each range of a group), as kafka-python returns
        them, a poll at a time."""
        for part in ranges_of(partition):
            yield from self._read_range(part)

    def _read_range(self, partition: TopicPartitionRange) -> Iterator[list[ConsumerRecord]]:
        """Yield exactly the records in [start, end) of one topic-partition."""
        tp = TopicPartition(partition.topic, partition.partition)
        consumer = executor_consumer(self.options)
        timeout_s = self.options.timeout_ms / 1000
        try:
            consumer.assign([tp])
            consumer.seek(tp, partition.start)
            deadline = time.monotonic() + timeout_s
            check_at = time.monotonic() + _GONE_CHECK_S
            expected = partition.start
            while (position := consumer.position(tp)) < partition.end:
                # Never ask for records past the range: kafka-python decodes every record it
                # returns, and a poll of _POLL_RECORDS past `end` cost ~25 ms of CPU per task.
                wanted_at_most = min(_POLL_RECORDS, partition.end - position)
                records = consumer.poll(timeout_ms=_POLL_MS, max_records=wanted_at_most).get(tp, [])
                if not records:
                    if time.monotonic() >= check_at:
                        gone = self._gone_from_bus(consumer, tp, position)
                        if gone is not None:
                            # Counted (with the rest of what the bus lost) from the batch's progress.
                            log.warning("range gone from the bus: left short", extra={
                                "range": repr(partition), "offset": position, "reason": gone})
                            return
                        check_at = time.monotonic() + _GONE_CHECK_S
                    if time.monotonic() > deadline:
                        raise KafkaSourceError(
                            f"{SHORT_NAME}: no records from {self.options.bootstrap_servers} for "
                            f"{timeout_s:g} s while reading {partition!r} at offset "
                            f"{consumer.position(tp)}; is the broker down?"
                        )
                    continue
                deadline = time.monotonic() + timeout_s
                if records[0].offset < expected:
                    # The partition restarted under us (the consumer fell back to its new beginning):
                    # these are other records than the range's. The driver reads it anew.
                    log.warning("partition restarted while read: range left short",
                                extra={"range": repr(partition), "offset": records[0].offset})
                    return
                expected = records[-1].offset + 1
                wanted = [r for r in records if r.offset < partition.end]
                if wanted:
                    yield wanted
                if len(wanted) < len(records):
                    return
        except BaseException as exc:
            # A consumer left mid-read (an error, or Spark stopping half-way) is not reused.
            drop_executor_consumer(self.options)
            if isinstance(exc, KafkaError):
                raise KafkaSourceError(f"{SHORT_NAME}: reading {partition!r} failed: {exc}") from exc
            raise


    def _gone_from_bus(self, consumer: KafkaConsumer, tp: TopicPartition, position: int) -> str | None:
        """Why the bus holds nothing of `tp` from `position` on, or None when it may (or does not
        answer: then the read's deadline decides)."""
        try:
            if tp.topic not in consumer.topics():  # a metadata round trip: the bus's view now
                return "its topic was deleted"
            listed = consumer.end_offsets([tp], timeout_ms=min(self.options.timeout_ms, 5_000))[tp]
        except KafkaError:
            return None
        # On Tansu ListOffsets answers below the high watermark; a Fetch's high watermark is right.
        if max(listed, consumer.highwater(tp) or 0) <= position:
            return "the partition ends before this offset (its topic was recreated, or its records deleted)"
        return None


class FleetwatchKafkaDataSource(DataSource):
    """`spark.readStream.format("fleetwatch_kafka")`: Kafka topics through kafka-python."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(KafkaReaderOptions.parse(self.options))
