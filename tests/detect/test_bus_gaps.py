"""Records the bus dropped unread are blindness, not silence (issue 27): a broker session restarts
at the end of a gap in the offsets of the partition its heartbeats travel on. The first pass of the
job as state.py runs it, without Spark: the runs of offsets read per micro-batch go through
`ReadPositions`, its gaps to the cluster's `ShardEngine` among the events, pickled in between."""

from __future__ import annotations

import pickle

from support.rule_events import B1, B2, B3, HB_LOST, LATENESS, SESSION, C, D, F, R, hb, line_of, t

from streaming.config import RuleBook
from streaming.detect import BusGap, ReadPositions, Run, ShardEngine, dump_engine, load_engine
from streaming.records.contract import Event

HEARTBEATS = "fleetwatch.heartbeats:0"
OTHER = "fleetwatch.heartbeats:1"


def heartbeats(start: float, stop: float, brokers=(1, 2, 3), cluster: str = C) -> list[Event]:
    """Every broker's heartbeat each 2 s from `start` to `stop` (seconds)."""
    return [hb(t(s), b, cluster=cluster) for s in range(int(start), int(stop) + 1, 2) for b in brokers]


Segment = tuple[str, int, list[Event]]


def first_pass(batches: list[Segment | list[Segment]]) -> list[tuple]:
    """Micro-batches, each of one or more (partition, offset of its first record, events at
    consecutive offsets), through a bucket's read positions and cluster C's engine (its events only),
    as state.py runs them; the alert lines, with the timers the last watermark passed (the end of
    the input is not silence)."""
    book, positions, engine = RuleBook(), ReadPositions(), ShardEngine("cluster:" + C)
    alerts, watermark = [], -(2**62)
    for batch in batches:
        segments = batch if isinstance(batch, list) else [batch]
        gaps = positions.advance([Run(source, first, first + len(events) - 1, events[0].ts, events[-1].ts,
                                   max(e.ts for e in events))
                                  for source, first, events in segments])
        items = [((source, first + i), e) for source, first, events in segments
                 for i, e in enumerate(events) if e.cluster_id == C]
        items += [((gap.source, gap.offset), gap) for gap in gaps]
        alerts += engine.process(items, watermark, book).alerts
        watermark = max(watermark, max(e.ts for _, _, events in segments for e in events) - LATENESS)
        engine = load_engine(dump_engine(engine))  # kept pickled between batches, as in the state store
        positions = ReadPositions(pickle.loads(pickle.dumps(positions.at)))  # as state.py keeps them
    alerts += engine.advance(watermark, book).alerts
    return sorted(line_of(a.to_dict()) for a in alerts)


def lost_between(start: float, until: float, brokers=(1, 2, 3)) -> int:
    """How many records a healthy fleet sent between `start` and `until` (exclusive)."""
    return len([e for e in heartbeats(start, until, brokers) if e.ts < t(until)])


BEFORE = heartbeats(0, 30)
AFTER = heartbeats(60, 90)
LOST = lost_between(32, 60)


def test_thirty_seconds_lost_unread_raise_nothing_for_a_healthy_cluster():
    assert first_pass([(HEARTBEATS, 0, BEFORE), (HEARTBEATS, len(BEFORE) + LOST, AFTER)]) == []


def test_the_same_thirty_seconds_of_real_silence_fire_for_every_broker():
    # What the job did before issue 27 with the loss: the bus's offsets say these brokers were silent.
    assert first_pass([(HEARTBEATS, 0, BEFORE), (HEARTBEATS, len(BEFORE), AFTER)]) == sorted(
        line for b in (B1, B2, B3) for line in (F(HB_LOST, b, t(30) + SESSION), R(HB_LOST, b, t(30) + SESSION, t(60))))


def test_a_broker_silent_after_the_gap_fires_one_session_after_its_end():
    after = heartbeats(60, 90, brokers=(1, 2))
    assert first_pass([(HEARTBEATS, 0, BEFORE), (HEARTBEATS, len(BEFORE) + LOST, after)]) == [
        F(HB_LOST, B3, t(60) + SESSION)]


