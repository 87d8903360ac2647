"""`fleetwatch replay` against the single-process reference detector, on the same file.

    .venv/bin/python bench/replay_vs_reference.py                     # simulate 100 x 4, 20 min, all faults
    .venv/bin/python bench/replay_vs_reference.py --events EVENTS.jsonl

Both run as the commands a user would type, one after the other: `fleetwatch replay` (Spark,
the live job's pipeline) and `bench/reference_detector.py` (plain Python, one process, see the
docstring of `bench/reference/`). The bench checks that their alert lines are byte-identical
(else it prints the first differences and exits 1), then prints for each:
- the whole command's wall time and events/s, start-up included;
- its own time without start-up: for replay, the sum of its micro-batches' durations (the
  `batch progress` log lines; the first batch also starts Spark's Python workers), for the
  reference, the time it reports for reading, detecting and writing;
- CPU seconds of the whole process tree (the JVM and Spark's Python workers included): sampled
  from /proc every 0.1 s, and as the kernel accounts it for reaped children (RUSAGE_CHILDREN);
  the larger is printed per 100k events, and fleetwatch's is split by process (the command's
  own, the JVM, Spark's Python workers);
and the ratio fleetwatch/reference of the events/s. Numbers are measured on this machine as it
is: the load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable


@dataclass
class Run:
    name: str
    wall_s: float
    own_s: float
    cpu_sampled_s: float
    cpu_rusage_s: float
    cpu_by_kind: dict[str, float]  # sampled: the command's own process, the JVM, Spark's Python workers
    stdout: str
    stderr: str

    @property
    def cpu_s(self) -> float:
        return max(self.cpu_sampled_s, self.cpu_rusage_s)


def _tree_cpu(proc: psutil.Process, seen: dict[int, float], kinds: dict[int, str]) -> None:
    """Record the CPU time so far of `proc` and its descendants (the last value seen per pid),
    and what kind of process each is."""
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        try:
            times = p.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        seen[p.pid] = max(seen.get(p.pid, 0.0), times.user + times.system)
        # Every time: Spark's launcher script becomes the JVM (exec) under the same pid.
        try:
            kinds[p.pid] = "command" if p.pid == proc.pid else "JVM" if p.name().startswith("java") else "workers"
        except psutil.NoSuchProcess:
            kinds.setdefault(p.pid, "workers")


def run_command(name: str, argv: list[str], env: dict[str, str]) -> Run:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    seen: dict[int, float] = {}
    kinds: dict[int, str] = {}
    watched = psutil.Process(proc.pid)
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.1):
            _tree_cpu(watched, seen, kinds)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, stderr = proc.communicate()
    wall = time.monotonic() - started
    done.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"{name} failed (exit {proc.returncode}):\n{stderr[-3000:]}")
    rusage = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    by_kind: dict[str, float] = {}
    for pid, cpu in seen.items():
        by_kind[kinds[pid]] = by_kind.get(kinds[pid], 0.0) + cpu
    return Run(name, wall, own_seconds(name, stderr), sum(seen.values()), rusage, by_kind, stdout, stderr)


def own_seconds(name: str, stderr: str) -> float:
    """The time the command reports for its work, start-up left out."""
    if name == "reference":
        # "reference: N alert lines, L late, S skipped, X.XX s"
        return float(stderr.strip().splitlines()[-1].rsplit(",", 1)[1].split()[0])
    batches = [json.loads(line) for line in stderr.splitlines()
               if line.startswith("{") and '"batch progress"' in line]
    return sum(b["duration_ms"] for b in batches) / 1000


def simulate(path: Path, args: argparse.Namespace) -> None:
    argv = [str(ROOT / ".venv/bin/fleetwatch"), "simulate", "--clusters", str(args.clusters), "--brokers",
            str(args.brokers), "--faults", "all", "--duration", str(args.duration), "--jitter-ms",
            str(args.jitter_ms), "--seed", str(args.seed), "--out", str(path)]
    print("simulating:", " ".join(argv[1:]), flush=True)
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)


def first_differences(a: list[str], b: list[str], limit: int = 5) -> list[str]:
    out = [f"{len(a)} lines from fleetwatch, {len(b)} from the reference"]
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            out += [f"line {i + 1}:", f"  fleetwatch: {x}", f"  reference:  {y}"]
            if len(out) > 3 * limit:
                break
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=Path, help="a JSONL events file (default: simulate one)")
    p.add_argument("--clusters", type=int, default=100, help="simulated clusters (default 100)")
    p.add_argument("--brokers", type=int, default=4, help="brokers per cluster (default 4)")
    p.add_argument("--duration", type=int, default=1200, help="seconds of event time (default 1200)")
    p.add_argument("--jitter-ms", type=int, default=800, help="out-of-order delivery, ms (default 800)")
    p.add_argument("--seed", type=int, default=0, help="simulator seed (default 0)")
    p.add_argument("--keep", type=Path, help="keep the alert files in this directory")
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="replay-vs-reference-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        events = args.events or work / "events.jsonl"
        if args.events is None:
            simulate(events, args)
        if not events.is_file():
            sys.exit(f"{events}: no such file")
        with events.open("rb") as fh:
            lines = sum(1 for _ in fh)
        env = {**os.environ, "PYSPARK_PYTHON": str(ROOT / ".venv/bin/python")}
        print(f"{lines} events in {events}; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores",
              flush=True)
        fw_out, ref_out = work / "fleetwatch.alerts.jsonl", work / "reference.alerts.jsonl"
        runs = [
            run_command("fleetwatch", [str(ROOT / ".venv/bin/fleetwatch"), "replay", str(events),
                                       "--alerts-out", str(fw_out)], env),
            run_command("reference", [PYTHON, str(ROOT / "bench/reference_detector.py"), str(events),
                                      "--alerts-out", str(ref_out)], env),
        ]
        load = os.getloadavg()[0]
        fw_lines, ref_lines = fw_out.read_text().splitlines(), ref_out.read_text().splitlines()

    print(f"{'':<11}{'whole s':>9}{'events/s':>10}{'own s':>8}{'events/s':>10}{'CPU s':>8}"
          f"{'(sampled':>9}{' rusage)':>9}{'CPU s/100k':>11}")
    for r in runs:
        print(f"{r.name:<11}{r.wall_s:>9.1f}{lines / r.wall_s:>10.0f}{r.own_s:>8.1f}{lines / r.own_s:>10.0f}"
              f"{r.cpu_s:>8.1f}{r.cpu_sampled_s:>9.1f}{r.cpu_rusage_s:>9.1f}{r.cpu_s * 1e5 / lines:>11.1f}")
    fw, ref = runs
    print("fleetwatch CPU s by process (sampled): " + ", ".join(
        f"{kind} {cpu:.1f}" for kind, cpu in sorted(fw.cpu_by_kind.items())))
    print(f"fleetwatch/reference events/s: {ref.wall_s / fw.wall_s:.2f} whole command, "
          f"{ref.own_s / fw.own_s:.2f} without start-up; CPU per event {fw.cpu_s / ref.cpu_s:.2f}x the reference's")
    print(f"load average after: {load:.2f}")
    if fw_lines != ref_lines:
        print("ALERTS DIFFER", *first_differences(fw_lines, ref_lines), sep="\n")
        return 1
    print(f"alerts identical: {len(fw_lines)} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
