"""The parse stage tells detection which bus offsets each chunk read (issue 27: records lost unread
are blindness, not silence): every bucket's row carries the chunk's runs of consecutive offsets per
partition, with the event times of their first and last valid events. No Spark: the chunk function
over an Arrow batch, as Spark's Python workers run it."""

from __future__ import annotations

import json
import marshal

from streaming.pipeline.packing import unpack
from streaming.pipeline.parse import QUARANTINE_BUCKET, SOURCE_CLOCK_BUCKET, ParseSettings, parse_chunk

NOW_MS = 1_795_000_000_000
BUCKETS = 4


def heartbeat(ts: int, cluster: str) -> str:
    return json.dumps({"schema": "fleetwatch.event/v1", "type": "broker_heartbeat", "ts": ts, "source": "agent",
                       "cluster_id": cluster, "broker_id": 1, "kind": "heartbeat", "broker_epoch": 5})


def test_every_bucket_reads_the_chunks_runs_of_offsets():
    records = [("fleetwatch.heartbeats", 0, 10, heartbeat(NOW_MS - 8_000, "AaaaaaaaaaaaaaaaaaaaaA")),
               ("fleetwatch.heartbeats", 0, 11, "not json"),
               ("fleetwatch.heartbeats", 0, 12, heartbeat(NOW_MS - 9_000, "BbbbbbbbbbbbbbbbbbbbbB")),
               # offsets 13-19 gone from the bus
               ("fleetwatch.heartbeats", 0, 20, "not json"),
               ("fleetwatch.heartbeats", 0, 21, heartbeat(NOW_MS - 1_000, "AaaaaaaaaaaaaaaaaaaaaA"))]
    out = parse_chunk(ParseSettings(BUCKETS, 0, 300_000, 1_000), {}, NOW_MS, *map(list, zip(*records, strict=True)))
    rows = out.to_pylist()
    buckets = [row for row in rows if row["bucket"] >= 0]
    assert sorted(row["bucket"] for row in buckets) == list(range(BUCKETS))
    assert {tuple(marshal.loads(row["reads"])) for row in buckets} == {(
        # (partition, first offset, last offset, first valid event's time, last one's, the largest)
        ("fleetwatch.heartbeats:0", 10, 12, NOW_MS - 8_000, NOW_MS - 9_000, NOW_MS - 8_000),
        ("fleetwatch.heartbeats:0", 20, 21, NOW_MS - 1_000, NOW_MS - 1_000, NOW_MS - 1_000))}
    events = [event for row in buckets if row["events"] is not None for *_, event in unpack(row["events"])]
    assert len(events) == 3  # the buckets without events have a row for the reads alone, with no event time
    assert all(row["ts"] is None for row in buckets if row["events"] is None)
    assert [row["reads"] for row in rows if row["bucket"] in (QUARANTINE_BUCKET, SOURCE_CLOCK_BUCKET)] == [None, None]
