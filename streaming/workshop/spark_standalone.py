"""A Spark standalone cluster on 127.0.0.1 from the installed PySpark (no tests here): a master and
workers started with `spark-class ...deploy.master.Master` / `...deploy.worker.Worker`, as an
operator's systemd units would, and the helpers that find what a job left behind (executors,
Python workers: every process of a session). Used by tests/ops/test_deploy_standalone.py and the
production rehearsal (streaming/workshop/rehearsal, bench/rehearsal.py), which kills a worker."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pyspark

from streaming.plumbing.ports import free_port
from streaming.workshop.polling import poll

__all__ = ["SPARK_HOME", "Standalone", "kill_session", "session_alive"]

SPARK_HOME = Path(pyspark.__file__).parent


def kill_session(sid: int) -> None:
    """SIGKILL every process left in session `sid` (executors, Python workers, JVMs)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.getsid(int(proc.name)) == sid:
                os.kill(int(proc.name), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue


def session_alive(sid: int) -> bool:
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if os.getsid(int(proc.name)) == sid and "Z" not in (proc / "stat").read_text().split(") ")[1][:1]:
                    return True
            except (ProcessLookupError, FileNotFoundError, PermissionError):
                continue
    return False


def _json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


class Standalone:
    """A Spark standalone master and `workers` workers (2 cores in all, 1 GiB each) on 127.0.0.1."""

    def __init__(self, workdir: Path, workers: int = 1) -> None:
        self.workdir = workdir
        self.workers = workers
        self.port, self.ui_port = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.worker_procs: dict[int, subprocess.Popen[bytes]] = {}
        self.env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
                    "SPARK_DAEMON_MEMORY": "384m", "SPARK_WORKER_DIR": str(workdir / "work"),
                    "SPARK_LOG_DIR": str(workdir / "logs"), "PYSPARK_PYTHON": sys.executable,
                    # The daemons only schedule and relay: C2's compiling was most of their CPU.
                    "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1"}

    def _start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = (self.workdir / f"{name}.log").open("ab")
        proc = subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], env=self.env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def start(self) -> Standalone:
        self._start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(self.ui_port))
        poll(lambda: self.state()["status"] == "ALIVE", 60, "the Spark master")
        for n in range(self.workers):
            self.start_worker(n)
        self.wait_workers()
        return self

    def start_worker(self, n: int) -> None:
        self.worker_procs[n] = self._start(
            f"worker-{n}", "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
            "--cores", str(max(1, 2 // self.workers)), "--memory", "1g", "--webui-port", str(free_port()),
            "--work-dir", str(self.workdir / f"work-{n}"))

    def kill_worker(self, n: int) -> None:
        """SIGKILL the worker and everything it started (its host lost): its executors die with it."""
        proc = self.worker_procs[n]
        kill_session(proc.pid)
        proc.wait(timeout=10)

    def alive_workers(self) -> int:
        return len([w for w in self.state()["workers"] if w["state"] == "ALIVE"])

    def wait_workers(self, timeout_s: float = 60) -> None:
        poll(lambda: self.alive_workers() == self.workers, timeout_s, f"{self.workers} ALIVE Spark workers")

    def state(self) -> dict:
        return _json(f"http://127.0.0.1:{self.ui_port}/json/")

    def stop(self) -> None:
        for proc in reversed(self.procs):  # the workers first: they stop their executors
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=20)
            kill_session(proc.pid)  # executors and Python workers of the worker's session
            if proc.poll() is None:
                proc.wait(timeout=10)
