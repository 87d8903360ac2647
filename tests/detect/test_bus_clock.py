"""Detection's own watermark (streaming/detect/bus_clock.py): the event time every bus partition has been
read to, told from the runs of offsets each micro-batch read and the source's cap."""

from __future__ import annotations

from streaming.detect import BusClock, Run

HB0, HB1, STATES = "fleetwatch.heartbeats:0", "fleetwatch.heartbeats:1", "fleetwatch.broker-states:0"
L = 5_000


def run(source: str, first: int, last: int, largest: int | None) -> Run:
    return Run(source, first, last, None if largest is None else largest - 1, largest, largest)


def test_a_batch_under_the_cap_moves_the_clock_to_the_largest_event_time_read_like_spark():
    clock = BusClock()
    assert clock.advance([run(HB0, 0, 9, 50_000), run(STATES, 0, 0, 20_000)], cap=200, lateness_ms=L) is False
    assert clock.watermark == 45_000


def test_a_capped_batch_moves_it_to_the_smallest_time_the_partitions_it_read_reached():
    clock = BusClock()
    # 200 offsets read under a cap of 200: a partition ahead (heartbeats) does not move the clock past
    # what the sparse one (broker states) has reached.
    assert clock.advance([run(HB0, 0, 99, 50_000), run(HB1, 0, 98, 49_000), run(STATES, 0, 0, 20_000)],
                         cap=200, lateness_ms=L) is True
    assert clock.watermark == 15_000
    # The broker states caught up: they are in no later capped batch, and hold nothing back.
    assert clock.advance([run(HB0, 100, 199, 90_000), run(HB1, 99, 198, 88_000)], cap=200, lateness_ms=L)
    assert clock.watermark == 83_000


def test_the_cap_is_told_within_three_offsets_per_partition_read():
    for read, capped in ((100 - 3 * 2, True), (100 - 3 * 2 - 1, False)):
        clock = BusClock()
        assert clock.advance([run(HB0, 0, read // 2 - 1, 10_000), run(HB1, 0, read - read // 2 - 1, 30_000)],
                             cap=100, lateness_ms=L) is capped
        assert clock.watermark == (10_000 if capped else 30_000) - L


def test_it_never_moves_back_and_waits_for_a_partition_read_without_an_event_time():
    clock = BusClock(watermark=40_000)
    assert clock.advance([run(HB0, 0, 99, 30_000), run(HB1, 0, 99, 90_000)], cap=200, lateness_ms=L)
    assert clock.watermark == 40_000
    clock = BusClock()
    assert clock.advance([run(HB0, 0, 150, 90_000), run(STATES, 0, 50, None)], cap=200, lateness_ms=L)
    assert clock.watermark is None
    assert clock.advance([], cap=200, lateness_ms=L) is False and clock.watermark is None


def test_without_a_cap_every_batch_reads_every_partition_to_its_end():
    clock = BusClock()
    assert clock.advance([run(HB0, 0, 10**6, 50_000), run(STATES, 0, 0, 10_000)], cap=None, lateness_ms=L) is False
    assert clock.watermark == 45_000
    assert BusClock.load(clock.dump()) == clock
