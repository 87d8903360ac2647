"""`make test` as three pytest processes side by side (lanes), on one machine.

Most of the suite's wall time is spent waiting on real parts (a JVM starting, an outage held for
30 s, a lease running out, a demo watched for 90 s), one at a time: two lanes overlap those waits
on CI's 2 cores. Each lane is a whole pytest session of its own (its Spark session, PostgreSQL
server, healthy real cluster when it holds that cluster's users), on its own temporary folder.
Lane A (the real-Kafka and streaming-job tests) writes to the terminal as it goes; the other lanes'
output is kept in files and printed when all are done. The exit status is the first failing lane's.

    python tests/lanes.py [pytest arguments...]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
# Lane A: the real-Kafka and outage tests, with both users of the session's healthy real cluster
# (collect's probe isolation, pipeline's real faults); lane B: everything else, with the live job's
# and the replays' modules of pipeline. Balanced by the modules' measured times (the note of the
# change that made the lanes gives them); a folder or a file of tests/ each.
LANE_A = ("tests/bus", "tests/collect", "tests/source", *(
    f"tests/pipeline/{name}.py" for name in (
        "test_real_kafka_faults", "test_outage_store", "test_outage_alerts_topic",
        "test_source_lead_live", "test_source_lead", "test_spark_daemon",
        "test_restart_policy", "test_packing")))
# Lane C: the production topologies (a Spark standalone cluster; the short rehearsal) and the job's
# restarts, which mostly wait on JVMs starting and on a restarted driver. A file here is taken out
# of lane A's folders.
LANE_C = ("tests/ops/test_deploy_standalone.py", "tests/pipeline/test_rehearsal.py",
          "tests/pipeline/test_supervise.py", "tests/source/test_bus_topic_deleted.py")
NOT_TESTS = ("support", "fixtures", "__pycache__")


def _lane_b() -> list[str]:
    """Every test folder and module that lanes A and C do not hold (their folders' rest file by file)."""
    taken = (*LANE_A, *LANE_C)
    out = []
    for path in sorted(TESTS.iterdir()):
        name = str(path.relative_to(ROOT))
        if name in taken or path.name in NOT_TESTS:
            continue
        if path.is_dir() and any(a.startswith(name + "/") for a in taken):
            out += [str(p.relative_to(ROOT)) for p in sorted(path.glob("test_*.py"))
                    if str(p.relative_to(ROOT)) not in taken]
        elif path.is_dir() or (path.name.startswith("test_") and path.suffix == ".py"):
            out.append(name)
    return out


def _lane_a() -> list[str]:
    """Lane A's folders and modules, a folder that holds a file of lane C file by file."""
    out = []
    for name in LANE_A:
        if any(c.startswith(name + "/") for c in LANE_C):
            out += [str(p.relative_to(ROOT)) for p in sorted((ROOT / name).glob("test_*.py"))
                    if str(p.relative_to(ROOT)) not in LANE_C]
        else:
            out.append(name)
    return out


def main(args: list[str]) -> int:
    lanes = {"A": _lane_a(), "B": _lane_b(), "C": list(LANE_C)}
    started = time.monotonic()
    logs = {name: Path(tempfile.mkdtemp(prefix=f"fleetwatch-lane-{name.lower()}-")) / "pytest.log"
            for name in lanes if name != "A"}
    running = {}
    for name, paths in lanes.items():
        basetemp = tempfile.mkdtemp(prefix=f"fleetwatch-lane-{name.lower()}-")
        command = [sys.executable, "-m", "pytest", *args, f"--basetemp={basetemp}", *paths]
        out = None if name == "A" else open(logs[name], "wb")  # noqa: SIM115 - closed once the lane ends
        running[name] = (subprocess.Popen(command, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out,
                                          stderr=None if out is None else subprocess.STDOUT), out)
    codes = {}
    for name, (proc, out) in running.items():
        codes[name] = proc.wait()
        if out is not None:
            out.close()
        print(f"\n== lane {name} ({' '.join(lanes[name])}): exit {codes[name]} "
              f"after {time.monotonic() - started:.0f} s", flush=True)
    for name, log in logs.items():
        sys.stdout.write(f"\n== lane {name}'s output ({log})\n")
        sys.stdout.write(log.read_text(errors="replace"))
    print("\n== lanes: " + ", ".join(f"{name} exit {code}" for name, code in codes.items())
          + f"; {time.monotonic() - started:.0f} s in all")
    return next((code for code in codes.values() if code != 0), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
