"""The live job end to end: real Tansu broker, real Spark, real SQLite store.

A simulated fleet with a stopped broker is produced to the bus; the job must put
`broker.heartbeat_lost` in the store, quarantine a malformed message without stopping, give the
same alerts as `replay` over the same events, and survive a kill in the middle of the stream
without losing or repeating an alert, restarted onto a backlog bigger than one micro-batch (issue 41:
the alerts of one batch, nothing on time quarantined as late; the same through Spark's connector on
a real Kafka bus: tests/pipeline/test_capped_catch_up.py). Killed while the second pass holds an alert
open (its state in the store), on both paths: the embedded default and Spark's connector on real Kafka.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from kafka import KafkaProducer
from pyspark import cloudpickle
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor
from sqlalchemy import func, select
from support.live_fleet import CAP, START_MS, capped_fleet, expected_lines, produce, simulated_fleet, stored_lines
from support.reference import reference_alerts
from support.supervised import SupervisedJob

from streaming.bus import EmbeddedBus
from streaming.collect.simulate import FleetSpec, Simulation, write_events
from streaming.config import ConfigError, RuleSettings
from streaming.detect import detect
from streaming.job import QUERY_NAME, checkpoint_path, replay_file, start_live_query
from streaming.job.session import CHECKPOINT_LAYOUT, CheckpointLayout, claim_checkpoint
from streaming.records import topics
from streaming.records.contract import event_from_dict
from streaming.store import Store, alert_history, alerts, outbox, pipeline_progress, quarantine
from streaming.workshop.polling import poll

pytestmark = [pytest.mark.spark, pytest.mark.broker]


@pytest.fixture
def bus(tmp_path):
    with EmbeddedBus(partitions={topics.HEARTBEATS: 2, topics.METADATA: 2}, log_path=tmp_path / "tansu.log") as b:
        yield b


def test_live_job_detects_stopped_broker_quarantines_and_matches_replay(spark, test_config, bus, tmp_path):
    sim = simulated_fleet(clusters=30)
    # The first stopped broker's alert, as the oracle of the rules (the reference detector) reads the stream.
    lost = next((a for a in reference_alerts([json.dumps(ev) for _, ev in sim.events()])
                 if a["rule"] == "broker.heartbeat_lost"), None)
    assert lost, "the simulator injected no stopped broker"
    # The bus configured by address, as in the field (issue 26): `auto` must find out that this Tansu
    # answers ListOffsets(LATEST) inside the last batch and not give it to Spark's connector, or the
    # last events wait for more data and the alerts differ.
    config = test_config.model_copy(update={
        "bus": test_config.bus.model_copy(update={"bootstrap_servers": bus.bootstrap, "source": "auto"}),
        "spark": test_config.spark.model_copy(update={"checkpoint_dir": str(tmp_path / "checkpoint"),
                                                      "trigger_ms": 500})})
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    produced = produce(bus.bootstrap, sim.events())
    produce(bus.bootstrap, [(topics.METADATA, {"not": "an event"})])
    with KafkaProducer(bootstrap_servers=bus.bootstrap) as producer:
        producer.send(topics.HEARTBEATS, value=b"\x00{garbage")
        producer.flush()
    started = time.monotonic()
    with SupervisedJob(spark, config, bus.bootstrap, store) as job:
        recorder = job.recorder

        def heartbeat_lost_in_store():
            with store.engine.connect() as conn:
                return conn.execute(select(alerts).where(
                    alerts.c.rule == "broker.heartbeat_lost", alerts.c.cluster_id == lost["cluster_id"],
                    alerts.c.broker_id == lost["broker_id"])).first()

        row = poll(heartbeat_lost_in_store, 240, "broker.heartbeat_lost in the store", interval_s=0.5)
        assert row.starts_at == lost["starts_at"]
        detected_after_s = time.monotonic() - started

        def quarantined():
            with store.engine.connect() as conn:
                return dict(conn.execute(select(quarantine.c.reason, func.count()).group_by(quarantine.c.reason)).all())

        assert poll(lambda: len(quarantined()) == 2 and quarantined(), 60, "two quarantined messages",
                    interval_s=0.5) == {
            "missing_field:schema": 1, "not_json": 1}
        expected = expected_lines(sim)
        poll(lambda: stored_lines(store) == expected, 120, "the live alerts to equal the replayed ones", interval_s=0.5)
        assert job.unexpected() is None
        # Progress events reach listeners asynchronously, after the batch's sink has run.
        assert recorder.wait("fleetwatch", lambda s: s.input_rows >= produced + 2, timeout_s=60)
        stats = recorder.stats["fleetwatch"]
        assert stats.input_rows == produced + 2
        with store.engine.connect() as conn:  # what the dashboard's pipeline page shows
            assert conn.scalar(select(func.sum(pipeline_progress.c.input_rows))) == produced + 2
        rate = stats.input_rows / max(stats.busy_ms / 1000, 1e-3)
        print(f"\nlive job: {stats.input_rows} rows in {stats.batches} batches, busy {stats.busy_ms} ms "
              f"-> {rate:.0f} rows/s while busy; first heartbeat_lost in the store after {detected_after_s:.1f} s")

    events_file = tmp_path / "events.jsonl"
    write_events(sim, events_file)
    replayed = replay_file(events_file, tmp_path / "alerts.jsonl", config)
    assert {(a["alert_id"], a["status"]) for a in replayed.alerts} == stored_lines(store)


def _run_job(config_path: Path, log_path: Path) -> subprocess.Popen:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    return subprocess.Popen([sys.executable, "-m", "streaming.cli", "run", "--config", str(config_path)],
                            stdout=log_path.open("ab"), stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)


def test_killed_job_restarts_onto_a_capped_backlog_without_losing_repeating_or_making_late(bus, tmp_path):
    """`fleetwatch run` killed -9 in the middle of the stream and started again on its checkpoint with
    `spark.max_records_per_batch` far below the backlog (as a job down for a minute at fleet scale): it
    catches up in many capped batches. Before detection kept its own watermark (main 69ef28b), the
    Python reader's proportional shares held the sparse broker-states partition back: on-time events
    quarantined as late, an alert missed."""
    _kill_and_restart_onto_a_backlog(bus.bootstrap, "python", capped_fleet(), tmp_path)


@pytest.mark.parametrize("source", ["python", pytest.param("spark", marks=pytest.mark.real_kafka)])
def test_a_killed_job_keeps_the_second_passs_open_alerts_across_its_restart(request, source, tmp_path):
    """The second pass (duplicate cluster ids, colliding endpoints: streaming/detect/second_pass.py) keeps
    its state in the store, beside the alerts of each batch, not in Spark's checkpoint. `fleetwatch run`
    killed -9 while a duplicate cluster id is firing and restarted onto a capped backlog resolves it once,
    with nothing fired twice and nothing lost: on the embedded default (the Python reader, Tansu) and on
    production's path (Spark's kafka connector, a real Kafka 4.4 bus)."""
    bootstrap = request.getfixturevalue("bus").bootstrap if source == "python" else request.getfixturevalue("kafka_bus")
    sim = Simulation(FleetSpec(clusters=3, brokers=3, start_ms=START_MS, duration_ms=240_000, seed=11,
                               faults=("cluster.id_duplicate", "endpoint.collision"), first_fault_ms=40_000,
                               fault_every_ms=30_000))
    first = next(a for a in _expected_alerts(sim) if a["rule"] == "cluster.id_duplicate")
    # Killed with the first minute read and 20 s more on the way: the duplicate (from ~42 s to ~82 s) open.
    assert first["starts_at"] < START_MS + 60_000 and first["ends_at"] > START_MS + 80_000
    held = (first["alert_id"], "firing")
    _kill_and_restart_onto_a_backlog(bootstrap, source, sim, tmp_path, open_at_kill=held)


@pytest.mark.parametrize("source", ["python", pytest.param("spark", marks=pytest.mark.real_kafka)])
def test_a_checkpoint_whose_operator_runs_in_event_time_is_continued_so(request, source, tmp_path):
    """Spark refuses a restart that changes a stateful operator's time mode. Versions up to 2026-11-30
    registered detection's operator in "EventTime" and marked the checkpoint with the layout's first line
    alone; this one registers a new checkpoint's in "None" (no timer state per task). A checkpoint so
    marked keeps its mode across the upgrade and a kill -9, on both paths, every alert as before."""
    bootstrap = request.getfixturevalue("bus").bootstrap if source == "python" else request.getfixturevalue("kafka_bus")
    location = tmp_path / "checkpoint" / QUERY_NAME
    location.mkdir(parents=True)
    (location / "fleetwatch-layout").write_text(CHECKPOINT_LAYOUT.splitlines(keepends=True)[0])
    _kill_and_restart_onto_a_backlog(bootstrap, source, capped_fleet(), tmp_path, time_mode="EventTime")


def _operator_time_modes(location: Path) -> set[str]:
    """The time modes Spark's operator metadata in a checkpoint says its stateful operator runs in, as
    `transformWithStateInPandas` takes them (the metadata spells "None" "NoTime")."""
    files = [f for f in (location / "state" / "0" / "_metadata" / "v2").iterdir() if not f.name.startswith(".")]
    written = {json.loads(json.loads(f.read_text().splitlines()[1])["operatorPropertiesJson"])["timeMode"]
               for f in files}
    return {"None" if mode == "NoTime" else mode for mode in written}


def _expected_alerts(sim: Simulation) -> list[dict[str, Any]]:
    return [a.to_dict() for a in detect([event_from_dict(e) for _, e in sim.events()]) if a.status == "resolved"]


def _kill_and_restart_onto_a_backlog(bootstrap: str, source: str, sim: Simulation, tmp_path: Path, *,
                                     open_at_kill: tuple[str, str] | None = None, time_mode: str = "None") -> None:
    """`sim`'s first minute read by `fleetwatch run` on `source`, 20 s more produced and the job killed -9
    while it reads them, the rest produced while it is down, the job started again under CAP: every
    alert line of the engine reading everything at once, each stored once, nothing late. `open_at_kill`:
    an alert line the store must hold when the job is killed (its resolution comes after the restart).
    `time_mode`: the one the checkpoint's stateful operator must have run in, before and after."""
    events = list(sim.events())
    expected = expected_lines(sim)
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    config_path = tmp_path / "fleetwatch.yaml"

    def write_config(**spark: Any) -> None:
        config_path.write_text(yaml.safe_dump({
            "bus": {"bootstrap_servers": bootstrap, "source": source},
            "store": {"url": store_url},
            "spark": {"master": "local[2]", "shuffle_partitions": 2, "trigger_ms": 500,
                      "checkpoint_dir": str(tmp_path / "checkpoint"), **spark},
        }))

    write_config()
    store = Store(store_url)
    log_path = tmp_path / "job.log"
    first = [e for e in events if e[1]["ts"] < START_MS + 60_000]
    produce(bootstrap, first)
    job = _run_job(config_path, log_path)
    try:
        assert poll(lambda: _batches_read(store) >= len(first), 240, "the first minute read", interval_s=0.5)
        if open_at_kill is not None:
            poll(lambda: open_at_kill in stored_lines(store), 60, f"{open_at_kill} stored", interval_s=0.5)
        # Mid-stream: more arrives and the job is killed while it works on it; the rest (2.5 minutes of the
        # fleet) lands on the bus while it is down.
        more = [e for e in events[len(first):] if e[1]["ts"] < START_MS + 80_000]
        produce(bootstrap, more)
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=30)
        produce(bootstrap, events[len(first) + len(more):])
        before = stored_lines(store)
        assert before < expected, "the kill came too late to test a restart"
        if open_at_kill is not None:
            assert (open_at_kill[0], "resolved") not in before, "the alert was resolved before the kill"
        write_config(max_records_per_batch=CAP)
        restarted_ms = int(time.time() * 1000)
        job = _run_job(config_path, log_path)
        poll(lambda: stored_lines(store) == expected, 300, "every expected alert after the restart", interval_s=0.5)
    finally:
        os.killpg(job.pid, signal.SIGTERM)
        job.wait(timeout=60)
    with store.engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(alert_history)) == len(expected)
        assert conn.scalar(select(func.count()).select_from(outbox)) == len(expected)
        assert conn.scalar(select(func.count()).select_from(quarantine).where(
            quarantine.c.reason == "late_event")) == 0, "on-time events quarantined as late"
        capped = conn.scalar(select(func.count()).select_from(pipeline_progress).where(
            pipeline_progress.c.recorded_at >= restarted_ms, pipeline_progress.c.input_rows >= CAP - 3 * 5))
    assert capped >= 3, f"the restart read its backlog in {capped} capped micro-batches"
    assert _operator_time_modes(tmp_path / "checkpoint" / QUERY_NAME) == {time_mode}
    if time_mode == "None":  # a new checkpoint: its buckets keyed as spread over its 2 shuffle partitions, throughout
        layout = (tmp_path / "checkpoint" / QUERY_NAME / "fleetwatch-layout").read_text()
        assert layout == CheckpointLayout.new(16, 2).text()


