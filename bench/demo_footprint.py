"""What `fleetwatch demo` costs this machine, with and without its real Kafka cluster.

    .venv/bin/python bench/demo_footprint.py [--seconds 180] [--modes plain,real-kafka] [--json]

For each mode the demo runs as `make demo` runs it (20 clusters x 4 brokers; `--real-kafka` adds
the real Kafka 4.4 cluster of `streaming/workshop/kraft/showcase.py`), its output to a file. Once the job
has written its first micro-batch (and, with the real cluster, once that cluster is up), the
process tree is sampled every 2 s for `--seconds`: CPU (user + system seconds over wall seconds,
100 % = one core) and memory (PSS: shared pages counted once, so forked Python workers add up
right), in total and per part. Also printed: the seconds from start to the first micro-batch, the
micro-batch durations the job recorded in the window, how far the watermark trailed each batch,
and the machine's load average (the machine may be shared: compare modes run back to back).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from streaming.workshop.polling import poll  # noqa: E402 - after the path set-up

MODES = {"plain": [], "real-kafka": ["--real-kafka"]}


def _part(p: psutil.Process, demo_pid: int) -> str:
    if p.pid == demo_pid:
        return "demo (driver, simulator, notifier)"
    try:
        cmd = " ".join(p.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return "other"
    if "kafka.Kafka" in cmd or "StorageTool" in cmd:
        return "real Kafka JVMs"
    if "SparkSubmit" in cmd:
        return "Spark JVM"
    if "gunicorn" in cmd:
        return "dashboard (gunicorn)"
    if "tansu" in cmd:
        return "Tansu"
    return "Spark Python workers"


def _tree(demo: psutil.Process) -> list[psutil.Process]:
    try:
        return [demo, *demo.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _wait(what: str, check, timeout_s: float, demo: subprocess.Popen[bytes]) -> None:  # type: ignore[no-untyped-def]
    def checked() -> bool:
        if not (value := check()) and demo.poll() is not None:
            raise SystemExit(f"the demo exited ({demo.returncode}) before {what}")
        return value

    poll(checked, timeout_s, what, interval_s=1, retry_on=(), error=SystemExit)


def _query(db: Path, sql: str, *args: Any) -> list[tuple]:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return conn.execute(sql, args).fetchall()
    except sqlite3.OperationalError:  # not created yet
        return []


def measure(mode: str, seconds: float, port: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"fleetwatch-footprint-{mode}-"))
    out = (work / "demo.out").open("wb")
    demo = subprocess.Popen([sys.executable, "-m", "streaming.cli", "demo", "--workdir", str(work / "demo"),
                             "--port", str(port), *MODES[mode]],
                            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYSPARK_PYTHON": sys.executable}, start_new_session=True)
    db = work / "demo" / "fleetwatch.db"
    spawned = time.monotonic()
    try:
        _wait("first micro-batch", lambda: _query(db, "SELECT 1 FROM pipeline_progress LIMIT 1"), 300, demo)
        first_batch_s = time.monotonic() - spawned
        if mode == "real-kafka":
            _wait("real Kafka cluster", lambda: b"real Kafka cluster up" in (work / "demo.out").read_bytes(), 300, demo)
        root = psutil.Process(demo.pid)
        cpu: dict[int, float] = {}
        first_cpu: dict[int, float] = {}
        pss: dict[str, list[float]] = defaultdict(list)
        part_of: dict[int, str] = {}
        load_before = os.getloadavg()
        started_ms = int(time.time() * 1000)
        began = time.monotonic()
        while time.monotonic() - began < seconds:
            totals: dict[str, float] = defaultdict(float)
            for p in _tree(root):
                try:
                    times = p.cpu_times()
                    used = times.user + times.system
                    part_of.setdefault(p.pid, _part(p, demo.pid))
                    first_cpu.setdefault(p.pid, used)
                    cpu[p.pid] = used
                    totals[part_of[p.pid]] += p.memory_full_info().pss
                except psutil.NoSuchProcess:
                    continue
            for part, value in totals.items():
                pss[part].append(value)
            pss["total"].append(sum(totals.values()))
            time.sleep(2)
        wall = time.monotonic() - began
        cpu_by_part: dict[str, float] = defaultdict(float)
        for pid, used in cpu.items():
            cpu_by_part[part_of[pid]] += used - first_cpu[pid]
        batches = [row[0] for row in _query(
            db, "SELECT batch_duration_ms FROM pipeline_progress WHERE recorded_at >= ?", started_ms)]
        lags = sorted(row[0] for row in _query(
            db, "SELECT recorded_at - watermark_ms FROM pipeline_progress WHERE recorded_at >= ? "
                "AND watermark_ms > 0", started_ms))
        real_alerts = _query(db, "SELECT rule, broker_id, status FROM alerts WHERE target = 'real-kafka-4.4' OR "
                                 "cluster_id = (SELECT last_cluster_id FROM targets WHERE target = 'real-kafka-4.4')")
        return {
            "mode": mode, "seconds": round(wall), "first_batch_s": round(first_batch_s),
            "cpu_percent": {part: round(100 * used / wall) for part, used in sorted(cpu_by_part.items())}
            | {"total": round(100 * sum(cpu_by_part.values()) / wall)},
            "pss_mb_median": {part: round(statistics.median(values) / 2**20) for part, values in sorted(pss.items())},
            "pss_mb_max_total": round(max(pss["total"]) / 2**20),
            "batches": len(batches),
            "batch_ms": {"median": statistics.median(batches), "p90": sorted(batches)[int(0.9 * (len(batches) - 1))],
                         "max": max(batches)} if batches else None,
            "watermark_lag_ms": {"median": statistics.median(lags), "max": lags[-1]} if lags else None,
            "real_kafka_alerts": real_alerts,
            "load_average": [round(x, 1) for x in (*load_before, *os.getloadavg())],
        }
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGINT)
        try:
            demo.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
        out.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=180, help="sampling window per mode (default 180)")
    parser.add_argument("--modes", default="plain,real-kafka", help="comma-separated: plain, real-kafka")
    parser.add_argument("--port", type=int, default=18050, help="the demo's dashboard port")
    parser.add_argument("--json", action="store_true", help="one JSON object per mode")
    args = parser.parse_args()
    for mode in args.modes.split(","):
        result = measure(mode, args.seconds, args.port)
        if args.json:
            print(json.dumps(result), flush=True)
            continue
        print(f"== {mode}: first micro-batch {result['first_batch_s']} s after start; sampled {result['seconds']} s, "
              f"load average before/after {result['load_average']}")
        print(f"   CPU % of one core: {result['cpu_percent']}")
        print(f"   memory, PSS MB (median): {result['pss_mb_median']}  max total {result['pss_mb_max_total']}")
        print(f"   micro-batches: {result['batches']}, duration ms {result['batch_ms']}, "
              f"watermark lag ms (recorded minus watermark) {result['watermark_lag_ms']}")
        if mode == "real-kafka":
            print(f"   alerts on real-kafka-4.4: {result['real_kafka_alerts']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
