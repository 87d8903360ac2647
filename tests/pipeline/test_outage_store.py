"""A PostgreSQL outage under `fleetwatch run` (issue 19), with real processes: the job starts while
the database is down and waits for it, then the database is killed for 30 s mid-stream. The job
must carry on, and the alerts in the store must equal those of the same events replayed: nothing
lost, nothing repeated. Slow (about two minutes): it runs in `make test`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from sqlalchemy import func, select
from support.live_fleet import expected_lines, produce, simulated_fleet, stored_lines

from streaming.bus import EmbeddedBus
from streaming.records import topics
from streaming.store import Store, alert_history, outbox
from streaming.workshop.polling import poll
from streaming.workshop.postgres import PostgresServer, pg_binaries

pytestmark = [pytest.mark.spark, pytest.mark.broker]

OUTAGE_S = 30


class DurablePostgres(PostgresServer):
    """The test server, but its commits are durable (synchronous_commit on): an immediate stop is a
    crash, and the test must not lose what PostgreSQL acknowledged, only what it never had."""

    def start(self) -> DurablePostgres:
        self._run(str(self.bin_dir / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
                  "--no-sync", "-E", "UTF8", "--locale=C")
        self.resume()
        return self

    def resume(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50"
        self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.log),
                  "-w", "-t", "60", "start")

    def kill(self) -> None:
        """Down at once, as in a crash: every connection is cut."""
        self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")


def _job_lines(log_path: Path, msg: str) -> list[dict]:
    out = []
    for line in log_path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and record.get("msg") == msg:
                out.append(record)
    return out


def test_the_job_rides_out_a_postgresql_outage_losing_and_repeating_nothing(tmp_path):
    bin_dir = pg_binaries()
    assert bin_dir is not None, "PostgreSQL binaries (initdb, pg_ctl) are needed: apt-get install postgresql"
    sim = simulated_fleet(duration_ms=240_000)
    events = list(sim.events())
    expected = expected_lines(sim)
    pg = DurablePostgres(bin_dir).start()
    job = None
    try:
        url = pg.create_database()
        pg.kill()  # down before the job starts
        with EmbeddedBus(partitions={topics.HEARTBEATS: 2, topics.METADATA: 2},
                         log_path=tmp_path / "tansu.log") as bus:
            config_path = tmp_path / "fleetwatch.yaml"
            config_path.write_text(yaml.safe_dump({
                "bus": {"bootstrap_servers": bus.bootstrap, "source": "python"},  # Tansu: see bus.source
                "store": {"url": url},
                "spark": {"master": "local[2]", "shuffle_partitions": 2, "trigger_ms": 500,
                          "checkpoint_dir": str(tmp_path / "checkpoint")},
            }))
            log_path = tmp_path / "job.log"
            job = subprocess.Popen([sys.executable, "-m", "streaming.cli", "run", "--config", str(config_path)],
                                   stdout=log_path.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
                                   env={**os.environ, "PYSPARK_PYTHON": sys.executable})
            poll(lambda: len(_job_lines(log_path, "store unavailable, retrying")) >= 2, 60,
                 "the job to wait for the database at start", interval_s=0.5)
            assert job.poll() is None, "the job gave up while the database was down"
            pg.resume()
            store = Store(url)
            half = len(events) // 2
            produce(bus.bootstrap, events[:half])
            poll(lambda: stored_lines(store), 240, "the first alerts", interval_s=0.5)

            # Mid-stream: the database dies, the second half arrives meanwhile.
            retries_before = len(_job_lines(log_path, "store unavailable, retrying"))
            assert stored_lines(store) < expected, "the second half must hold alerts still to come"
            pg.kill()
            down_at = time.monotonic()
            produce(bus.bootstrap, events[half:])
            while time.monotonic() - down_at < OUTAGE_S:
                assert job.poll() is None, "the job died with the database"
                time.sleep(1)  # the outage lasts OUTAGE_S; the job is watched meanwhile
            pg.resume()
            back_at = time.monotonic()
            poll(lambda: stored_lines(store) == expected, 180, "every expected alert after the outage", interval_s=0.5)
            caught_up_s = time.monotonic() - back_at
            assert job.poll() is None
            with store.engine.connect() as conn:
                assert conn.scalar(select(func.count()).select_from(alert_history)) == len(expected)
                assert conn.scalar(select(func.count()).select_from(outbox)) == len(expected)
            retries = _job_lines(log_path, "store unavailable, retrying")[retries_before:]
            # Rate-limited: backoff 0.5, 1, 2, 4, 8, then every 10 s: a handful of lines for 30 s.
            assert 1 <= len(retries) <= 10, [r.get("retry_in_s") for r in retries]
            store.close()
            job.send_signal(signal.SIGTERM)  # to the driver only, as systemd's KillMode=mixed does
            assert job.wait(timeout=90) == 0
            print(f"\nPostgreSQL down {OUTAGE_S} s mid-stream: {len(expected)} alert lines expected, "
                  f"{len(expected)} stored once each (0 lost, 0 repeated); {len(retries)} retry log lines; "
                  f"caught up {caught_up_s:.1f} s after PostgreSQL was back")
    finally:
        if job is not None and job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(timeout=30)
        pg.stop()


def test_the_submitted_driver_serving_metrics_waits_for_a_database_that_is_down(tmp_path):
    # The Spark Operator's driver (`streaming.ops.submit --metrics-port`) opens the store for
    # /metrics before `run` starts: with the database down it must wait, as `run` does, not crash.
    from streaming.plumbing.ports import free_port

    down = f"postgresql+psycopg://fleetwatch@127.0.0.1:{free_port()}/fleetwatch"  # nothing listens there
    config_path = tmp_path / "fleetwatch.yaml"
    config_path.write_text(yaml.safe_dump({
        "bus": {"bootstrap_servers": "127.0.0.1:9", "source": "python"}, "store": {"url": down},
        "spark": {"master": "local[1]", "checkpoint_dir": str(tmp_path / "checkpoint")}}))
    log_path = tmp_path / "driver.log"
    driver = subprocess.Popen([sys.executable, "-m", "streaming.ops.submit", "--config", str(config_path),
                               "--metrics-port", str(free_port())],
                              stdout=log_path.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
                              env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    try:
        retries = poll(lambda: [r for r in _job_lines(log_path, "store unavailable, retrying")
                                 if r.get("what") == "open the store"][1:] or driver.poll() is not None,
                        120, "the driver to wait for the database", interval_s=0.5)
        assert driver.poll() is None, f"the driver exited ({driver.returncode}):\n{log_path.read_text()[-2000:]}"
        assert retries
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
