"""What one micro-batch of the live job costs in CPU, whatever it holds (issue 28's fixed cost per
batch; issue 26's test time: a live job of the tests is mostly this).

    .venv/bin/python bench/batch_cost.py [--clusters 3] [--brokers 3] [--seconds 60] [--trigger-ms 1000]
                                         [--checkouts DIR,DIR...] [--state-buckets N,N...] [--json]

Per checkout, `fleetwatch run` (local[2], the Python reader) reads an embedded Tansu bus that a
simulated fleet is produced to at its real pace (its event times moved onto the wall clock, as a
probe would send them). Once the job has written its first micro-batch and run 20 s more, its
process tree's CPU (user + system) is measured over `--seconds`, by part (the Spark JVM, its Python
workers, the driver), with the micro-batches the job logged meanwhile. A small fleet keeps every
batch near the fixed cost; with a 1 s trigger the job runs back to back as soon as one batch costs
more than a second. Each process's CPU is read every half second; what a process uses after its last
reading, and processes the JVM forks and reaps between two readings, are not counted. Also
printed: the median wall time of the measured micro-batches, and of their Spark stages alone.

`--checkouts`: the job of each (a git worktree of another commit, e.g. `git worktree add
/tmp/base HEAD~1`; its code runs with this checkout's virtualenv), one after another on a quiet
machine; the first is the baseline of the ratios. Default: this checkout alone. `--state-buckets`: each
checkout's job once per count of detection's state buckets (`spark.state_buckets`; default: the
config's default), to see what the buckets cost a batch.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kafka import KafkaProducer  # noqa: E402 - after the path set-up

from streaming.bus import EmbeddedBus  # noqa: E402
from streaming.collect.simulate import FleetSpec, Simulation  # noqa: E402
from streaming.records import topics  # noqa: E402
from streaming.workshop.polling import poll  # noqa: E402

WARM_UP_S = 20
START_MS = 1_764_000_000_000


def _part(p: psutil.Process, job_pid: int) -> str:
    if p.pid == job_pid:
        return "driver (Python)"
    try:
        cmd = " ".join(p.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return "other"
    if "java" in p.name():
        return "Spark JVM"
    return "Spark Python workers" if "pyspark" in cmd or "spark_daemon" in cmd else "other"


class _TreeCpu(threading.Thread):
    """The CPU (user + system) a process tree uses from `start()` to `stop()`, by part, read every
    half second per process: a process that ends meanwhile keeps what it used until its last
    reading (the data source planners' workers end a minute into a query: a reading of the tree at
    both ends only would take their CPU before the window off the part's)."""

    def __init__(self, job: psutil.Process) -> None:
        super().__init__(daemon=True)
        self.job, self.stopping = job, threading.Event()
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.part_of: dict[int, str] = {}
        self._read(at_start=True)

    def _read(self, *, at_start: bool = False) -> None:
        for p in [self.job, *self.job.children(recursive=True)]:
            try:
                times = p.cpu_times()
                if p.pid not in self.part_of:  # a process's part (its command line) is read once
                    self.part_of[p.pid] = _part(p, self.job.pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            # A process first seen after the start was born after it: all its CPU is the window's.
            self.first.setdefault(p.pid, times.user + times.system if at_start else 0.0)
            self.last[p.pid] = times.user + times.system

    def run(self) -> None:
        while not self.stopping.wait(0.5):
            self._read()

    def stop(self) -> dict[str, float]:
        self.stopping.set()
        self.join()
        with contextlib.suppress(psutil.NoSuchProcess):
            self._read()
        out: dict[str, float] = defaultdict(float)
        for pid, used in self.last.items():
            out[self.part_of[pid]] += used - self.first[pid]
        return out


class _Feed(threading.Thread):
    """The fleet's events to the bus at their own pace, moved onto the wall clock."""

    def __init__(self, bootstrap: str, sim: Simulation) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.sim, self.stopping = bootstrap, sim, threading.Event()

    def run(self) -> None:
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=5)
        wall0 = time.time() * 1000
        for topic, event in self.sim.events():
            due = wall0 + event["ts"] - START_MS
            while not self.stopping.is_set() and time.time() * 1000 < due:
                self.stopping.wait(min(0.05, (due - time.time() * 1000) / 1000))
            if self.stopping.is_set():
                break
            event = {**event, "ts": int(due)}
            producer.send(topic, key=(event.get("cluster_id") or "").encode(), value=json.dumps(event).encode())
        producer.close()


def _batches(log: Path) -> int:
    return log.read_text(errors="replace").count('"batch progress"')


def _medians_ms(log: Path, skip: int) -> dict[str, float | None]:
    """The median wall time of the job's micro-batches after the first `skip` (Spark's trigger
    execution, from its "batch progress" lines) and of its stages (the writer's "stages_ms": the
    batch's Spark jobs, without the store write); None from a checkout that does not log them."""
    lines = [json.loads(line) for line in log.read_text(errors="replace").splitlines() if line.startswith("{")]

    def median(msg: str, field: str) -> float | None:
        values = [line[field] for line in lines if line.get("msg") == msg and field in line][skip:]
        return statistics.median(values) if values else None

    return {"batch_ms_median": median("batch progress", "duration_ms"),
            "stages_ms_median": median("batch written", "stages_ms")}


def _label(checkout: Path) -> str:
    rev = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         check=False).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, check=False).stdout.strip()
    return (rev + ("+" if dirty else "")) or checkout.name


