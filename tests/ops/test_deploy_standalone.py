"""The job on a real Spark standalone cluster, submitted the way production submits it.

A master and two workers from the installed PySpark (`spark-class ...deploy.master.Master` and
`...deploy.worker.Worker`) on 127.0.0.1; `deploy/spark/submit.sh` runs the job on them (client
mode) in the short rehearsal of the production topology (issue 26: a 3-node real Kafka bus, the
connector, PostgreSQL, a probe, a notifier, a real receiver, a real target with a frozen broker,
the driver and a bus broker killed while the fault is open). Then: every expected alert delivered
once, the application ran on the standalone cluster with executors, the driver's /metrics shows
it, and SIGTERM stops the job gracefully (exit 0, the application FINISHED on the master). A
replay on the cluster gives exactly the alerts of local mode.

One cluster (a master, two workers of one core) serves the module's tests, one after the other, as
one cluster serves many applications in production; every test names its own application.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import psutil
import pytest
import yaml
from kafka import KafkaProducer
from sqlalchemy import func, select

from streaming.collect.simulate import FAULT_KINDS, FleetSpec, Simulation, write_events
from streaming.config import FleetwatchConfig
from streaming.job import replay_file
from streaming.records import topics
from streaming.store import quarantine
from streaming.workshop.polling import poll
from streaming.workshop.rehearsal import Plan, Rehearsal, Topology, describe
from streaming.workshop.spark_standalone import Standalone, session_alive

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.real_kafka, pytest.mark.postgres]

START_MS = 1_764_000_000_000


def _json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def _text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read().decode()


def _ran_an_executor_of(worker: dict, app_id: str) -> bool:
    state = _json(f"{worker['webuiaddress']}/json/")
    return any(e["appid"] == app_id for e in state["executors"] + state["finishedexecutors"])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = Standalone(tmp_path_factory.mktemp("standalone"), workers=2).start()
    yield cluster
    cluster.stop()
    for proc in cluster.procs:
        assert not session_alive(proc.pid), "a Spark daemon or executor outlived the cluster"


def _completed(cluster: Standalone, name: str) -> list[dict]:
    return [a for a in cluster.state()["completedapps"] if a["name"] == name]


def test_the_submitted_job_rides_out_a_killed_driver_and_bus_broker_then_stops_on_sigterm(tmp_path, postgres,
                                                                                           cluster):
    # The short rehearsal of the production topology (issue 26; bench/rehearsal.py has the whole
    # table): a 3-node real Kafka 4.4 bus (topics replicated 3 times) read by Spark's kafka
    # connector, the job submitted with deploy/spark/submit.sh to this standalone cluster (the
    # config's own `spark.master` says local[2]: spark-submit's --master must win) and kept running
    # as systemd keeps its unit running, PostgreSQL, a probe, a notifier, a real HTTP receiver and
    # one real target cluster whose broker is frozen (SIGSTOP). While it is frozen, kill -9 of the
    # driver and of one bus broker at once (the service submits the job again while the bus has two
    # brokers; the broker is back 5 s later). One row, both kills: each row costs a driver start
    # and a fault's whole cycle.
    plan = Plan(tmp_path, standalone=cluster, probes=1, notifiers=1, dashboard=False, simulated_clusters=0,
                targets=("frozen",), target_brokers=2, clock_offsets={},
                store_url=postgres.create_database("rehearsal"))
    topology = Topology(plan)
    try:
        topology.start()
        topology.wait_ready()
        assert topology.store is not None and topology.job is not None
        with KafkaProducer(bootstrap_servers=topology.bus.bootstrap) as producer:
            producer.send(topics.HEARTBEATS, value=b"\x00{not json")  # PostgreSQL refuses NUL in text
            producer.flush()

        row = Rehearsal(topology, alert_timeout_s=420).run_row("driver + bus broker", "frozen", "driver",
                                                               "bus broker")
        assert row.failure is None, describe(row)
        assert row.seen == row.expected == 2, describe(row)  # broker.heartbeat_lost and broker.fenced
        assert row.false_positives == [], describe(row)
        assert row.lost == [] and row.duplicated == 0, describe(row)
        # The driver's service submitted it again (the kill ended the first run), and the killed broker is back.
        assert topology.job.starts == 2 and topology.job.exits == [-9]
        assert topology.bus.nodes[1].running

        # It runs on the standalone cluster, with an executor granted by each worker.
        (app,) = cluster.state()["activeapps"]
        assert app["name"] == "fleetwatch"
        poll(lambda: all(_ran_an_executor_of(w, app["id"]) for w in cluster.state()["workers"]), 60,
             "an executor of the job on each worker")
        # The config's JVM options reach the driver spark-submit started and the executors it asked for.
        options = FleetwatchConfig().spark
        assert options.driver_java_options in " ".join(_spark_submit_of(topology.job.proc.pid).cmdline())
        executors = [path.read_text(errors="replace").splitlines()[0]
                     for path in cluster.workdir.glob(f"work-*/{app['id']}/*/stderr")]
        assert len(executors) >= 2 and all(options.executor_java_options in line for line in executors), executors
        with topology.store.engine.connect() as conn:
            reasons = dict(conn.execute(select(quarantine.c.reason, func.count()).group_by(quarantine.c.reason)).all())
        assert reasons == {"not_json": 1}  # once, across the kill: the bad record is stored, nothing else is
        metrics = _text(f"http://127.0.0.1:{topology.metrics_port}/metrics")
        assert "fleetwatch_store_up 1" in metrics and 'fleetwatch_pipeline_last_batch_id{query="fleetwatch"}' in metrics
        assert 'fleetwatch_rule_alerts_firing{rule="broker.heartbeat_lost",severity="critical"} 0' in metrics

        # SIGTERM, as systemd or a terminal would send it: the job stops gracefully.
        topology.job.stop(timeout_s=90)
        assert topology.job.proc is not None and topology.job.proc.returncode == 0, _tail(topology.job.log_path)
        # The batch running at SIGTERM was finished and committed. The probe's telemetry never
        # pauses, so the next trigger may plan one more before the query stops: that one is cut off
        # uncommitted, and the next start runs it again (`stop_gracefully`); nothing before it is.
        batches = tmp_path / "checkpoint" / "fleetwatch"
        planned = sorted(int(f.name) for f in (batches / "offsets").iterdir() if f.name.isdigit())
        committed = sorted(int(f.name) for f in (batches / "commits").iterdir() if f.name.isdigit())
        assert committed == planned or committed == planned[:-1], (planned, committed)
        log_text = topology.job.log_path.read_text(errors="replace")
        assert "SIGTERM -> Python driver" in log_text and '"msg": "job stopped"' in log_text
        (finished,) = poll(lambda: [a for a in cluster.state()["completedapps"] if a["id"] == app["id"]], 30,
                           "the application to complete")
        assert finished["state"] == "FINISHED"
        assert not session_alive(topology.job.proc.pid)
    finally:
        topology.stop()


def _spark_submit_of(pid: int) -> psutil.Process:
    return next(p for p in psutil.Process(pid).children(recursive=True) if "SparkSubmit" in " ".join(p.cmdline()))


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:]


def test_two_standalone_workers_replay_exactly_the_alerts_of_local_mode(tmp_path, spark, cluster):
    # Scale-out keeps the alerts: the same file replayed on one machine's local[2] (the session's
    # Spark, in this process) and on a standalone cluster of two workers of one core each (its
    # buckets of detection state and its source's partitions on two executors) gives the same
    # alert lines, byte for byte.
    sim = Simulation(FleetSpec(clusters=6, brokers=3, faults=FAULT_KINDS, start_ms=START_MS, duration_ms=600_000,
                               seed=5, jitter_ms=800, first_fault_ms=20_000, fault_every_ms=30_000))
    events = tmp_path / "events.jsonl"
    write_events(sim, events)
    # Two source partitions and the default 16 buckets of state: work for both executors.
    settings = {"spark": {"max_records_per_batch": 20_000}}
    local = tmp_path / "local.jsonl"
    replay_file(events, local, FleetwatchConfig.model_validate(settings))
    config = tmp_path / "standalone.yaml"
    config.write_text(yaml.safe_dump({"spark": {**settings["spark"], "master": cluster.url}}))
    out = tmp_path / "standalone.jsonl"
    run = subprocess.run([sys.executable, "-m", "streaming.cli", "replay", "--config", str(config),
                          "--alerts-out", str(out), str(events)],
                         env={**cluster.env, "SPARK_LOG_DIR": str(tmp_path / "standalone")}, capture_output=True,
                         text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = {"local": local.read_text().splitlines(), "standalone": out.read_text().splitlines()}
    assert len(lines["local"]) > 20
    assert lines["standalone"] == lines["local"]
    # The replay did run on the cluster, with an executor on each worker.
    (app,) = poll(lambda: _completed(cluster, "fleetwatch_replay"), 30, "the replay's application to complete")
    assert app["state"] == "FINISHED"
    workers = cluster.state()["workers"]
    assert len(workers) == 2 and all(_ran_an_executor_of(worker, app["id"]) for worker in workers)
