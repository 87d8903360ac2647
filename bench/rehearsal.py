"""A rehearsal of the production topology on one machine (issue 26), as a table.

    .venv/bin/python bench/rehearsal.py [--rows ROW,...] [--json]

The topology (tests/support/rehearsal/topology.py): a 3-node real Kafka 4.4 bus (replication 3) read by
Spark's kafka connector; PostgreSQL; the job submitted with deploy/spark/submit.sh to a Spark
standalone cluster (a master, 2 workers); two probes; two notifiers (one sends, by lease); the
dashboard under gunicorn; a simulated healthy fleet of 20 clusters for load; three real target
clusters (`frozen`: its controller's clock 10 s ahead; `cutoff`: 10 s behind; `misroute`); a real
HTTP receiver. Every process is kept running as systemd keeps a unit running.

Rows: a real fault opened on a target, then (but for the first three) kill -9 of one part while it is
open: the driver, a worker, one bus broker, PostgreSQL (down 60 s), the sending notifier, one probe.
Figures per row: the fault's expected alerts (exact rule and subject) seen at the receiver, firing
and resolved; false positives; notifications lost and duplicated (counted at the receiver); the
seconds from the fault to its first expected notification, and from the kill to it (recovery).
Exit status 1 when a row failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "tests"):  # tests/support: the rehearsal's parts, shared with its test
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from support.rehearsal import Plan, Rehearsal, Topology  # noqa: E402 - after the path set-up

# (row name, target whose fault is open, what is killed)
ROWS = (
    ("baseline", "misroute", None),
    ("controller clock +10 s", "frozen", None),
    ("controller clock -10 s", "cutoff", None),
    ("kill -9 driver", "frozen", "driver"),
    ("kill -9 worker", "cutoff", "worker"),
    ("kill -9 bus broker", "misroute", "bus broker"),
    ("kill -9 postgres (60 s)", "frozen", "postgres"),
    ("kill -9 sending notifier", "cutoff", "sending notifier"),
    ("kill -9 probe", "misroute", "probe"),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--rows", help="comma list of row names to run (default: all): " +
                        ", ".join(name for name, _, _ in ROWS))
    parser.add_argument("--json", action="store_true", help="also print the rows as one JSON line")
    parser.add_argument("--driver-xss", metavar="SIZE",
                        help="the driver JVM's thread stack (-Xss), e.g. 16m (run 1 of 2026-11-27: the stream "
                             "thread died of a StackOverflowError in java.util.regex on this topology)")
    args = parser.parse_args(argv)
    rows = ROWS
    if args.rows:
        wanted = [r.strip() for r in args.rows.split(",")]
        unknown = sorted(set(wanted) - {name for name, _, _ in ROWS})
        if unknown:
            parser.error(f"unknown rows: {', '.join(unknown)}")
        rows = tuple(r for r in ROWS if r[0] in wanted)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    workdir = Path(tempfile.mkdtemp(prefix="fleetwatch-rehearsal-"))
    started = time.monotonic()

    def log(text: str) -> None:
        print(f"[{time.monotonic() - started:7.1f} s] {text}", file=sys.stderr, flush=True)

    log(f"work folder {workdir}")
    options = ("--conf", f"spark.driver.extraJavaOptions=-Xss{args.driver_xss}") if args.driver_xss else ()
    topology = Topology(Plan(workdir, submit_options=options))
    rehearsal = Rehearsal(topology, alert_timeout_s=420, log=log)
    try:
        topology.start()
        log("topology started; waiting for the job's first view of every target")
        topology.wait_ready()
        ready_s = time.monotonic() - started
        log(f"ready after {ready_s:.0f} s")
        for name, target, kill in rows:
            rehearsal.run_row(name, target, *((kill,) if kill else ()))
        dashboard = topology.dashboard_up()
    finally:
        topology.stop()
    print(f"production rehearsal on one machine: ready in {ready_s:.0f} s, {len(rows)} rows, "
          f"{time.monotonic() - started:.0f} s in all; dashboard answering at the end: {dashboard}")
    print(f"{'row':<26} {'fault':<28} {'expected':>8} {'FP':>3} {'lost':>4} {'dup':>3} {'alert s':>7} "
          f"{'recover s':>9}  result")
    for row in rehearsal.rows:
        result = "ok" if row.ok else "FAILED" + (f": {row.failure}" if row.failure else "")
        extra = "".join(f" fp={row.false_positives}" if row.false_positives else "") + \
            (f" lost={row.lost}" if row.lost else "")
        print(f"{row.name:<26} {row.fault:<28} {row.seen:>3}/{row.expected:<4} {len(row.false_positives):>3} "
              f"{len(row.lost):>4} {row.duplicated:>3} {_s(row.alert_s):>7} {_s(row.recover_s):>9}  {result}{extra}")
    if args.json:
        print(json.dumps([asdict(r) for r in rehearsal.rows]))
    return 0 if all(r.ok for r in rehearsal.rows) else 1


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


if __name__ == "__main__":
    sys.exit(main())