def measure(checkout: Path, args: argparse.Namespace, buckets: int | None) -> dict[str, Any]:
    label = _label(checkout) + ("" if buckets is None else f" b={buckets}")
    work = Path(tempfile.mkdtemp(prefix="fleetwatch-batch-cost-"))
    bus = EmbeddedBus(partitions={t: 2 for t in topics.TELEMETRY}, log_path=work / "tansu.log")
    bus.start()
    sim = Simulation(FleetSpec(clusters=args.clusters, brokers=args.brokers, faults=("broker.heartbeat_lost",),
                               start_ms=START_MS, duration_ms=3_600_000, seed=7, first_fault_ms=30_000,
                               fault_every_ms=60_000))
    feed = _Feed(bus.bootstrap, sim)
    feed.start()
    config = work / "fleetwatch.yaml"
    config.write_text(yaml.safe_dump({
        "bus": {"bootstrap_servers": bus.bootstrap, "source": "python"},
        "store": {"url": f"sqlite:///{work / 'store.db'}"},
        "spark": {"master": "local[2]", "trigger_ms": args.trigger_ms, "checkpoint_dir": str(work / "checkpoint"),
                  **({} if buckets is None else {"state_buckets": buckets})}}))
    log = work / "job.log"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(checkout)}
    with log.open("wb") as out:
        job = subprocess.Popen([sys.executable, "-m", "streaming.cli", "run", "--config", str(config)], cwd=checkout,
                               stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        poll(lambda: _batches(log) > 0 or job.poll() is not None, 300, "the job's first micro-batch", interval_s=0.5)
        if job.poll() is not None:
            raise SystemExit(f"{label}: the job exited {job.returncode}: {log.read_text()[-2000:]}")
        print(f"{label}: first micro-batch written; warming up {WARM_UP_S} s, then {args.seconds} s measured",
              file=sys.stderr, flush=True)
        time.sleep(WARM_UP_S)  # a measurement window, not a synchronisation
        meter = _TreeCpu(psutil.Process(job.pid))
        batches_before, started = _batches(log), time.monotonic()
        meter.start()
        time.sleep(args.seconds)  # the measurement window
        parts, batches, wall = meter.stop(), _batches(log) - batches_before, time.monotonic() - started
    finally:
        feed.stopping.set()
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=30)
        bus.stop()
    total = sum(parts.values())
    return {**_medians_ms(log, batches_before), "checkout": label, "batches": batches, "wall_s": round(wall, 1),
            "cpu_s": round(total, 1),
            "cores": round(total / wall, 2), "cpu_s_per_batch": round(total / max(batches, 1), 2),
            "parts_cpu_s_per_batch": {k: round(v / max(batches, 1), 2) for k, v in sorted(parts.items())},
            "load_1m": round(os.getloadavg()[0], 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=3)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--trigger-ms", type=int, default=1000)
    parser.add_argument("--checkouts", default=str(ROOT),
                        help="comma-separated checkouts of fleetwatch whose job to measure; the first is the baseline")
    parser.add_argument("--state-buckets", default="",
                        help="comma-separated counts of state buckets, a run of each checkout's job per count")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = parser.parse_args()
    checkouts = [Path(c).resolve() for c in args.checkouts.split(",")]
    missing = [str(c) for c in checkouts if not (c / "streaming" / "cli.py").is_file()]
    if missing:
        parser.error(f"not a fleetwatch checkout: {', '.join(missing)}")
    counts = [int(n) for n in args.state_buckets.split(",") if n] or [None]
    rows = [measure(c, args, n) for c in checkouts for n in counts]
    if args.json:
        print(json.dumps({"fleet": f"{args.clusters}x{args.brokers}", "trigger_ms": args.trigger_ms, "rows": rows}))
        return 0
    base = rows[0]["cpu_s_per_batch"]
    print(f"fleet {args.clusters} x {args.brokers} at its real pace, trigger {args.trigger_ms} ms, "
          f"{args.seconds} s measured per checkout")
    print(f"{'checkout':<16} {'batches':>7} {'cores':>6} {'CPU-s/batch':>11} {'vs base':>7} {'batch ms':>8} "
          f"{'stages ms':>9}  by part (CPU-s/batch)")
    for row in rows:
        parts = ", ".join(f"{k} {v}" for k, v in row["parts_cpu_s_per_batch"].items())
        print(f"{row['checkout']:<16} {row['batches']:>7} {row['cores']:>6} {row['cpu_s_per_batch']:>11} "
              f"{row['cpu_s_per_batch'] / base:>7.2f} {row['batch_ms_median'] or '-':>8} "
              f"{row['stages_ms_median'] or '-':>9}"
              f"  {parts}  (load {row['load_1m']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
