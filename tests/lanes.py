"""`make test` as two pytest processes side by side (lanes), on one machine.

Most of the suite's wall time is spent waiting on real parts (a JVM starting, an outage held for
30 s, a lease running out, a demo watched for 90 s), one at a time: two lanes overlap those waits
on CI's 2 cores. Each lane is a whole pytest session of its own (its Spark session, PostgreSQL
server, healthy real cluster when it holds that cluster's users), on its own temporary folder.
Lane A (the real-Kafka and streaming-job tests) writes to the terminal as it goes; lane B's output
is kept in a file and printed when both are done. The exit status is the first failing lane's.

    python tests/lanes.py [pytest arguments...]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from support.costs import ENV as COSTS_ENV
from support.costs import summarize

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
# Lane A: the real-Kafka tests, with both users of the session's healthy real cluster
# (collect's probe isolation, pipeline's real faults) and the Spark standalone cluster's; lane B:
# everything else, with the live job's, the replays' and the store outages' modules of pipeline. Balanced by the
# modules' measured times (each run prints them, from artifacts/test-costs-lane-*.jsonl); a folder
# or a file of tests/ each.
# In this order: the healthy cluster's users come first, and the real faults' module (which stops
# the cluster when it is done) right after the five minutes of watching are over, so that its three
# JVMs and its probe (~0.15 of a core, measured) do not run beside the rest of the lane.
LANE_A = ("tests/collect", "tests/bus", "tests/pipeline/test_real_kafka_faults.py", "tests/source",
          "tests/ops/test_deploy_standalone.py", *(
              f"tests/pipeline/{name}.py" for name in (
                  "test_supervise", "test_source_lead", "test_spark_daemon", "test_restart_policy", "test_packing")))
NOT_TESTS = ("support", "fixtures", "__pycache__")


def _lane_b() -> list[str]:
    """Every test folder and module that lane A does not hold (pipeline's rest file by file)."""
    out = []
    for path in sorted(TESTS.iterdir()):
        name = str(path.relative_to(ROOT))
        if name in LANE_A or path.name in NOT_TESTS:
            continue
        if path.is_dir() and any(a.startswith(name + "/") for a in LANE_A):
            out += [str(p.relative_to(ROOT)) for p in sorted(path.glob("test_*.py"))
                    if str(p.relative_to(ROOT)) not in LANE_A]
        elif path.is_dir() or (path.name.startswith("test_") and path.suffix == ".py"):
            out.append(name)
    return out


def main(args: list[str]) -> int:
    lanes = {"A": list(LANE_A), "B": _lane_b()}
    started = time.monotonic()
    log_b = Path(tempfile.mkdtemp(prefix="fleetwatch-lane-b-")) / "pytest.log"
    running = {}
    costs = {name: ROOT / "artifacts" / f"test-costs-lane-{name.lower()}.jsonl" for name in lanes}
    with open(log_b, "wb") as out_b:
        for name, paths in lanes.items():
            basetemp = tempfile.mkdtemp(prefix=f"fleetwatch-lane-{name.lower()}-")
            command = [sys.executable, "-m", "pytest", *args, f"--basetemp={basetemp}", *paths]
            costs[name].parent.mkdir(exist_ok=True)
            costs[name].unlink(missing_ok=True)
            running[name] = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.DEVNULL,
                                             env={**os.environ, COSTS_ENV: str(costs[name])},
                                             stdout=None if name == "A" else out_b,
                                             stderr=None if name == "A" else subprocess.STDOUT)
        codes = {}
        for name, proc in running.items():
            codes[name] = proc.wait()
            print(f"\n== lane {name} ({' '.join(lanes[name])}): exit {codes[name]} "
                  f"after {time.monotonic() - started:.0f} s", flush=True)
    sys.stdout.write(f"\n== lane B's output ({log_b})\n")
    sys.stdout.write(log_b.read_text(errors="replace"))
    print(f"\n== the costliest modules ({', '.join(str(p.relative_to(ROOT)) for p in costs.values())})")
    print(summarize(list(costs.values())))
    print(f"\n== lanes: A exit {codes['A']}, B exit {codes['B']}; {time.monotonic() - started:.0f} s in all")
    return next((code for code in codes.values() if code != 0), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
