"""What each test costs: its wall time and the CPU time of the pytest process and every process it
started (JVMs, brokers, Python workers, browsers), as JSON lines in `$FLEETWATCH_TEST_COSTS`.

`make test` runs on CI's 2 cores, where the suite is CPU-bound: the CPU a test burns is what the
other lane waits for, so its wall time alone does not say what to make cheaper. tests/lanes.py
sets the variable per lane and prints the costliest modules at the end.

The processes are sampled every half second while the test runs (a killed job's JVM is orphaned
and reaped by init, so its parent never accounts for it): each process's CPU (user + system) at its
last sample, less what it had used when the test began. What a process uses in its last half
second, and processes that live less than that, are not counted; nor are daemons outside the tree
(PostgreSQL's postmaster).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

__all__ = ["ENV", "cost_hook", "summarize"]

ENV = "FLEETWATCH_TEST_COSTS"


class _Sampler:
    """The CPU seconds of pytest's process tree since `start()`, sampled every `every_s`."""

    def __init__(self, every_s: float = 0.5) -> None:
        self._every_s = every_s
        self._stop = threading.Event()
        self._at_start: dict[tuple[int, float], float] = {}
        self._last: dict[tuple[int, float], float] = {}
        self._thread = threading.Thread(target=self._run, name="test-costs", daemon=True)

    def _sample(self) -> dict[tuple[int, float], float]:
        me = psutil.Process()
        seen = {}
        for proc in (me, *me.children(recursive=True)):
            try:
                t = proc.cpu_times()
                seen[(proc.pid, proc.create_time())] = t.user + t.system
            except psutil.Error:  # it exited between the listing and the reading
                continue
        return seen

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            self._last.update(self._sample())

    def start(self) -> None:
        self._at_start = self._sample()
        self._last = dict(self._at_start)
        self._thread.start()

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        self._last.update(self._sample())
        return sum(cpu - self._at_start.get(key, 0.0) for key, cpu in self._last.items())


@pytest.hookimpl(hookwrapper=True)
def cost_hook(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """pytest_runtest_protocol: one line per test, setup and teardown included."""
    path = os.environ.get(ENV)
    if not path:
        yield
        return
    wall, sampler = time.monotonic(), _Sampler()
    sampler.start()
    yield
    line = {"test": item.nodeid, "wall_s": round(time.monotonic() - wall, 2), "cpu_s": round(sampler.stop(), 2)}
    with open(path, "a") as out:
        out.write(json.dumps(line) + "\n")


def summarize(paths: list[Path], top: int = 25) -> str:
    """The costliest test modules of the lanes' files: CPU and wall seconds, and the totals."""
    modules: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for path in paths:
        if not path.exists():
            continue
        for raw in path.read_text().splitlines():
            row = json.loads(raw)
            entry = modules[row["test"].split("::")[0]]
            entry[0] += row["cpu_s"]
            entry[1] += row["wall_s"]
            entry[2] += 1
    rows = sorted(modules.items(), key=lambda kv: -kv[1][0])
    cpu, wall = sum(v[0] for v in modules.values()), sum(v[1] for v in modules.values())
    out = [f"{'cpu s':>8} {'wall s':>8} {'tests':>5}  module (CPU of pytest and what it started)"]
    out += [f"{v[0]:8.0f} {v[1]:8.0f} {v[2]:5d}  {name}" for name, v in rows[:top]]
    out.append(f"{cpu:8.0f} {wall:8.0f} {sum(v[2] for v in modules.values()):5d}  all {len(modules)} modules")
    return "\n".join(out)