def test_a_broker_silent_before_the_gap_fires_at_its_own_deadline():
    before = heartbeats(0, 10) + heartbeats(12, 30, brokers=(1, 2))  # broker 3's last heartbeat at 10 s
    assert first_pass([(HEARTBEATS, 0, before), (HEARTBEATS, len(before) + LOST, AFTER)]) == [
        F(HB_LOST, B3, t(10) + SESSION), R(HB_LOST, B3, t(10) + SESSION, t(60))]


def test_a_gap_in_a_partition_without_the_clusters_heartbeats_changes_nothing():
    # Cluster C's heartbeats are silent from 30 to 60 s on their partition; another's lost 30 s unread.
    other = heartbeats(0, 90, cluster=D)
    got = first_pass([[(HEARTBEATS, 0, BEFORE), (OTHER, 0, other[:48])],
                      [(HEARTBEATS, len(BEFORE), AFTER), (OTHER, 100, other[93:])]])
    assert got == sorted(line for b in (B1, B2, B3)
                         for line in (F(HB_LOST, b, t(30) + SESSION), R(HB_LOST, b, t(30) + SESSION, t(60))))


def test_one_missing_offset_is_no_loss_it_may_be_a_transaction_marker():
    positions = ReadPositions()
    assert positions.advance([Run(HEARTBEATS, 0, 9, t(0), t(9), t(9))]) == []
    assert positions.advance([Run(HEARTBEATS, 11, 20, t(40), t(50), t(50))]) == []
    assert positions.advance([Run(HEARTBEATS, 23, 30, t(70), t(80), t(80))]) == [BusGap(HEARTBEATS, t(50), t(70), 23)]


def test_runs_of_one_batch_in_any_order_and_a_gap_between_them():
    positions = ReadPositions()
    assert positions.advance([Run(HEARTBEATS, 50, 60, t(50), t(60), t(60)),
                              Run(HEARTBEATS, 0, 9, t(0), t(9), t(9))]) == [BusGap(HEARTBEATS, t(9), t(50), 50)]
    assert positions.advance([Run(HEARTBEATS, 61, 70, t(61), t(70), t(70)),
                              Run(OTHER, 0, 3, t(61), t(64), t(64))]) == []


def test_a_partition_that_started_over_lost_what_it_held():
    # Its topic deleted and created again: offsets from 0.
    positions = ReadPositions()
    positions.advance([Run(HEARTBEATS, 0, 99, t(0), t(30), t(30))])
    assert positions.advance([Run(HEARTBEATS, 0, 9, t(70), t(80), t(80))]) == [BusGap(HEARTBEATS, t(30), t(70), 0)]


def test_a_gap_followed_by_no_valid_event_ends_at_the_next_one():
    positions = ReadPositions()
    positions.advance([Run(HEARTBEATS, 0, 9, t(0), t(9), t(9))])
    assert positions.advance([Run(HEARTBEATS, 20, 25, None, None, None)]) == []  # quarantined records only
    assert positions.advance([Run(HEARTBEATS, 26, 30, t(60), t(64), t(64))]) == [BusGap(HEARTBEATS, t(9), t(60), 26)]
    assert positions.advance([Run(HEARTBEATS, 31, 31, t(65), t(65), t(65))]) == []


def test_a_partition_before_its_first_valid_event_has_nothing_to_be_blind_to():
    positions = ReadPositions()
    positions.advance([Run(HEARTBEATS, 0, 9, None, None, None)])
    assert positions.advance([Run(HEARTBEATS, 50, 59, t(50), t(59), t(59))]) == []


def test_an_engine_pickled_before_it_knew_its_heartbeat_partitions_learns_them():
    engine = ShardEngine("cluster:" + C)
    engine.process([((HEARTBEATS, 0), hb(t(0), 1))], -(2**62), RuleBook())
    del engine.__dict__["heartbeat_sources"]  # as a state written before issue 27's gaps
    loaded = load_engine(dump_engine(engine))
    assert loaded.heartbeat_sources == frozenset()
    loaded.process([((HEARTBEATS, 1), hb(t(2), 1))], -(2**62), RuleBook())
    assert loaded.heartbeat_sources == {HEARTBEATS}
