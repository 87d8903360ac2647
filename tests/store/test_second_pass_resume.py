"""Detection's second pass runs in the job's driver and keeps its state in the store with each
micro-batch (streaming/detect/second_pass.py): after a crash, Spark runs the last batch again in a new
process, and the alerts of the address, cluster-id and collector shards are those of a run that never
stopped, none fired twice or lost. The first pass's rows come from the job's own first pass
(tests/support/passes.py) over a fleet with collisions of addresses and of cluster ids, read as it comes.
On both databases the store supports (a SQLite file; production's PostgreSQL). The same through the live
job, killed and restarted on Spark's kafka connector and on the embedded default: tests/job/test_live.py."""

from __future__ import annotations

from contextlib import closing

import pytest
from sqlalchemy import select
from support.micro_batch import MicroBatch

from streaming.collect.simulate import FleetSpec, Simulation
from streaming.config import RuleBook
from streaming.detect import SecondPass
from streaming.records.alert import decode_output
from streaming.sinks import BatchWriter
from streaming.store import Store, alert_history
from streaming.workshop.passes import Bus, InMemoryJob

START_MS = 1_764_000_000_000
SECOND_PASS_RULES = {"endpoint.collision", "cluster.id_duplicate", "collector.silent"}


@pytest.fixture(scope="module")
def job() -> InMemoryJob:
    fleet = Simulation(FleetSpec(clusters=12, brokers=3, start_ms=START_MS, duration_ms=300_000, seed=2,
                                 faults=("endpoint.collision", "cluster.id_duplicate"), first_fault_ms=20_000,
                                 fault_every_ms=15_000))
    bus, job = Bus(), InMemoryJob()
    events = list(fleet.events())
    for start in range(START_MS, START_MS + 300_000, 10_000):  # a micro-batch per 10 s of telemetry, as it comes
        bus.produce([e for e in events if start <= e[1]["ts"] < start + 10_000])
        job.read(bus, None, planned_ms=START_MS + 400_000)
    return job


def _second_pass_lines(rows: list[tuple]) -> set[tuple[str, str]]:
    alerts = (decode_output(row[3])[1] for row in rows if row[0] == "alert")
    return {(a.alert_id, a.status) for a in alerts if a.rule in SECOND_PASS_RULES}


def _stored_lines(store: Store) -> list[tuple[str, str]]:
    with store.engine.connect() as conn:
        return sorted(conn.execute(select(alert_history.c.alert_id, alert_history.c.status)).all())


def test_the_second_pass_resumes_exactly_after_a_crash(job, database_urls):
    expected = _second_pass_lines(job.output)
    assert len(expected) >= 8  # collisions and duplicate ids fired and resolved in this fleet
    batches = job.first_pass_rows
    for crash_at in range(1, len(batches), 2):
        with closing(Store(database_urls())) as store:

            def writer(store: Store = store) -> BatchWriter:
                return BatchWriter(store, checkpoint=("fleetwatch", lambda: "checkpoint-1"),
                                   second_pass=SecondPass(RuleBook()))

            before = writer()
            for batch_id in range(crash_at + 1):
                before(MicroBatch(batches[batch_id]), batch_id)
            # The process died after writing batch `crash_at`, before Spark committed it: a new one runs it again.
            after = writer()
            for batch_id in range(crash_at, len(batches)):
                after(MicroBatch(batches[batch_id]), batch_id)
            stored = [line for line in _stored_lines(store) if line in expected or line[0] in {a for a, _ in expected}]
            assert set(stored) == expected, f"crashed after batch {crash_at}"
            assert len(stored) == len(expected), f"a line stored twice, crashed after batch {crash_at}"


def test_a_new_checkpoint_starts_the_second_pass_afresh(job, store_url, request):
    # The state of another checkpoint (a reset detection state) is not read, and is gone with the new one's first write.
    store = Store(store_url)
    request.addfinalizer(store.close)
    batches = job.first_pass_rows
    old = BatchWriter(store, checkpoint=("fleetwatch", lambda: "old"), second_pass=SecondPass(RuleBook()))
    for batch_id, rows in enumerate(batches):
        old(MicroBatch(rows), batch_id)
    assert store.second_pass_buckets("fleetwatch", "old", len(batches))
    assert store.second_pass_buckets("fleetwatch", "new", len(batches)) == {}
    new = BatchWriter(store, checkpoint=("fleetwatch", lambda: "new"), second_pass=SecondPass(RuleBook()))
    for batch_id, rows in enumerate(batches):
        new(MicroBatch(rows), batch_id)
    assert store.second_pass_buckets("fleetwatch", "old", len(batches)) == {}
    assert store.second_pass_buckets("fleetwatch", "new", len(batches))