def _batches_read(store: Store) -> int:
    with store.engine.connect() as conn:
        return conn.scalar(select(func.coalesce(func.sum(pipeline_progress.c.input_rows), 0)))


@pytest.mark.parametrize("keyed_by", ["spread keys", "bucket numbers"])
def test_a_changed_bucket_count_stops_the_job_with_a_clear_error(spark, test_config, bus, tmp_path, keyed_by):
    # Shards map to buckets by count: state written with one count must not be read with another. A
    # checkpoint of this version says so before its query starts (its layout holds a key per bucket); one
    # of the versions up to 2026-12-01 (its buckets' numbers as keys) in its first batch, from the state.
    events = list(simulated_fleet(duration_ms=40_000).events())
    produce(bus.bootstrap, events[:len(events) // 2])
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")

    def config(buckets: int):
        return test_config.model_copy(update={"spark": test_config.spark.model_copy(update={
            "checkpoint_dir": str(tmp_path / "checkpoint"), "trigger_ms": 500, "state_buckets": buckets})})

    if keyed_by == "bucket numbers":
        location = tmp_path / "checkpoint" / QUERY_NAME
        location.mkdir(parents=True)
        (location / "fleetwatch-layout").write_text(CHECKPOINT_LAYOUT)
    job = start_live_query(spark, config(8), bus.bootstrap, store)
    query, recorder = job.query, job.recorder
    try:
        assert recorder.wait("fleetwatch", lambda s: s.input_rows > 0, timeout_s=120)
    finally:
        job.stop()
        spark.streams.removeListener(recorder)
    produce(bus.bootstrap, events[len(events) // 2:])
    if keyed_by == "spread keys":
        with pytest.raises(ConfigError, match=r"^the checkpoint's detection state has 8 buckets but "
                                              r"spark\.state_buckets is 4: set it back to 8"):
            start_live_query(spark, config(4), bus.bootstrap, store)
        assert spark.streams.active == []
        return
    job = start_live_query(spark, config(4), bus.bootstrap, store)
    query, recorder = job.query, job.recorder
    try:
        poll(lambda: not query.isActive, 120, "the job to refuse the checkpoint", interval_s=0.5)
        assert "has 8 buckets but spark.state_buckets is 4" in str(query.exception())
    finally:
        job.stop()
        spark.streams.removeListener(recorder)


class _OneKeyCounter(StatefulProcessor):
    """A stateful operator as the job of one detection stage had: one, and only one. (Pickled by
    value: Spark's Python workers cannot import this test module.)"""

    def init(self, handle) -> None:
        self.count = handle.getValueState("count", "count long")

    def handleInputRows(self, key, rows, timerValues):
        seen = sum(len(frame) for frame in rows)
        self.count.update(((self.count.get() or (0,))[0] + seen,))
        yield pd.DataFrame({"seen": [seen]})

    def close(self) -> None:
        pass


def _older_checkpoint(spark, location: str, passes: int) -> None:
    """A checkpoint with the stateful operators of an older job's detection (one, or two passes), committed."""
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    frame = spark.readStream.format("rate").option("rowsPerSecond", 50).load().withColumn("half", F.col("value") % 2)
    frame = frame.groupBy("half").transformWithStateInPandas(_OneKeyCounter(), "seen long", "Append", "None")
    if passes == 2:
        frame = frame.groupBy("seen").transformWithStateInPandas(_OneKeyCounter(), "seen long", "Append", "None")
    older = frame.writeStream.format("noop").option("checkpointLocation", location).start()
    try:
        poll(lambda: not older.isActive or (older.lastProgress or {}).get("numInputRows", 0) > 0,
             120, "the older query to commit state", interval_s=0.5)
        assert older.exception() is None
    finally:
        older.stop()


@pytest.mark.parametrize(("passes", "written_by"), [(1, "one detection stage"),
                                                    (2, "two stateful detection passes")])
def test_a_checkpoint_of_an_older_layout_is_refused_in_one_line(spark, test_config, bus, tmp_path, passes, written_by):
    # Spark refuses a checkpoint of one stateful operator for a query of another plan, in a Java stack
    # trace (STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA), and a checkpoint of the two-pass job
    # holds the second pass's state where this job no longer reads it: the job says what to do.
    config = test_config.model_copy(update={"spark": test_config.spark.model_copy(
        update={"checkpoint_dir": str(tmp_path / "checkpoint")})})
    location = checkpoint_path(config, QUERY_NAME)
    _older_checkpoint(spark, location, passes)
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    with pytest.raises(ConfigError, match=f"^the checkpoint {location} was written by a fleetwatch with "
                                          f"{written_by}, which this one cannot continue: move it aside"):
        start_live_query(spark, config, bus.bootstrap, store)
    assert spark.streams.active == []
    # A job that died in its first batch (a Python worker that missed Spark's connect-back, under
    # load) committed nothing: its checkpoint is claimed as a new one, once and for all.
    crashed = tmp_path / "crashed"
    shutil.copytree(location, crashed, ignore=shutil.ignore_patterns("commits"))
    layout = claim_checkpoint(spark, str(crashed), 16, 2)
    assert layout == CheckpointLayout.new(16, 2)
    assert (crashed / "fleetwatch-layout").read_text() == layout.text()
    shutil.copytree(Path(location) / "commits", crashed / "commits")
    assert claim_checkpoint(spark, str(crashed), 16, 2) == layout  # its own layout now: continued


def _live_fleet(now_ms: int) -> list[tuple[str, dict]]:
    """A fleet in wall-clock time (from 30 s ago to 4 min ahead, within the clock skew) whose first
    faulted cluster goes silent 45 s in: its alerts stay open at the end of the data. Sent at once,
    it is up to 4 min ahead of the job's clock: the job that reads it allows such leads
    (rules.max_source_lead_ms, `_FUTURE_FLEET_RULES`)."""
    sim = Simulation(FleetSpec(clusters=2, brokers=3, faults=("broker.heartbeat_lost",), start_ms=now_ms - 30_000,
                               duration_ms=270_000, seed=11, first_fault_ms=30_000, fault_every_ms=60_000))
    silent = sim.faults[0].cluster_id
    return [(topic, e) for topic, e in sim.events()
            if e.get("cluster_id") != silent or e["ts"] < now_ms + 15_000]


# The fleet above is stamped ahead of the wall clock to make a reset catch up in seconds; the lead
# bound (1 s by default, issue 26) would quarantine it, so it is the clock skew's here.
_FUTURE_FLEET_RULES = RuleSettings(max_source_lead_ms=300_000)


def _alert_rows(store: Store) -> dict[str, tuple]:
    with store.engine.connect() as conn:
        return {r.alert_id: (r.status, r.orphaned_at, r.ends_at, r.details.get("reason"), r.carried_over_at)
                for r in conn.execute(select(alerts))}


def _count_rows(store: Store, table) -> int:
    with store.engine.connect() as conn:
        return conn.scalar(select(func.count()).select_from(table))


def test_an_alert_open_before_a_checkpoint_reset_and_older_than_the_bus_is_carried_over_not_resolved(
        spark, test_config, tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")

    def run(bootstrap: str, checkpoint: str, done, what: str) -> None:
        config = test_config.model_copy(update={"spark": test_config.spark.model_copy(
            update={"checkpoint_dir": str(tmp_path / checkpoint), "trigger_ms": 500}),
            "rules": _FUTURE_FLEET_RULES})
        with SupervisedJob(spark, config, bootstrap, store) as job:
            poll(lambda: done(job.recorder.stats.get("fleetwatch")) or job.unexpected(), 240, what, interval_s=0.5)
            assert job.unexpected() is None
            if job.restarted_after:
                print(f"\n{what}: the query was started again after {job.restarted_after}")

    # 1. An old fleet on a bus since lost: its broker.heartbeat_lost is open when the job stops, and the
    # broker.stalled it escalated.
    old = [(topic, e) for topic, e in simulated_fleet(duration_ms=100_000, clusters=2).events()
           if e["ts"] < START_MS + 45_000]
    old_alerts = detect([event_from_dict(e) for _, e in old])
    old_open = {a.to_dict()["alert_id"] for a in old_alerts}
    assert sorted(a.rule for a in old_alerts) == ["broker.heartbeat_lost", "broker.stalled"]
    with EmbeddedBus(log_path=tmp_path / "tansu-old.log") as old_bus:
        produce(old_bus.bootstrap, old)
        run(old_bus.bootstrap, "checkpoint-a", lambda _: old_open <= _alert_rows(store).keys(), "the old alert")
    assert {a: row[0] for a, row in _alert_rows(store).items()} == dict.fromkeys(old_open, "firing")

    # 2. A new, empty checkpoint on a new bus that holds nothing as old as the alert (as after the
    # bus's retention): the new state cannot fire it again, so it is carried over, firing, once the
    # new state has caught up with the reset; the new fleet's alerts fire as usual.
    fleet = _live_fleet(int(time.time() * 1000))
    expected = {(a.to_dict()["alert_id"], a.status) for a in detect([event_from_dict(e) for _, e in fleet])}
    new_open = {a for a, status in expected if (a, "resolved") not in expected}
    assert new_open, "the new fleet must leave alerts open"
    with EmbeddedBus(log_path=tmp_path / "tansu-new.log") as bus:
        produce(bus.bootstrap, fleet)
        reset_at = int(time.time() * 1000)
        run(bus.bootstrap, "checkpoint-b",
            lambda _: all(_alert_rows(store)[a][4] is not None for a in old_open)
            and expected <= stored_lines(store),
            "the old alerts carried over and the new ones fired")
        rows = _alert_rows(store)
        carried_over_at = {}
        for old_id in old_open:
            status, orphaned_at, ends_at, reason, carried_over_at[old_id] = rows[old_id]
            assert (status, orphaned_at, ends_at, reason) == ("firing", None, None, None)
            assert reset_at <= carried_over_at[old_id] <= int(time.time() * 1000)
        assert stored_lines(store) == expected | {(a, "firing") for a in old_open}
        assert {a for a, row in rows.items() if row[0] == "firing"} == new_open | old_open
        with store.engine.connect() as conn:  # receivers are told nothing about them
            assert conn.scalar(select(func.count()).select_from(outbox).where(
                outbox.c.alert_id.in_(old_open), outbox.c.status == "resolved")) == 0
        sent = _count_rows(store, outbox)

        # 3. Another reset on the same bus: the new state reads the same telemetry, fires the open
        # alerts again with the same ids, carries the old one over again; nothing is resolved or sent.
        reset_again = int(time.time() * 1000)
        run(bus.bootstrap, "checkpoint-c",  # done once a batch ran past the reset: its writer settled it
            lambda stats: stats is not None and (stats.watermark_ms or 0) > reset_again,
            "the new state to catch up with the second reset")
        rows = _alert_rows(store)
        assert all(row[1] is None for row in rows.values())
        assert {a for a, row in rows.items() if row[0] == "firing"} == new_open | old_open
        assert {a: rows[a][4] for a in old_open} == carried_over_at
        assert _count_rows(store, outbox) == sent
