"""Does a bus answer ListOffsets(LATEST) with the high watermark? Found out by behaviour.

Spark's kafka connector plans every micro-batch up to what ListOffsets(LATEST) answers. Kafka
answers the high watermark. Tansu 0.6.0 answers an offset inside the partition's last record batch
(measured: the batch's base offset + 1, so a batch of one record looks right, a batch of five at
offsets 0-4 gets 1): a reader that trusts it never reads the rest of that batch until more data
arrives. Telemetry sent in quiet moments waits, and a broker's last heartbeats look lost (issue 26:
7 false `heartbeat_lost`/`partitioned` alerts). The project's Python reader is right on both kinds
of bus: it also takes the high watermark of a Fetch response.

`check_list_offsets` tells the two apart by what the bus does, never by its address or product
name. On `topics.LISTOFFSETS_CHECK` (fleetwatch's own, one partition, created when missing like
the other topics; the telemetry topics are never touched) it

1. produces `MARKER_RECORDS` small records in ONE record batch (one flush, acks=all) and notes the
   offset after the last one acknowledged (`acked_end`);
2. asks ListOffsets(LATEST) (`listed`);
3. fetches from `listed` and notes the Fetch response's high watermark (`fetched`).

Kafka answers `listed == acked_end` and has nothing beyond it (`fetched == listed`). `listed <
acked_end` settles it the other way: the high watermark of an acknowledged acks=all record is past
it. A producer writing to the check topic between the steps can only make `listed` or `fetched`
larger: that attempt proves nothing, and the check tries again (at most `_ATTEMPTS` times, then
says so: `verdict` None). It works on an empty bus and reaches the bus with its security
(`BusAccess`); the answer for one bus is kept for the process's lifetime. Measured (2 loaded
cores, topic creation included): 0.3 s on Tansu 0.6.0, 0.4 s on one Kafka 4.4 node.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError

from streaming.bus.access import BusAccess
from streaming.bus.embedded import BusError, ensure_topics
from streaming.plumbing.errors import first_line
from streaming.records import topics

__all__ = ["MARKER_RECORDS", "ListOffsetsCheck", "check_list_offsets"]

log = logging.getLogger(__name__)

MARKER_RECORDS = 5
_ATTEMPTS = 3
_LINGER_MS = 1000


@dataclass(frozen=True)
class ListOffsetsCheck:
    """What one bus answered. `verdict`: True when ListOffsets(LATEST) is the high watermark, False
    when it is less than that (Tansu-like), None when the check could not tell (`error` says why)."""

    bootstrap: str
    verdict: bool | None
    acked_end: int | None = None  # the offset after the last marker record acknowledged
    listed: int | None = None  # ListOffsets(LATEST)
    fetched: int | None = None  # a Fetch response's high watermark
    took_s: float = 0.0
    error: str | None = None

    @property
    def reason(self) -> str:
        """One clause: what the bus answered."""
        if self.verdict is True:
            return f"the bus at {self.bootstrap} answers ListOffsets(LATEST) with the high watermark"
        if self.verdict is False:
            return (f"the bus at {self.bootstrap} answers ListOffsets(LATEST) with an offset inside the last record "
                    f"batch, not the high watermark ({self.listed} after one batch acknowledged up to offset "
                    f"{(self.acked_end or 0) - 1}; Tansu-like)")
        return f"cannot tell how the bus at {self.bootstrap} answers ListOffsets(LATEST): {self.error}"


_CACHE: dict[tuple[str, tuple[tuple[str, str], ...]], ListOffsetsCheck] = {}
_CACHE_LOCK = threading.Lock()


def check_list_offsets(bus: str | BusAccess, *, timeout_s: float = 30.0, cached: bool = True) -> ListOffsetsCheck:
    """Check how `bus` answers ListOffsets(LATEST) (the module's docstring). Never raises for the
    bus's sake: an unreachable bus is a check with `verdict` None. `cached`: a bus checked before in
    this process (same addresses and security) is not checked again; an undecided check is not kept."""
    access = BusAccess.of(bus)
    key = (access.bootstrap, tuple(sorted((name, repr(value)) for name, value in access.client_settings.items())))
    with _CACHE_LOCK:
        if cached and key in _CACHE:
            return _CACHE[key]
    started = time.monotonic()
    check = _check(access, started + timeout_s)
    check = replace(check, took_s=round(time.monotonic() - started, 3))
    # Debug: the job says what it made of it in its one "telemetry source" line.
    log.debug("ListOffsets check", extra={"bootstrap": access.bootstrap, "verdict": check.verdict,
                                         "acked_end": check.acked_end, "listed": check.listed,
                                         "fetched": check.fetched, "took_s": check.took_s, "error": check.error})
    if cached and check.verdict is not None:
        with _CACHE_LOCK:
            _CACHE[key] = check
    return check


def _check(access: BusAccess, deadline: float) -> ListOffsetsCheck:
    bootstrap = access.bootstrap
    tp = TopicPartition(topics.LISTOFFSETS_CHECK, 0)
    try:
        ensure_topics(access, [tp.topic], 1, timeout_s=max(1.0, deadline - time.monotonic()))
    except BusError as exc:
        return ListOffsetsCheck(bootstrap, None, error=first_line(exc, named=True))
    budget_ms = max(1000, int((deadline - time.monotonic()) * 1000))
    producer = consumer = None
    try:
        # A linger longer than the sends take, then one flush: the marker records leave in one
        # produce request, as one batch.
        producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="fleetwatch-listoffsets-check", acks="all",
                                 linger_ms=_LINGER_MS, request_timeout_ms=budget_ms,
                                 delivery_timeout_ms=budget_ms + _LINGER_MS + 1, max_block_ms=budget_ms,
                                 **access.client_settings)
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id="fleetwatch-listoffsets-check",
                                 group_id=None, enable_auto_commit=False, fetch_max_wait_ms=10,
                                 request_timeout_ms=budget_ms, bootstrap_timeout_ms=budget_ms,
                                 **access.client_settings)
        last: ListOffsetsCheck | None = None
        for _ in range(_ATTEMPTS):
            last = _attempt(access, producer, consumer, tp, deadline)
            if last.verdict is not None:
                return last
        assert last is not None
        return last
    except KafkaError as exc:
        return ListOffsetsCheck(bootstrap, None, error=first_line(exc, named=True))
    finally:
        if producer is not None:
            producer.close(timeout=1)
        if consumer is not None:
            consumer.close()


def _attempt(access: BusAccess, producer: KafkaProducer, consumer: KafkaConsumer, tp: TopicPartition,
             deadline: float) -> ListOffsetsCheck:
    stamp = str(time.time_ns()).encode()
    sent = [producer.send(tp.topic, partition=tp.partition, key=b"listoffsets-check", value=stamp + b"/%d" % i)
            for i in range(MARKER_RECORDS)]
    producer.flush(timeout=max(0.1, deadline - time.monotonic()))
    acked_end = max(future.get(timeout=max(0.1, deadline - time.monotonic())).offset for future in sent) + 1
    listed = consumer.end_offsets([tp], timeout_ms=max(100, int((deadline - time.monotonic()) * 1000)))[tp]
    if listed < acked_end:  # settled: the high watermark is past every acknowledged record
        return ListOffsetsCheck(access.bootstrap, False, acked_end, listed)
    # A Fetch from there: its response carries the partition's high watermark. Re-assigning drops
    # kafka-python's per-partition state: the high watermark comes from a Fetch sent now.
    consumer.unsubscribe()
    consumer.assign([tp])
    consumer.seek(tp, listed)
    fetched = None
    while fetched is None and time.monotonic() < deadline:
        consumer.poll(timeout_ms=50, max_records=1)
        fetched = consumer.highwater(tp)
    if fetched is None:
        return ListOffsetsCheck(access.bootstrap, None, acked_end, listed,
                                error="no Fetch response before the deadline")
    if listed == acked_end and fetched == listed:
        return ListOffsetsCheck(access.bootstrap, True, acked_end, listed, fetched)
    # Someone else wrote to the check topic meanwhile: this attempt proves nothing.
    return ListOffsetsCheck(access.bootstrap, None, acked_end, listed, fetched,
                            error="another producer wrote to the check topic during every attempt")
