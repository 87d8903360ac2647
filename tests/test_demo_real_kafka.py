"""`fleetwatch demo --real-kafka` (what `make demo` runs): a real Kafka 4.4 fault reaches the store and the receiver.

The demo runs as a real subprocess without a terminal; its real cluster (1 controller, 3 brokers,
JVMs from the Maven Central jars) freezes broker 3 with SIGSTOP 45 s after it is up, for 25 s.
The alert must name the cluster the probe reports for target `real-kafka-4.4`, be delivered to the
demo's receiver, and resolve once the broker is thawed; Ctrl-C must leave no Kafka JVM behind.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import psutil
import pytest
from test_demo_terminal import ROOT, ctrl_c, descendants, wait_until
from test_deploy_support import free_port

pytestmark = [pytest.mark.real_kafka, pytest.mark.spark, pytest.mark.broker]

HEARTBEAT_LOST = """
SELECT a.alert_id, a.status FROM alerts a JOIN targets t ON t.last_cluster_id = a.cluster_id
WHERE t.target = 'real-kafka-4.4' AND a.rule = 'broker.heartbeat_lost' AND a.broker_id = 3
"""


def _rows(db: Path) -> list[tuple[str, str]]:
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
            return conn.execute(HEARTBEAT_LOST).fetchall()
    except sqlite3.OperationalError:  # not created yet
        return []


def test_a_real_frozen_broker_in_the_demo_is_alerted_delivered_and_resolved(tmp_path: Path) -> None:
    workdir, out = tmp_path / "demo", tmp_path / "demo.out"
    with open(out, "wb") as sink:
        demo = subprocess.Popen(
            [sys.executable, "-m", "streaming.cli", "demo", "--clusters", "2", "--brokers", "3",
             "--port", str(free_port()), "--workdir", str(workdir), "--real-kafka"],
            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable}, start_new_session=True)
    family: set[psutil.Process] = set()
    try:
        wait_until("the real cluster up", lambda: b"real Kafka cluster up" in out.read_bytes(), 300, demo,
                   out.read_text)
        family |= descendants(demo)  # the Kafka JVMs run in sessions of their own
        firing = wait_until("broker 3's heartbeat_lost", lambda: _rows(workdir / "fleetwatch.db"), 180, demo,
                            out.read_text)
        alert_id = firing[0][0]

        def received(status: str) -> bool:
            path = workdir / "received.jsonl"
            return path.exists() and any(
                json.loads(line)["alert"]["alert_id"] == alert_id and json.loads(line)["alert"]["status"] == status
                for line in path.read_text().splitlines())

        wait_until("the firing alert at the receiver", lambda: received("firing"), 60, demo, out.read_text)
        wait_until("the alert resolved and delivered", lambda: received("resolved"), 120, demo, out.read_text)
    finally:
        code = ctrl_c(demo, family)
    assert code == 0
