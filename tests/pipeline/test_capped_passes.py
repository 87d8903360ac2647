"""The job's two passes (state.py, without Spark: tests/support/passes.py) over a faulty fleet's backlog
read in capped micro-batches, as the Python reader plans them and Spark's connector does alike: the
alerts and the quarantine are those of reading every record at once (issue 41.1; the same on real
Spark with both sources: test_capped_catch_up.py)."""

from __future__ import annotations

import pytest
from support.live_fleet import expected_lines

from streaming.collect.simulate import FAULT_KINDS, FleetSpec, Simulation
from streaming.workshop.passes import Bus, InMemoryJob

START_MS = 1_764_000_000_000


@pytest.fixture(scope="module")
def fleet() -> Simulation:
    return Simulation(FleetSpec(clusters=4, brokers=3, start_ms=START_MS, duration_ms=300_000, seed=2,
                                faults=FAULT_KINDS, first_fault_ms=20_000, fault_every_ms=15_000))


@pytest.mark.parametrize("cap", [50, 333])
def test_a_backlog_read_under_a_cap_gives_the_alerts_of_one_batch_and_nothing_late(fleet, cap):
    events = list(fleet.events())
    read = [e for e in events if e[1]["ts"] < START_MS + 90_000]
    bus, job = Bus(), InMemoryJob()
    bus.produce(read)
    job.read(bus, None, planned_ms=START_MS + 400_000)  # the job reads the first minute and a half, and stops
    bus.produce(events[len(read):])  # the rest lands on the bus meanwhile: the job restarts onto it
    job.read(bus, cap, planned_ms=START_MS + 400_000)
    expected = expected_lines(fleet)
    assert job.batches > (len(events) - len(read)) // cap
    assert job.late() == 0
    assert job.described(job.lines() - expected) == []
    assert job.described(expected - job.lines()) == []
