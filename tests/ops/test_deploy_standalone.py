"""The job on a real Spark standalone cluster, submitted the way production submits it.

A master and a worker from the installed PySpark (`spark-class ...deploy.master.Master` and
`...deploy.worker.Worker`) on 127.0.0.1; `deploy/spark/submit.sh` runs the job on them (client
mode, the config's own `spark.master` deliberately says local: spark-submit's master must win)
against an embedded Tansu bus holding a simulated fleet with a stopped broker. The store is a real
PostgreSQL (the session's server). Then: the alert is in the store,
the application ran on the standalone cluster with executors, the driver's /metrics shows it, and
SIGTERM stops the job gracefully (exit 0, the application FINISHED on the master).

One cluster (a master, two workers of one core) serves the module's tests, one after the other, as
one cluster serves many applications in production; every test names its own application.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml
from kafka import KafkaProducer
from sqlalchemy import func, select
from support.reference import reference_alerts
from support.spark_standalone import SPARK_HOME, Standalone, kill_session, session_alive

from streaming import topics
from streaming.bus import EmbeddedBus
from streaming.collect.simulate import FAULT_KINDS, FleetSpec, Simulation, write_events
from streaming.config import FleetwatchConfig
from streaming.job import replay_file
from streaming.polling import poll
from streaming.ports import free_port
from streaming.store import Store, alerts, quarantine

pytestmark = [pytest.mark.spark, pytest.mark.broker]

ROOT = Path(__file__).resolve().parents[2]
START_MS = 1_764_000_000_000


def _produce(producer: KafkaProducer, events) -> None:
    for topic, event in events:
        producer.send(topic, key=(event.get("cluster_id") or "").encode(), value=json.dumps(event).encode())
    producer.flush()


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


@pytest.fixture
def store_url(postgres):
    return postgres.create_database("standalone")  # the session's server (tests/conftest.py)


def test_standalone_cluster_runs_the_submitted_job_until_sigterm(tmp_path, store_url, cluster):
    sim = Simulation(FleetSpec(clusters=3, brokers=3, faults=("broker.heartbeat_lost",), start_ms=START_MS,
                               duration_ms=90_000, seed=11, first_fault_ms=30_000, fault_every_ms=60_000))
    # The outage's alert as the oracle of the rules (the reference detector) reads the stream: its resolved line.
    outage = next(a for a in reference_alerts([json.dumps(ev) for _, ev in sim.events()])
                  if a["rule"] == "broker.heartbeat_lost" and a["status"] == "resolved")
    store = Store(store_url)
    job = producer = None
    try:
        with EmbeddedBus(log_path=tmp_path / "tansu.log") as bus:
            events = list(sim.events())
            # First the stream up to the outage (the alert fires), later the rest (it resolves).
            split = next(i for i, (_, e) in enumerate(events) if e["ts"] >= outage["ends_at"] - 2000)
            producer = KafkaProducer(bootstrap_servers=bus.bootstrap, linger_ms=5)
            _produce(producer, events[:split])
            producer.send(topics.HEARTBEATS, value=b"\x00{not json")  # PostgreSQL refuses NUL in text
            producer.flush()

            config = tmp_path / "fleetwatch.yaml"
            config.write_text(yaml.safe_dump({
                "bus": {"bootstrap_servers": bus.bootstrap, "source": "python"},  # Tansu: see bus.source
                "store": {"url": store_url},
                # Not the standalone master: spark-submit's --master must override it.
                "spark": {"master": "local[1]", "checkpoint_dir": str(tmp_path / "checkpoint"), "trigger_ms": 500,
                          "shuffle_partitions": 2},
            }))
            metrics_port = free_port()
            env = {**os.environ, "FLEETWATCH_PYTHON": sys.executable, "SPARK_HOME": str(SPARK_HOME),
                   "SPARK_LOCAL_IP": "127.0.0.1",
                   "FLEETWATCH_KAFKA_PACKAGE": ""}  # a Tansu bus: the job's own Kafka reader
            job_log = tmp_path / "job.log"
            job = subprocess.Popen(
                ["bash", str(ROOT / "deploy" / "spark" / "submit.sh"), "--master", cluster.url,
                 "--config", str(config), "--metrics-port", str(metrics_port), "--",
                 "--conf", "spark.executor.memory=512m", "--conf", "spark.cores.max=2",
                 "--conf", "spark.driver.memory=768m", "--conf", "spark.ui.enabled=false"],
                env=env, stdout=job_log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)

            def alert_in_store():
                assert job.poll() is None, f"the job exited early:\n{job_log.read_text()[-3000:]}"
                with store.engine.connect() as conn:
                    return conn.execute(select(alerts).where(
                        alerts.c.rule == "broker.heartbeat_lost", alerts.c.cluster_id == outage["cluster_id"],
                        alerts.c.broker_id == outage["broker_id"])).first()

            row = poll(alert_in_store, 200, "broker.heartbeat_lost in the store", interval_s=0.5)
            assert row.starts_at == outage["starts_at"] and row.status == "firing"

            # It ran on the standalone cluster, with executors granted by the worker.
            apps = cluster.state()["activeapps"]
            assert [a["name"] for a in apps] == ["fleetwatch"], apps
            assert apps[0]["cores"] >= 1
            with store.engine.connect() as conn:
                reasons = dict(conn.execute(select(quarantine.c.reason, func.count())
                                            .group_by(quarantine.c.reason)).all())
            assert reasons == {"not_json": 1}

            firing = re.compile(rf'^fleetwatch_alerts_firing{{cluster_id="{outage["cluster_id"]}",target="[^"]*",'
                                r'rule="broker.heartbeat_lost",severity="critical"} 1$', re.M)
            # Progress reaches the store asynchronously, after the batch's sink has run.
            metrics = poll(lambda: (text := _text(f"http://127.0.0.1:{metrics_port}/metrics"))
                           and 'fleetwatch_pipeline_last_batch_id{query="fleetwatch"}' in text and text,
                           60, "the driver's /metrics with the pipeline's progress")
            assert "fleetwatch_store_up 1" in metrics
            assert firing.search(metrics), metrics

            # The broker comes back: the alert resolves, and its gauge goes away.
            _produce(producer, events[split:])
            poll(lambda: alert_in_store().status == "resolved", 120, "the alert to resolve")
            metrics = _text(f"http://127.0.0.1:{metrics_port}/metrics")
            assert not firing.search(metrics)
            assert 'fleetwatch_rule_alerts_firing{rule="broker.heartbeat_lost",severity="critical"} 0' in metrics

            # SIGTERM, as systemd or a terminal would send it: the job stops gracefully.
            os.kill(job.pid, signal.SIGTERM)
            assert job.wait(timeout=90) == 0, job_log.read_text()[-3000:]
            log_text = job_log.read_text()
            # The batch running at SIGTERM was finished and committed, not cut off.
            batches = tmp_path / "checkpoint" / "fleetwatch"
            planned = {f.name for f in (batches / "offsets").iterdir() if f.name.isdigit()}
            assert planned == {f.name for f in (batches / "commits").iterdir() if f.name.isdigit()}
            assert "SIGTERM -> Python driver" in log_text
            assert '"msg": "job stopped"' in log_text
            (finished,) = poll(lambda: _completed(cluster, "fleetwatch"), 30, "the application to complete")
            assert finished["state"] == "FINISHED"
            poll(lambda: not session_alive(job.pid), 30, "every process of the job to exit")
            producer.close(timeout=5)
            producer = None
    finally:
        if producer is not None:
            producer.close(timeout=5)
        if job is not None and job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(timeout=10)
        if job is not None:
            kill_session(job.pid)
        store.close()


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
