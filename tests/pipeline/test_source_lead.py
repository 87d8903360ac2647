"""A source whose clock runs ahead must not drag the fleet's watermark (issue 26 point 3): the parse
stage refuses an event more than `rules.max_source_lead_ms` ahead of the job's clock, with a reason
naming the source and its lead, and reports each source's lead. No Spark: the parse stage's chunk
function over Arrow batches, as Spark's Python workers run it.
"""

from __future__ import annotations

import json
import marshal

import pytest

from streaming.config import RuleSettings
from streaming.pipeline.packing import unpack
from streaming.pipeline.parse import QUARANTINE_BUCKET, SOURCE_CLOCK_BUCKET, ParseSettings, parse_chunk
from streaming.records.contract import (
    DEFAULT_MAX_SOURCE_LEAD_MS,
    MAX_TRACKED_SOURCES,
    Rejected,
    event_from_dict,
    refuse_ahead_of_clock,
)

NOW_MS = 1_795_000_000_000
LEAD_MS = RuleSettings().max_source_lead_ms


def heartbeat(ts: int, source: str = "agent-1", broker_id: int = 1) -> dict:
    return {"schema": "fleetwatch.event/v1", "type": "broker_heartbeat", "ts": ts, "source": source,
            "cluster_id": "PayPayPayPayPayPayPayA", "broker_id": broker_id, "kind": "heartbeat", "broker_epoch": 5}


def parse(events: list[dict], now_ms: int = NOW_MS, max_source_lead_ms: int = LEAD_MS):
    """(accepted (source, ts), refused (reason, detail, source), clocks {source: (lead, events, ahead)},
    the largest event time the watermark sees) of one chunk."""
    out = parse_chunk(ParseSettings(4, 0, 300_000, max_source_lead_ms), {}, now_ms,
                      ["fleetwatch.heartbeats"] * len(events), [0] * len(events), list(range(len(events))),
                      [json.dumps(e) for e in events])
    accepted, refused, clocks, latest = [], [], {}, None
    for bucket, ts, packed in zip(*(out.column(n).to_pylist() for n in ("bucket", "ts", "events")), strict=True):
        if bucket == QUARANTINE_BUCKET:
            refused += [(reason, detail, source) for *_, reason, detail, source in marshal.loads(packed)]
        elif bucket == SOURCE_CLOCK_BUCKET:
            clocks = {source: (lead, n, ahead) for source, lead, n, ahead in marshal.loads(packed)}
        elif packed is not None:  # (a bucket with none of the chunk's events has a row for its reads)
            accepted += [(event.source, event.ts) for _, _, _, event in unpack(packed)]
            latest = ts if latest is None else max(latest, ts)
    return sorted(accepted), refused, clocks, latest


def test_the_default_bound_leaves_most_of_the_allowed_lateness_to_delivery():
    rules = RuleSettings()
    assert rules.max_source_lead_ms == DEFAULT_MAX_SOURCE_LEAD_MS == 1000
    assert rules.max_source_lead_ms <= rules.allowed_lateness_ms // 5


def test_an_event_led_by_more_than_the_bound_is_refused_with_its_source_and_lead():
    assert refuse_ahead_of_clock(event_from_dict(heartbeat(NOW_MS + LEAD_MS)), NOW_MS, LEAD_MS) is None
    with pytest.raises(Rejected) as info:
        refuse_ahead_of_clock(event_from_dict(heartbeat(NOW_MS + 10_000, source="agent-fast")), NOW_MS, LEAD_MS)
    assert info.value.reason == "ts_ahead_of_clock"
    assert info.value.detail == ("source 'agent-fast' is 10000 ms ahead of the job's clock "
                                 "(at most rules.max_source_lead_ms = 1000)")
    assert (info.value.source, info.value.ts) == ("agent-fast", NOW_MS + 10_000)


def test_one_source_ten_seconds_ahead_is_quarantined_and_cannot_move_the_watermark():
    # Three collectors in step (their events reach the job 200-400 ms after they were stamped), one
    # whose clock runs 10 s ahead: before issue 26 its events were accepted and the watermark (the
    # largest event time minus 5 s) passed every other collector's next events.
    events = [heartbeat(NOW_MS - 400, "agent-a", 1), heartbeat(NOW_MS - 200, "agent-b", 2),
              heartbeat(NOW_MS - 300, "agent-c", 3), heartbeat(NOW_MS + 10_000, "agent-fast", 4),
              heartbeat(NOW_MS + 9_800, "agent-fast", 4), heartbeat(NOW_MS + LEAD_MS, "agent-edge", 5)]
    accepted, refused, clocks, latest = parse(events)
    assert accepted == [("agent-a", NOW_MS - 400), ("agent-b", NOW_MS - 200), ("agent-c", NOW_MS - 300),
                        ("agent-edge", NOW_MS + LEAD_MS)]
    assert latest == NOW_MS + LEAD_MS  # what the watermark sees: at most the bound ahead
    assert refused == [
        ("ts_ahead_of_clock", "source 'agent-fast' is 10000 ms ahead of the job's clock "
                              "(at most rules.max_source_lead_ms = 1000)", "agent-fast"),
        ("ts_ahead_of_clock", "source 'agent-fast' is 9800 ms ahead of the job's clock "
                              "(at most rules.max_source_lead_ms = 1000)", "agent-fast")]
    assert clocks == {"agent-a": (-400, 1, 0), "agent-b": (-200, 1, 0), "agent-c": (-300, 1, 0),
                      "agent-fast": (10_000, 2, 2), "agent-edge": (LEAD_MS, 1, 0)}


def test_a_ts_beyond_the_clock_skew_stays_out_of_range_and_counts_as_ahead_for_its_source():
    micro = NOW_MS * 1000  # a timestamp in microseconds: no clock is that wrong
    accepted, refused, clocks, _ = parse([heartbeat(NOW_MS - 100, "agent-us"), heartbeat(micro, "agent-us"),
                                          heartbeat(micro, "x" * 300)])
    assert accepted == [("agent-us", NOW_MS - 100)]
    assert [(reason, source) for reason, _, source in refused] == [("ts_out_of_range", "agent-us"),
                                                                   ("ts_out_of_range", None)]  # too long a source
    assert clocks == {"agent-us": (micro - NOW_MS, 2, 1)}


def test_replayed_events_are_in_the_past_and_never_ahead():
    # `fleetwatch replay` parses recorded files against the same clock: nothing recorded is ahead.
    accepted, refused, clocks, _ = parse([heartbeat(NOW_MS - 86_400_000 + i, f"agent-{i}", i) for i in range(3)])
    assert len(accepted) == 3 and refused == []
    assert all(lead < -86_000_000 and ahead == 0 for lead, _, ahead in clocks.values())


def test_the_sources_reported_are_capped_keeping_those_that_lead_the_most():
    events = [heartbeat(NOW_MS - 5000 + i, f"agent-{i}", 1) for i in range(MAX_TRACKED_SOURCES + 50)]
    events.append(heartbeat(NOW_MS + 10_000, "agent-fast", 2))
    _, refused, clocks, _ = parse(events)
    assert len(refused) == 1
    assert len(clocks) == MAX_TRACKED_SOURCES
    assert clocks["agent-fast"] == (10_000, 1, 1)
    assert "agent-0" not in clocks and f"agent-{MAX_TRACKED_SOURCES + 49}" in clocks
