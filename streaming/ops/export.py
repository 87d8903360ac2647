"""`fleetwatch export`: a time range of the bus's telemetry as a file `fleetwatch replay` reads.

It reads the telemetry topics (streaming.records.topics.TELEMETRY) of the configured bus with
kafka-python, from the first record stamped at or after `since - max_clock_skew_ms` (ListOffsets
by timestamp, `offsets_for_times`): an event's record is published after the event happened,
up to a clock skew earlier on the collector's clock. Each partition is read up to its end as it
was when the export started (the larger of ListOffsets(LATEST) and the first Fetch's high
watermark: Tansu answers the former short, inside the last record batch, streaming/bus/listoffsets.py;
it also answers every ListOffsets by timestamp with 0, so on Tansu the export reads from the start),
or until a record stamped `read_past_ms` after `until` (a record
published that much later than the range is past anything a collector buffered through an
outage of the bus). An event is kept when its own `ts` is in [since, until); the file has them in
event-time order (then topic, partition, offset), one contract object per line, as the bus had it.
A record that is no contract event with a `ts` (which replay would quarantine) is counted, not kept.
The events of the range are sorted on disk past a buffer (`spill.py`): a range may exceed memory.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from streaming.bus import BusAccess
from streaming.ops.spill import SortedSpill
from streaming.plumbing.clock import iso_ms
from streaming.plumbing.errors import BusFailure, ConfigError
from streaming.records import topics

__all__ = ["ExportSummary", "check_range", "export_range", "parse_time"]

_PROGRESS_EVERY_S = 2.0
_STALLED_AFTER_S = 60.0  # no record and no partition finished for this long: the bus is not answering


def parse_time(text: str, flag: str) -> int:
    """Epoch ms from ISO 8601 (`2026-11-27T09:00:00Z`; no zone is UTC) or a number of epoch ms."""
    if text.strip().isdigit():
        return int(text)
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: not a time (ISO 8601 such as 2026-11-27T09:00:00Z, "
                          "or epoch milliseconds)") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


def check_range(since: int, until: int) -> None:
    """A range to export ends after it starts."""
    if until <= since:
        raise ConfigError(f"--until {iso_ms(until)} is not after --since {iso_ms(since)}")


@dataclass
class ExportSummary:
    since: int
    until: int
    out: Path
    by_topic: Counter[str] = field(default_factory=Counter)
    skipped: int = 0  # records that are no contract event with a `ts`
    records_read: int = 0

    def render(self) -> str:
        topics_said = ", ".join(f"{t} {self.by_topic.get(t, 0)}" for t in topics.TELEMETRY)
        skipped = f"; {self.skipped} records skipped (no contract event with a ts)" if self.skipped else ""
        return (f"exported {sum(self.by_topic.values())} events from {iso_ms(self.since)} to {iso_ms(self.until)} "
                f"to {self.out} ({topics_said}; {self.records_read} records read{skipped})")


def export_range(access: BusAccess, since: int, until: int, out: Path, *, skew_ms: int, read_past_ms: int,
                 progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> ExportSummary:
    """Write the telemetry events with `since <= ts < until` to `out`, in event-time order."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError

    check_range(since, until)
    summary = ExportSummary(since, until, out)
    kept = SortedSpill()  # ts, topic's rank, partition, offset, value: sorted on disk past a buffer
    try:
        consumer = KafkaConsumer(bootstrap_servers=access.bootstrap, enable_auto_commit=False, group_id=None,
                                 **access.client_settings)
    except KafkaError as exc:
        raise BusFailure(f"cannot reach the bus at {access.bootstrap}: {type(exc).__name__}") from None
    try:
        parts = [TopicPartition(t, p) for t in topics.TELEMETRY
                 for p in sorted(consumer.partitions_for_topic(t) or ())]
        if not parts:
            raise BusFailure(f"the bus at {access.bootstrap} has none of the telemetry topics "
                             f"({', '.join(topics.TELEMETRY)})")
        consumer.assign(parts)
        starts = consumer.offsets_for_times({tp: max(since - skew_ms, 0) for tp in parts})
        ends = consumer.end_offsets(parts)
        todo = {}
        for tp in parts:
            found = starts.get(tp)
            if found is not None:  # None: no record stamped that late
                consumer.seek(tp, found.offset)
                todo[tp] = ends[tp]
        consumer.pause(*(tp for tp in parts if tp not in todo))
        _read(consumer, todo, kept, summary, read_past_ms, progress)
    except KafkaError as exc:
        raise BusFailure(f"reading the bus at {access.bootstrap} failed: {type(exc).__name__}: {exc}") from None
    finally:
        consumer.close()
    with out.open("wb") as fh:
        for *_, value in kept.drain():
            fh.write(value.rstrip(b"\n") + b"\n")
    return summary


def _read(consumer: Any, todo: dict[Any, int], kept: SortedSpill, summary: ExportSummary,
          read_past_ms: int, progress: Callable[[str], None]) -> None:
    """Poll the partitions of `todo` (-> their listed end offset) until each reaches its end or its cut."""
    rank = {t: i for i, t in enumerate(topics.TELEMETRY)}
    cut_at = summary.until + read_past_ms
    fetched: set[Any] = set()  # partitions whose end was raised to a Fetch's high watermark
    said = heard = time.monotonic()
    while todo:
        polled = consumer.poll(timeout_ms=500, max_records=5000)
        for tp in [tp for tp in todo if tp not in fetched and consumer.highwater(tp) is not None]:
            todo[tp] = max(todo[tp], consumer.highwater(tp))
            fetched.add(tp)
        for tp, records in polled.items():
            heard = time.monotonic()
            for record in records:
                summary.records_read += 1
                if record.timestamp > cut_at:
                    todo.pop(tp, None)
                    consumer.pause(tp)
                    break
                ts = _ts(record.value)
                if ts is None:
                    summary.skipped += 1
                elif summary.since <= ts < summary.until:
                    kept.add((ts, rank[tp.topic], tp.partition, record.offset, record.value))
                    summary.by_topic[tp.topic] += 1
        for tp in [tp for tp in todo if tp in fetched and consumer.position(tp) >= todo[tp]]:
            del todo[tp]
            consumer.pause(tp)
        now = time.monotonic()
        if now - heard > _STALLED_AFTER_S:
            raise BusFailure(f"the bus sent nothing for {_STALLED_AFTER_S:.0f} s with "
                             f"{len(todo)} partitions left to read")
        if now - said >= _PROGRESS_EVERY_S and todo:
            said = now
            progress(f"export: {summary.records_read} records read, {kept.count} events in the range, "
                     f"{len(todo)} partitions still to read")


def _ts(value: bytes | None) -> int | None:
    try:
        event = json.loads(value or b"")
    except ValueError:
        return None
    ts = event.get("ts") if isinstance(event, dict) else None
    return ts if isinstance(ts, int) and not isinstance(ts, bool) else None
