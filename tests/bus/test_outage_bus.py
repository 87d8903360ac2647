"""The telemetry bus killed and restarted 30 s later under the live job (issue 19), with a real Tansu
and real Spark: the job carries on, reads what the restarted bus holds once, and the alerts in the
store equal those of the same events replayed: nothing lost, nothing repeated.

Tansu keeps its data in memory: the restarted bus is empty (new topic ids, offsets from 0), as a
recreated topic would be. The events produced before the kill were read before it; the rest is
produced to the restarted bus.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from sqlalchemy import func, select
from support.live_fleet import expected_lines, produce, simulated_fleet, stored_lines

from streaming.bus import EmbeddedBus
from streaming.job import start_live_query
from streaming.records import topics
from streaming.sinks.alerts_topic import AlertPublisher
from streaming.store import Store, alert_history, outbox, quarantine
from streaming.workshop.polling import poll

pytestmark = [pytest.mark.spark, pytest.mark.broker]

OUTAGE_S = 30
PARTITIONS = {topics.HEARTBEATS: 2, topics.METADATA: 2}


def _what_went_wrong(store: Store, expected: set[tuple[str, str]], query, start_ms: int) -> str:
    """The difference, and what was late and when: which events, against which batches' watermarks."""
    with store.engine.connect() as conn:
        reasons = dict(conn.execute(select(quarantine.c.reason, func.count()).group_by(quarantine.c.reason)).all())
        late = [json.loads(raw) for raw in conn.scalars(select(quarantine.c.raw)
                                                          .where(quarantine.c.reason == "late_event"))]
    got = stored_lines(store)
    late_seen = sorted((e["ts"] - start_ms, e["type"], e["cluster_id"], e.get("broker_id")) for e in late)
    progress = (json.loads(p.json) for p in query.recentProgress)
    batches = [(p["batchId"], p["numInputRows"], *(p.get("eventTime", {}).get(k) for k in ("max", "watermark")))
               for p in progress if p["numInputRows"]]
    return (f"missing {expected - got}, unexpected {got - expected}; quarantined {reasons}; late events "
            f"(ms after the start, type, cluster, broker) {late_seen}; batches (id, rows, max event, watermark) "
            f"{batches}")


def test_the_job_rides_out_a_bus_restart_losing_and_repeating_nothing(spark, test_config, tmp_path):
    # The second half is produced all at once while the job reads: a batch can see one partition
    # further in event time than another. A minute of allowed lateness keeps such a backlog from
    # being late (as it would be from collectors flushing after an outage); the replay uses it too.
    config = test_config.model_copy(update={
        "spark": test_config.spark.model_copy(update={"checkpoint_dir": str(tmp_path / "checkpoint"),
                                                      "trigger_ms": 500}),
        "rules": test_config.rules.model_copy(update={"allowed_lateness_ms": 60_000})})
    sim = simulated_fleet(duration_ms=240_000)
    events = list(sim.events())
    expected = expected_lines(sim, config.rule_book())
    half = len(events) // 2
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    bus = EmbeddedBus(partitions=PARTITIONS, log_path=tmp_path / "tansu-1.log").start()
    port = int(bus.bootstrap.rsplit(":", 1)[1])
    restarted = None
    publisher = AlertPublisher(bus.bootstrap)
    produced = produce(bus.bootstrap, events[:half])
    job = start_live_query(spark, config, bus.bootstrap, store, publisher)
    query, recorder = job.query, job.recorder
    try:
        assert recorder.wait("fleetwatch", lambda s: s.input_rows >= produced, timeout_s=240), "first half not read"
        before = stored_lines(store)
        assert before < expected, "the second half must hold alerts still to come"

        os.killpg(bus.pid, signal.SIGKILL)
        bus.stop()  # reaps the killed process
        down_at = time.monotonic()
        while time.monotonic() - down_at < OUTAGE_S:
            assert query.isActive, f"the job died with the bus: {query.exception()}"
            time.sleep(1)  # the outage lasts OUTAGE_S; the job is watched meanwhile
        restarted = EmbeddedBus(partitions=PARTITIONS, port=port, log_path=tmp_path / "tansu-2.log").start()
        back_at = time.monotonic()
        produced += produce(restarted.bootstrap, events[half:])

        try:
            poll(lambda: stored_lines(store) == expected, 240, "every expected alert after the bus restart",
                 interval_s=0.5)
        except AssertionError:
            raise AssertionError(_what_went_wrong(store, expected, query, sim.spec.start_ms)
                                 + f"; read {recorder.stats['fleetwatch'].input_rows} of {produced}") from None
        caught_up_s = time.monotonic() - back_at
        assert recorder.wait("fleetwatch", lambda s: s.input_rows >= produced, timeout_s=60)
        assert query.isActive and query.exception() is None
        assert recorder.stats["fleetwatch"].input_rows == produced  # nothing read twice
        with store.engine.connect() as conn:
            assert conn.scalar(select(func.count()).select_from(alert_history)) == len(expected)
            assert conn.scalar(select(func.count()).select_from(outbox)) == len(expected)
        print(f"\nbus down {OUTAGE_S} s (killed, restarted empty): {produced} events read once, {len(expected)} "
              f"alert lines stored once each (0 lost, 0 repeated); caught up {caught_up_s:.1f} s after the restart")
    finally:
        job.stop()
        spark.streams.removeListener(recorder)
        publisher.close()
        for running in (bus, restarted):
            if running is not None:
                running.stop()
