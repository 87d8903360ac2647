"""A job restarted onto a backlog bigger than one micro-batch gives the alerts of one batch (issue 41.1),
through Spark's kafka connector on a real Apache Kafka 4.4 bus (the production path; the Python reader
on the embedded Tansu bus: tests/job/test_live.py, a `fleetwatch run` killed -9 and restarted).

The job reads the first minute of a faulty fleet and stops; the next three minutes land on the bus
meanwhile; it is started again on its checkpoint with `spark.max_records_per_batch` far below that
backlog, so it catches up in many capped batches. Both sources give each partition a share of the
cap in proportion to its backlog in records, not in time: the broker-states partition (sparse) is
read ahead of the busy ones (the connector gives it at least one record a batch) or behind them.
Against Spark's watermark (the largest event time seen), the other partitions' events were late and
brokers missed their sessions: false `broker.heartbeat_lost` and `broker.partitioned`, on-time events
quarantined as `late_event`. Against detection's own watermark (streaming/detect/bus_clock.py) the
alerts are those of the engine reading every record at once, and nothing is late.
"""

from __future__ import annotations

import json
import time

import pytest
from sqlalchemy import func, select
from support.live_fleet import CAP, START_MS, capped_fleet, expected_lines, produce, stored_lines
from support.supervised import SupervisedJob

from streaming.collect.simulate import Simulation
from streaming.records import topics
from streaming.store import Store, alert_history, quarantine

pytestmark = [pytest.mark.spark]



def _late(store: Store) -> int:
    with store.engine.connect() as conn:
        return conn.scalar(select(func.count()).select_from(quarantine).where(quarantine.c.reason == "late_event"))


def _restart_onto_a_backlog(spark, config, bootstrap: str, store: Store, sim: Simulation) -> tuple[int, int]:
    """The first minute read by the job, the rest produced while it is stopped, then read by the job
    started again under CAP; (records of the backlog, micro-batches it took)."""
    events = list(sim.events())
    first = [e for e in events if e[1]["ts"] < START_MS + 60_000]
    rest = events[len(first):]
    assert any(topic == topics.BROKER_STATES for topic, _ in rest), "the backlog holds broker states"
    produce(bootstrap, first)
    with SupervisedJob(spark, config, bootstrap, store) as job:
        assert job.recorder.wait("fleetwatch", lambda s: s.input_rows >= len(first) or job.unexpected(), 180)
        assert job.unexpected() is None
    produce(bootstrap, rest)  # the job is stopped: a backlog of three minutes
    capped = config.model_copy(update={"spark": config.spark.model_copy(update={"max_records_per_batch": CAP})})
    with SupervisedJob(spark, capped, bootstrap, store) as job:
        assert job.recorder.wait("fleetwatch", lambda s: s.input_rows >= len(rest) or job.unexpected(), 300)
        assert job.unexpected() is None
        batches = job.recorder.stats["fleetwatch"].batches
    return len(rest), batches


def _check(source: str, spark, test_config, bootstrap: str, tmp_path) -> None:
    started = time.monotonic()
    config = test_config.model_copy(update={
        "bus": test_config.bus.model_copy(update={"bootstrap_servers": bootstrap, "source": source}),
        "spark": test_config.spark.model_copy(update={"checkpoint_dir": str(tmp_path / "checkpoint"),
                                                      "trigger_ms": 200})})
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    sim = capped_fleet()
    backlog, batches = _restart_onto_a_backlog(spark, config, bootstrap, store, sim)
    assert batches >= backlog // CAP, f"{batches} micro-batches for {backlog} records under a cap of {CAP}"
    stored, expected = stored_lines(store), expected_lines(sim)
    print(f"\n{source}: a backlog of {backlog} records read in {batches} micro-batches under a cap of {CAP}; "
          f"{len(stored)} alert lines stored, {len(expected)} expected, {_late(store)} late; "
          f"test took {time.monotonic() - started:.1f} s")
    assert _late(store) == 0, "on-time events quarantined as late"
    assert _described(store, stored - expected) == [], "alerts that reading every record at once does not give"
    assert expected - stored == set(), "alerts missing"


def _described(store: Store, lines: set[tuple[str, str]]) -> list[tuple]:
    """The stored alert lines among `lines`, as (status, rule, cluster, broker, starts_at, ends_at)."""
    with store.engine.connect() as conn:
        bodies = [json.loads(row.body) for row in conn.execute(alert_history.select())]
    return sorted((b["status"], b["rule"], b["cluster_id"], b["broker_id"], b["starts_at"], b["ends_at"])
                  for b in bodies if (b["alert_id"], b["status"]) in lines)


@pytest.mark.real_kafka
def test_the_connector_catches_up_in_capped_batches_with_the_alerts_of_one_batch(
        spark, test_config, kafka_bus, tmp_path):
    _check("spark", spark, test_config, kafka_bus, tmp_path)
