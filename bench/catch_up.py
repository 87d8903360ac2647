"""A job restarted onto a backlog bigger than one micro-batch (issue 41), at fleet scale.

    .venv/bin/python bench/catch_up.py [--clusters 1000] [--brokers 12] [--down-s 60] [--cap N] [--json]

Every part is a process of its own, as in production: an embedded Tansu bus, the simulated fleet live
with no fault (`fleetwatch simulate --faults none --bootstrap`: so every alert is a false one), and
`fleetwatch run` on a SQLite store. The job runs until it has caught up with the fleet, is killed -9,
stays down `--down-s` seconds while the fleet goes on, and is started again on its checkpoint: it reads
the backlog (the fleet's rate times the outage) in micro-batches capped by `spark.max_records_per_batch`
(`--cap`, default the job's own 200,000).

Prints: the backlog; the micro-batches of the catch-up and how many the cap cut; how long the job took
from its restart to the fleet's present (a micro-batch under the cap with its watermark within the
allowed lateness and 15 s of the wall clock); the alert lines stored (all false); the events
quarantined as late. Exit status 1 when an alert or a late event was stored.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from sqlalchemy import func, select

from streaming.bus import EmbeddedBus
from streaming.config import FleetwatchConfig
from streaming.plumbing import clock
from streaming.records import topics
from streaming.store import Store, alert_history, pipeline_progress, quarantine
from streaming.workshop.polling import poll

ROOT = Path(__file__).resolve().parents[1]
LATENESS_MS = FleetwatchConfig().rules.allowed_lateness_ms
CAUGHT_UP_MS = LATENESS_MS + 15_000


def _spawn(args: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    return subprocess.Popen([sys.executable, "-m", "streaming.cli", *args], cwd=ROOT, env=env,
                            stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)


def _kill9(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)


def _batches(store: Store, since_ms: int) -> list[tuple[int, int | None]]:
    """(input rows, Spark's watermark) of the micro-batches recorded since `since_ms`, in order."""
    with store.engine.connect() as conn:
        return [(r.input_rows, r.watermark_ms) for r in conn.execute(
            select(pipeline_progress.c.input_rows, pipeline_progress.c.watermark_ms)
            .where(pipeline_progress.c.recorded_at >= since_ms).order_by(pipeline_progress.c.id))]


def _caught_up(store: Store, since_ms: int, cap: int) -> bool:
    batches = _batches(store, since_ms)
    return bool(batches) and batches[-1][0] < cap and (batches[-1][1] or 0) >= clock.now_ms() - CAUGHT_UP_MS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--brokers", type=int, default=12)
    parser.add_argument("--down-s", type=float, default=60.0, help="how long the job stays down (default 60)")
    parser.add_argument("--cap", type=int, default=FleetwatchConfig().spark.max_records_per_batch,
                        help="spark.max_records_per_batch (default the job's own)")
    parser.add_argument("--timeout-s", type=float, default=1200.0, help="for each catch-up (default 1200)")
    parser.add_argument("--json", action="store_true", help="also print the result as one JSON line")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="fleetwatch-catch-up-"))
    started = time.monotonic()

    def log(text: str) -> None:
        print(f"[{time.monotonic() - started:7.1f} s] {text}", file=sys.stderr, flush=True)

    log(f"work folder {workdir}")
    with EmbeddedBus(partitions={t: 2 for t in topics.TELEMETRY}, log_path=workdir / "tansu.log") as bus:
        store_url = f"sqlite:///{workdir / 'store.db'}"
        config = workdir / "fleetwatch.yaml"
        config.write_text(yaml.safe_dump({
            "bus": {"bootstrap_servers": bus.bootstrap, "source": "python"},
            "store": {"url": store_url},
            "spark": {"checkpoint_dir": str(workdir / "checkpoint"), "max_records_per_batch": args.cap}}))
        fleet = _spawn(["simulate", "--clusters", str(args.clusters), "--brokers", str(args.brokers), "--faults",
                        "none", "--duration", "7200", "--bootstrap", bus.bootstrap], workdir / "fleet.log")
        job = _spawn(["run", "--config", str(config)], workdir / "job.log")
        store = Store(store_url)
        try:
            first_ms = clock.now_ms()
            poll(lambda: _caught_up(store, first_ms, args.cap), args.timeout_s, "the job caught up with the fleet",
                 interval_s=1.0)
            log("the job has caught up with the fleet; kill -9")
            _kill9(job)
            down_ms = clock.now_ms()
            time.sleep(args.down_s)  # the outage itself
            restart_ms = clock.now_ms()
            job = _spawn(["run", "--config", str(config)], workdir / "job.log")
            log(f"the job started again after {(restart_ms - down_ms) / 1000:.0f} s down")
            poll(lambda: _caught_up(store, restart_ms, args.cap), args.timeout_s, "the job caught up again",
                 interval_s=1.0)
            caught_s = (clock.now_ms() - restart_ms) / 1000
            batches = _batches(store, restart_ms)
            log(f"caught up {caught_s:.0f} s after the restart; 30 s more")
            poll(lambda: clock.now_ms() >= restart_ms + caught_s * 1000 + 30_000, 60, "30 s more", interval_s=1.0)
        finally:
            for process in (job, fleet):
                if process.poll() is None:
                    _kill9(process)
        with store.engine.connect() as conn:
            alerts = conn.scalar(select(func.count()).select_from(alert_history))
            late = conn.scalar(select(func.count()).select_from(quarantine).where(quarantine.c.reason == "late_event"))
    capped = [rows for rows, _ in batches if rows >= args.cap - 3 * 2 * len(topics.TELEMETRY)]
    backlog = sum(rows for rows, _ in batches)
    result = {"clusters": args.clusters, "brokers": args.brokers, "down_s": round((restart_ms - down_ms) / 1000, 1),
              "cap": args.cap, "backlog_rows": backlog, "batches": len(batches), "capped_batches": len(capped),
              "catch_up_s": round(caught_s, 1), "alert_lines": alerts, "late_events": late}
    print(f"{args.clusters} x {args.brokers}, job down {result['down_s']} s: read {backlog:,} records in "
          f"{len(batches)} micro-batches ({len(capped)} cut by the cap of {args.cap:,}), caught up "
          f"{caught_s:.0f} s after its restart; {alerts} alert lines stored (all false: the fleet is healthy), "
          f"{late} events quarantined as late")
    if args.json:
        print(json.dumps(result))
    return 1 if alerts or late else 0


if __name__ == "__main__":
    sys.exit(main())
