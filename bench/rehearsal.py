"""A rehearsal of the production topology on one machine (issue 26), as a table.

    .venv/bin/python bench/rehearsal.py [--rows ROW,...] [--json]

The topology (streaming/workshop/rehearsal/topology.py): a 3-node real Kafka 4.4 bus (replication 3) read by
Spark's kafka connector; PostgreSQL; the job submitted with deploy/spark/submit.sh to a Spark
standalone cluster (a master, 2 workers); two probes; two notifiers (one sends, by lease); the
dashboard under gunicorn; a simulated healthy fleet of 20 clusters for load; three real target
clusters (`frozen`: its controller's clock 10 s ahead; `cutoff`: 10 s behind; `misroute`); a real
HTTP receiver. Every process is kept running as systemd keeps a unit running.

Rows: a real fault opened on a target, then (but for the first three) kill -9 of one part while it is
open: the driver, a worker, one bus broker, PostgreSQL (down 60 s), the sending notifier, one probe.
Then resuming (issue 41; streaming/workshop/rehearsal/rows.py): the driver killed -9 and held down 60 s,
restarted onto a backlog it reads in micro-batches capped by the job's `spark.max_records_per_batch`
(1,000: the bus takes about 90 records/s; the row's note says how many micro-batches and how many
the cap cut, from the store's progress rows); both probes frozen (SIGSTOP) 20 s, then thawed: each
raises one `collector.silent` (expected) and no broker is paged for the time nobody watched; both
probes rolled as the Kubernetes Deployment rolls them (a new process, the old one stopped once the
new one is ready): no `collector.silent`; and a target removed while its fault's alerts fire: the
probes restarted without it resolve them (`target removed`), then restarted with every target.
Figures per row: the row's expected alerts (exact rule and subject: the fault's, and those the
disruption raises itself) seen at the receiver, firing and resolved; false positives; notifications
lost and duplicated (counted at the receiver); the alerts the row allows (true, not required) that
fired; the seconds from the fault to its first expected notification, and from the kill to it
(recovery). Exit status 1 when a row failed.
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
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from streaming.workshop.rehearsal import TARGET_REMOVED, Plan, Rehearsal, Topology  # noqa: E402 - after the path set-up

# The job's `spark.max_records_per_batch`: below the backlog of the job down 60 s, so that its catch-up
# takes several capped micro-batches (issue 41). Measured on this topology (20 simulated clusters of 3
# brokers, two probes of three targets, a round a second; 2026-11-29): the bus takes about 90 records/s,
# and a micro-batch of the running job reads 150 to 300 (2 to 3 s each), far below the cap; 60 s down
# and the driver's start (30 to 70 s at load 5 to 10) make 9,000 to 12,000.
BATCH_CAP = 1000

# (row name, target whose fault is open, what is done to the topology meanwhile: rows.DISRUPTIONS, or
# TARGET_REMOVED)
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
    ("job down 60 s (capped catch-up)", "frozen", "job down"),
    ("probes frozen 20 s", "cutoff", "probes frozen"),
    ("probes rolled out", "misroute", "probes rolled out"),
    ("target removed", "frozen", TARGET_REMOVED),
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
    topology = Topology(Plan(workdir, submit_options=options, max_records_per_batch=BATCH_CAP))
    rehearsal = Rehearsal(topology, alert_timeout_s=420, log=log)
    try:
        topology.start()
        log("topology started; waiting for the job's first view of every target")
        topology.wait_ready()
        ready_s = time.monotonic() - started
        log(f"ready after {ready_s:.0f} s")
        for name, target, what in rows:
            if what == TARGET_REMOVED:
                rehearsal.run_removal_row(name, target)
            else:
                rehearsal.run_row(name, target, *((what,) if what else ()))
        dashboard = topology.dashboard_up()
    finally:
        topology.stop()
    print(f"production rehearsal on one machine: ready in {ready_s:.0f} s, {len(rows)} rows, "
          f"{time.monotonic() - started:.0f} s in all; dashboard answering at the end: {dashboard}")
    print(f"{'row':<30} {'fault':<28} {'expected':>8} {'FP':>3} {'lost':>4} {'dup':>3} {'alert s':>7} "
          f"{'recover s':>9}  result")
    for row in rehearsal.rows:
        result = "ok" if row.ok else "FAILED" + (f": {row.failure}" if row.failure else "")
        extra = "".join(f" fp={row.false_positives}" if row.false_positives else "") + \
            (f" lost={row.lost}" if row.lost else "") + (f" allowed={row.allowed_seen}" if row.allowed_seen else "") + \
            (f" ({row.note})" if row.note else "")
        print(f"{row.name:<30} {row.fault:<28} {row.seen:>3}/{row.expected:<4} {len(row.false_positives):>3} "
              f"{len(row.lost):>4} {row.duplicated:>3} {_s(row.alert_s):>7} {_s(row.recover_s):>9}  {result}{extra}")
    if args.json:
        print(json.dumps([asdict(r) for r in rehearsal.rows]))
    return 0 if all(r.ok for r in rehearsal.rows) else 1


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


if __name__ == "__main__":
    sys.exit(main())
