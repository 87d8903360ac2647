"""`fleetwatch run` keeps its query running (issue 26): real Apache Kafka 4.4 as the bus, read by
Spark's kafka connector (`source: auto`), the job as a subprocess, a real SQLite store.

- A driver killed with `kill -9` mid-stream and started again on its checkpoint is the short
  rehearsal's (tests/ops/test_deploy_standalone.py: the connector on a 3-node real Kafka bus, every
  alert delivered once); the embedded default's is tests/job/test_live.py's.
- A Python worker of Spark stopped (SIGSTOP) mid-batch hangs the query without failing it: the
  job sees the micro-batch stuck past `spark.restarts.stalled_after_ms`, stops the query and
  restarts it, and the alerts keep coming.
- A Python worker of Spark killed mid-batch (as the OOM killer would) fails the query: the job
  restarts it, counts the restart in `/metrics`, and the alerts keep coming. SIGTERM still stops
  it gracefully, and a source switch on its checkpoint still ends `run` at once with exit 2.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import yaml
from support.live_fleet import expected_lines, produce, simulated_fleet, stored_lines

from streaming.plumbing.ports import free_port
from streaming.source import SPARK_SOURCE
from streaming.store import Store
from streaming.workshop.polling import poll

pytestmark = [pytest.mark.real_kafka, pytest.mark.spark]


class Job:
    """`fleetwatch run` as a subprocess in its own process group, its JSON log lines in a file."""

    def __init__(self, tmp_path: Path, bootstrap: str, *, source: str = "auto",
                 stalled_after_ms: int = 600_000) -> None:
        self.config = tmp_path / f"fleetwatch-{source}.yaml"
        self.store_url = f"sqlite:///{tmp_path / 'store.db'}"
        self.config.write_text(yaml.safe_dump({
            "bus": {"bootstrap_servers": bootstrap, "source": source},
            "store": {"url": self.store_url},
            "spark": {"master": "local[2]", "shuffle_partitions": 2, "trigger_ms": 500,
                      "checkpoint_dir": str(tmp_path / "checkpoint"),
                      "restarts": {"stalled_after_ms": stalled_after_ms}},
        }))
        self.checkpoint = tmp_path / "checkpoint" / "fleetwatch"
        self.log = tmp_path / "job.log"
        self.metrics_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Job:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streaming.cli", "run", "--config", str(self.config),
             "--metrics-port", str(self.metrics_port), "--metrics-host", "127.0.0.1"],
            stdout=self.log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable})
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def lines(self, msg: str) -> list[dict]:
        """The job's log records whose message is `msg`, or starts with it when it ends with ':'."""
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict) and (record.get("msg") == msg or (
                        msg.endswith(":") and str(record.get("msg", "")).startswith(msg))):
                    out.append(record)
        return out

    def committed_batches(self) -> int:
        commits = self.checkpoint / "commits"
        return sum(1 for p in commits.iterdir() if p.name.isdigit()) if commits.exists() else 0

    def metric(self, name: str) -> float:
        """The sum of a family's samples in the job's /metrics."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as response:
            text = response.read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name) and line[len(name)] in " {")

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def terminate(self, timeout_s: float = 90) -> int:
        """SIGTERM to the driver only (as systemd's KillMode=mixed does); its exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout_s)

    def cleanup(self) -> None:
        if self.running:
            assert self.proc is not None
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


@pytest.fixture
def job_factory(tmp_path: Path) -> Iterator[list[Job]]:
    jobs: list[Job] = []
    yield jobs
    for job in jobs:
        job.cleanup()


def _thirds(items: list) -> tuple[list, list, list]:
    third = len(items) // 3
    return items[:third], items[third:2 * third], items[2 * third:]


def _python_workers(job: Job) -> list[psutil.Process]:
    """The Python workers of the job's Spark: forked by its daemon (`spark.python.daemon.module`),
    they have their parent's command line."""
    assert job.proc is not None
    found = []
    for proc in psutil.Process(job.proc.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            parent = proc.parent()
            if parent is not None and "-m" in proc.cmdline() and proc.cmdline() == parent.cmdline():
                found.append(proc)
    return found


def _kill_workers(job: Job) -> bool:
    """Kill every Python worker of the job's Spark, as the OOM killer would; True once the query failed."""
    for proc in _python_workers(job):
        with contextlib.suppress(psutil.Error):
            proc.kill()
    return bool(job.lines("streaming query failed: restarting it from its checkpoint"))


def test_a_failed_query_is_restarted_and_counted_and_a_stop_or_a_config_error_is_not(kafka_bus, tmp_path,
                                                                                     job_factory):
    sim = simulated_fleet(duration_ms=240_000, clusters=4)
    expected = expected_lines(sim)
    first, second, rest = _thirds(list(sim.events()))
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    produce(kafka_bus, first)
    job = Job(tmp_path, kafka_bus).start()
    job_factory.append(job)
    poll(lambda: job.committed_batches() and _python_workers(job), 240, "a committed batch", interval_s=0.5)
    # `source: auto` on real Kafka reads with Spark's connector, and says so in one line.
    assert [r["source"] for r in job.lines("telemetry source:")] == [SPARK_SOURCE]
    produce(kafka_bus, second)
    failed_at = time.monotonic()
    poll(lambda: _kill_workers(job) or not job.running, 120, "the query to fail and restart", interval_s=1)
    assert job.running
    failure = job.lines("streaming query failed: restarting it from its checkpoint")[0]
    assert failure["restarts"] == 1 and failure["delay_s"] == 1
    assert "\n" not in failure["error"]
    produce(kafka_bus, rest)
    poll(lambda: stored_lines(store) == expected, 300, "every expected alert after the restart", interval_s=0.5)
    recovered_s = time.monotonic() - failed_at
    assert job.running
    assert job.metric("fleetwatch_job_restarts_total") >= 1
    assert job.metric("fleetwatch_job_last_failure_timestamp_seconds") > 0
    restarted = len(job.lines("streaming query failed: restarting it from its checkpoint"))
    assert job.terminate() == 0  # a stop is no failure: no restart, exit 0
    assert len(job.lines("streaming query failed: restarting it from its checkpoint")) == restarted

    # A restart cannot fix a config error: the checkpoint was started by Spark's connector.
    switched = Job(tmp_path, kafka_bus, source="python")
    job_factory.append(switched)
    started = time.monotonic()
    switched.start()
    assert switched.proc is not None
    assert switched.proc.wait(timeout=180) == 2
    ended = switched.log.read_text(errors="replace").splitlines()
    assert any("cannot switch sources" in line for line in ended[-3:])
    print(f"\nPython workers killed: query restarted, every alert in the store {recovered_s:.1f} s after the "
          f"kill; a source switch ended run with exit 2 in {time.monotonic() - started:.1f} s")


# Past any batch of this fleet once the job is warm (a few seconds each): at 30 s, a real batch of
# a job started beside two other lanes of `make test` (load 17 on 2 cores) ran past it first.
STALLED_AFTER_MS = 45_000


def test_a_query_stuck_on_a_stopped_python_worker_is_restarted(kafka_bus, tmp_path, job_factory):
    sim = simulated_fleet(duration_ms=240_000, clusters=4)
    expected = expected_lines(sim)
    first, second, rest = _thirds(list(sim.events()))
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    produce(kafka_bus, first)
    job = Job(tmp_path, kafka_bus, stalled_after_ms=STALLED_AFTER_MS).start()
    job_factory.append(job)
    poll(lambda: job.committed_batches() and _python_workers(job), 240, "a committed batch", interval_s=0.5)
    stopped: set[psutil.Process] = set()

    def stop_workers() -> bool:
        """SIGSTOP every Python worker there is (a worker that stops answering, not one that dies);
        True once the job said its query stalled."""
        for proc in _python_workers(job):
            with contextlib.suppress(psutil.Error):
                proc.suspend()
                stopped.add(proc)
        return bool(job.lines("streaming query failed: restarting it from its checkpoint"))

    stopped_at = time.monotonic()
    produce(kafka_bus, second)
    try:
        poll(lambda: stop_workers() or not job.running, STALLED_AFTER_MS / 1000 + 150,
             "the stuck query to be restarted", interval_s=0.5)
    finally:
        for proc in stopped:  # what Spark did not kill when it stopped the query goes on
            with contextlib.suppress(psutil.Error):
                proc.resume()
    assert job.running
    (stall,) = job.lines("streaming query failed: restarting it from its checkpoint")
    assert stall["error"].startswith("streaming query stalled: a micro-batch has run for more than "
                                     f"{STALLED_AFTER_MS // 1000} s"), stall
    assert time.monotonic() - stopped_at >= STALLED_AFTER_MS / 1000
    produce(kafka_bus, rest)
    poll(lambda: stored_lines(store) == expected, 300, "every expected alert after the restart", interval_s=0.5)
    recovered_s = time.monotonic() - stopped_at
    assert job.metric("fleetwatch_job_restarts_total") == 1
    assert job.terminate() == 0
    print(f"\nPython workers stopped: the stuck query was restarted and every alert in the store "
          f"{recovered_s:.1f} s after the stop")
