"""The job's output: what detection hands the sink, one typed record per kind of fact (issue 46).

Detection (streaming/pipeline/state.py, in Spark's Python workers) writes each fact as one output row,
`(kind, key, ts, payload)`: a plain tuple, which marshal and Arrow take (`Row`). The sink
(streaming/sinks/batch_writer.py, on the driver) reads a micro-batch's rows back at once:
`BatchOutput.of(rows)`. This module is the one place that knows the kinds (`Kind`) and how each is
spelled in a row; the two sides import it, not each other.

The kinds and their records:
- `alert`: an `Alert` beside its sort key (streaming/records/alert.py's `encode_output`);
- `late`: an event that came after detection's watermark had passed it (`LateEvent`);
- `broker`, `cluster`, `target`: a snapshot of the store's tables (`StateRow`);
- `transition`, `controller`: a line of the broker transitions' or the controllers' history;
- `quarantine`: a message the parse stage refused (`Refused`);
- `source_clock`: a collector's clock reading of one chunk (`ClockReading`);
- `watermark`, `earliest_event`: marks of a bucket's micro-batch, detection's watermark after it and the
  oldest event it read (what a reset detection state has caught up with, and how far back it read).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from json.encoder import c_make_encoder, encode_basestring_ascii
from typing import Any, NamedTuple

import orjson

from streaming.records.alert import Alert, SortKey, decode_output, encode_output

__all__ = ["STATE_TABLES", "BatchOutput", "ClockReading", "Kind", "LateEvent", "Refused", "Row", "StateRow",
           "alert_row", "compact_json", "history_row", "latest_by_table", "mark_row"]

# kind, key, ts, payload: the job's output row (the pipeline's OUTPUT_SCHEMA).
Row = tuple[str, str | None, int | None, str | None]


class Kind:
    """The kinds of output rows (plain strings: marshal takes no str subclass)."""

    ALERT = "alert"
    LATE = "late"
    BROKER = "broker"
    CLUSTER = "cluster"
    TARGET = "target"
    TRANSITION = "transition"
    CONTROLLER = "controller"
    QUARANTINE = "quarantine"
    SOURCE_CLOCK = "source_clock"
    WATERMARK = "watermark"
    EARLIEST_EVENT = "earliest_event"
    # The first pass's hand-offs to the second pass's bucket `key` (streaming/detect/second_pass.py),
    # which takes them out of the batch's rows before the sink reads them.
    HANDOFFS = "handoffs"


def _compact_encoder() -> Callable[[Any], str]:
    """`json.dumps(obj, separators=(",", ":"))`, the same text, from one encoder made once.

    json.dumps builds a JSONEncoder and then its C encoder on every call: at 1,000 x 12 the
    first pass writes two texts for each of ~13k state rows a micro-batch, and making the
    encoders was half their cost (12 of 29 us a row, 10 of 12 us a key). No cycle check: the
    rows are plain values built for this (a cycle would end in RecursionError, not ValueError).
    """
    encoder = json.JSONEncoder(separators=(",", ":"), check_circular=False)
    if c_make_encoder is None:  # a Python without json's C accelerator
        return encoder.encode
    # The arguments JSONEncoder.iterencode gives it for these settings.
    make = c_make_encoder(None, encoder.default, encode_basestring_ascii, None, ":", ",", False, False, True)
    return lambda obj: "".join(make(obj, 0))


compact_json = _compact_encoder()

# State row kind -> (store table, the columns that identify a row in it).
STATE_TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    Kind.BROKER: ("brokers", ("cluster_id", "broker_id")),
    Kind.CLUSTER: ("clusters", ("cluster_id",)),
    Kind.TARGET: ("targets", ("target",)),
}


class StateRow(NamedTuple):
    """One snapshot of a broker, cluster or target: `kind` (a key of STATE_TABLES), `key` (its
    identity in its table, as compact JSON) and `row` (the table's row)."""

    kind: str
    key: str
    row: dict[str, Any]

    @classmethod
    def of(cls, kind: str, row: dict[str, Any]) -> StateRow:
        _, columns = STATE_TABLES[kind]
        return cls(kind, compact_json([row[c] for c in columns]), row)

    def output(self) -> Row:
        return self.kind, self.key, self.row.get("updated_ms") or None, compact_json(self.row)

    @property
    def updated_ms(self) -> int:
        return self.row.get("updated_ms") or 0


def latest_by_table(rows: Iterable[StateRow]) -> dict[str, list[dict[str, Any]]]:
    """Store table -> its rows, one per key: the most recent (a later one on a tie), so that an
    upsert batch has no duplicates. Every state table is there, empty when no row is for it."""
    best: dict[tuple[str, str], StateRow] = {}
    for row in rows:
        have = best.get((row.kind, row.key))
        if have is None or row.updated_ms >= have.updated_ms:
            best[(row.kind, row.key)] = row
    tables: dict[str, list[dict[str, Any]]] = {table: [] for table, _ in STATE_TABLES.values()}
    for row in best.values():
        tables[STATE_TABLES[row.kind][0]].append(row.row)
    return tables


class LateEvent(NamedTuple):
    """An event that came after detection's watermark had passed it: where it was read (`origin`,
    "topic:partition:offset") and the event, as its contract object's compact JSON."""

    origin: str
    ts: int
    text: str

    def output(self) -> Row:
        return Kind.LATE, self.origin, self.ts, self.text


class Refused(NamedTuple):
    """A message the parse stage refused: where it was read, why (`reason`, bounded; `detail`), its raw
    text, and the collector that sent it when its event named one."""

    origin: str
    reason: str
    detail: str | None
    raw: str | None
    source: str | None

    def output(self) -> Row:
        return Kind.QUARANTINE, self.origin, None, json.dumps(
            {"reason": self.reason, "detail": self.detail, "raw": self.raw, "source": self.source})


class ClockReading(NamedTuple):
    """A collector's clock in one chunk: its largest lead over the job's clock, its events, and how
    many were refused for being ahead."""

    source: str
    lead_ms: int
    events: int
    ahead: int

    def output(self) -> Row:
        return Kind.SOURCE_CLOCK, self.source, None, json.dumps(
            {"lead_ms": self.lead_ms, "events": self.events, "ahead": self.ahead})


def history_row(kind: str, item: dict[str, Any]) -> Row:
    """A line of a history (`Kind.TRANSITION`, `Kind.CONTROLLER`): each carries its own time, `ts`."""
    return kind, None, item["ts"], compact_json(item)


def mark_row(kind: str, ts: int, bucket: int | None = None) -> Row:
    """A bucket's mark (`Kind.WATERMARK`, `Kind.EARLIEST_EVENT`) at `ts`; a watermark names its bucket."""
    return kind, None if bucket is None else str(bucket), ts, None


def alert_row(alert: Alert) -> Row:
    return Kind.ALERT, alert.subject, alert.event_ms, encode_output(alert)


@dataclass
class BatchOutput:
    """One micro-batch's output rows, read back by kind."""

    alerts: list[tuple[SortKey, Alert]] = field(default_factory=list)  # in event-time order
    states: list[StateRow] = field(default_factory=list)
    transitions: list[dict[str, Any]] = field(default_factory=list)
    controller_changes: list[dict[str, Any]] = field(default_factory=list)
    refused: list[Refused] = field(default_factory=list)
    late: list[LateEvent] = field(default_factory=list)
    clocks: list[ClockReading] = field(default_factory=list)
    watermark: int | None = None  # the largest of the batch's buckets
    earliest_event: int | None = None  # the oldest event any bucket read

    @classmethod
    def of(cls, rows: Iterable[Row]) -> BatchOutput:
        # The snapshots, histories and clock readings (~20,000 rows a batch at 1,000 x 12) are read with
        # orjson, in under a third of json's time: they hold only what accepted events said, which orjson
        # parsed (the contract), and numbers. The few other rows, a refused message's text among them, are
        # read as before.
        out = cls()
        for kind, key, ts, payload in rows:
            if kind == Kind.ALERT:
                out.alerts.append(decode_output(payload))
            elif kind in STATE_TABLES:
                out.states.append(StateRow(kind, key, orjson.loads(payload)))
            elif kind == Kind.TRANSITION:
                out.transitions.append(orjson.loads(payload))
            elif kind == Kind.CONTROLLER:
                out.controller_changes.append(orjson.loads(payload))
            elif kind == Kind.QUARANTINE:
                q = json.loads(payload)
                out.refused.append(Refused(key, q["reason"], q.get("detail") or None, q["raw"], q.get("source")))
            elif kind == Kind.LATE:
                out.late.append(LateEvent(key, int(ts), payload))
            elif kind == Kind.SOURCE_CLOCK:
                c = orjson.loads(payload)
                out.clocks.append(ClockReading(key, c["lead_ms"], c["events"], c["ahead"]))
            elif kind == Kind.WATERMARK:
                out.watermark = int(ts) if out.watermark is None else max(out.watermark, int(ts))
            elif kind == Kind.EARLIEST_EVENT:
                out.earliest_event = int(ts) if out.earliest_event is None else min(out.earliest_event, int(ts))
            elif kind == Kind.HANDOFFS:
                raise ValueError("a hand-off row reached the sink: the job's writer runs the second pass over the "
                                 "batch first (streaming.detect.SecondPass)")
            else:
                raise ValueError(f"an output row of unknown kind {kind!r}")
        out.alerts.sort(key=lambda keyed: keyed[0])
        return out
