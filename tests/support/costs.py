"""What each test costs: its wall time and the CPU time of the pytest process and every process it
started (JVMs, brokers, Python workers, browsers), as JSON lines in `$FLEETWATCH_TEST_COSTS`.

`make test` runs on CI's 2 cores, where the suite is CPU-bound: the CPU a test burns is what the
other lane waits for, so its wall time alone does not say what to make cheaper. tests/lanes.py
sets the variable per lane and prints the costliest modules at the end.

A process's CPU counts once: while it runs (user + system, and its reaped children's), and after
it exits in its parent's reaped-children time. Only descendants that leave the tree (daemons that
double-fork, such as PostgreSQL's postmaster) are not counted.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

__all__ = ["ENV", "cost_hook", "summarize"]

ENV = "FLEETWATCH_TEST_COSTS"


def _tree_cpu_s() -> float:
    me = psutil.Process()
    total = 0.0
    for proc in (me, *me.children(recursive=True)):
        try:
            t = proc.cpu_times()
        except psutil.Error:  # it exited between the listing and the reading
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


@pytest.hookimpl(hookwrapper=True)
def cost_hook(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """pytest_runtest_protocol: one line per test, setup and teardown included."""
    path = os.environ.get(ENV)
    if not path:
        yield
        return
    wall, cpu = time.monotonic(), _tree_cpu_s()
    yield
    line = {"test": item.nodeid, "wall_s": round(time.monotonic() - wall, 2),
            "cpu_s": round(_tree_cpu_s() - cpu, 2)}
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
