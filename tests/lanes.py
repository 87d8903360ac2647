"""`make test` as three pytest processes side by side (lanes), on one machine.

Most of the suite's wall time is spent waiting on real parts (a JVM starting, an outage held for
30 s, a lease running out, a demo watched for 90 s), one at a time: lanes overlap those waits on
CI's 2 cores. Two lanes left the machine a fifth idle (run 4: lane A used a core, lane B 0.65 of
one), three keep it busy. Each lane is a whole pytest session of its own (its Spark session,
PostgreSQL server, healthy real cluster when it holds that cluster's users), on its own temporary
folder. Lane A writes to the terminal as it goes; the others' output is kept in files and printed
when all are done. The exit status is the first failing lane's.

    python tests/lanes.py [pytest arguments...]
"""

from __future__ import annotations

import contextlib
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
# Balanced by the modules' measured times (each run prints them, from
# artifacts/test-costs-lane-*.jsonl); a folder or a file of tests/ each, in the order they run.
# Lane A: real Kafka's faults as the probe and the job see them, with both users of the session's
# healthy real cluster (collect's probe isolation, pipeline's real faults: the healthy cluster's
# users come first, and the real faults' module stops the cluster when it is done, so that its
# JVMs and its probe do not run beside the rest of the lane), the production topology on a Spark
# standalone cluster, then a database outage, an unregistered broker and the what-if replays. Lane
# B: the bus and the sources, and the live job's crashes and restarts. Lane C: everything else.
LANES = {
    "A": ("tests/collect", "tests/pipeline/test_real_kafka_faults.py", "tests/ops/test_deploy_standalone.py",
          "tests/pipeline/test_outage_store.py", "tests/pipeline/test_broker_unregistered_real.py",
          "tests/ops/test_whatif.py"),
    "B": ("tests/bus", "tests/source", *(f"tests/{name}.py" for name in (
        "job/test_supervise", "job/test_live", "pipeline/test_source_lead_live", "pipeline/test_outage_alerts_topic",
        "pipeline/test_source_lead", "job/test_spark_daemon", "job/test_restart_policy", "pipeline/test_packing"))),
}
NOT_TESTS = ("support", "fixtures", "__pycache__")


def _the_rest() -> list[str]:
    """Every test folder and module that no lane of LANES holds (a shared folder's rest file by file)."""
    held = {path for paths in LANES.values() for path in paths}
    out = []
    for path in sorted(TESTS.iterdir()):
        name = str(path.relative_to(ROOT))
        if name in held or path.name in NOT_TESTS:
            continue
        if path.is_dir() and any(h.startswith(name + "/") for h in held):
            out += [str(p.relative_to(ROOT)) for p in sorted(path.glob("test_*.py"))
                    if str(p.relative_to(ROOT)) not in held]
        elif path.is_dir() or (path.name.startswith("test_") and path.suffix == ".py"):
            out.append(name)
    return out


def main(args: list[str]) -> int:
    lanes = {**{name: list(paths) for name, paths in LANES.items()}, "C": _the_rest()}
    started = time.monotonic()
    logs = {name: Path(tempfile.mkdtemp(prefix=f"fleetwatch-lane-{name.lower()}-")) / "pytest.log"
            for name in lanes if name != "A"}
    running = {}
    costs = {name: ROOT / "artifacts" / f"test-costs-lane-{name.lower()}.jsonl" for name in lanes}
    with contextlib.ExitStack() as files:
        outs = {name: files.enter_context(log.open("wb")) for name, log in logs.items()}
        for name, paths in lanes.items():
            basetemp = tempfile.mkdtemp(prefix=f"fleetwatch-lane-{name.lower()}-")
            command = [sys.executable, "-m", "pytest", *args, f"--basetemp={basetemp}", *paths]
            costs[name].parent.mkdir(exist_ok=True)
            costs[name].unlink(missing_ok=True)
            out = outs.get(name)
            running[name] = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.DEVNULL,
                                             env={**os.environ, COSTS_ENV: str(costs[name])},
                                             stdout=out, stderr=None if out is None else subprocess.STDOUT)
        codes = {}
        for name, proc in running.items():
            codes[name] = proc.wait()
            print(f"\n== lane {name} ({' '.join(lanes[name])}): exit {codes[name]} "
                  f"after {time.monotonic() - started:.0f} s", flush=True)
    for name, log in logs.items():
        sys.stdout.write(f"\n== lane {name}'s output ({log})\n")
        sys.stdout.write(log.read_text(errors="replace"))
    print(f"\n== the costliest modules ({', '.join(str(p.relative_to(ROOT)) for p in costs.values())})")
    print(summarize(list(costs.values())))
    exits = ", ".join(f"{name} exit {code}" for name, code in codes.items())
    print(f"\n== lanes: {exits}; {time.monotonic() - started:.0f} s in all")
    return next((code for code in codes.values() if code != 0), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
