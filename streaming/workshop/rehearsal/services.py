"""The rehearsal's long-running processes, each kept running the way systemd keeps a unit running
(deploy/systemd: `Restart=on-failure`, `RestartPreventExitStatus=2`): started again after a short
delay when it dies, until it is stopped. A kill -9 of one of them is then what production sees:
the process gone, its replacement started by the service manager.

What an operator or an orchestrator does to a unit, besides: hold it down for a while after a kill
(an outage longer than the restart delay), freeze and thaw it (SIGSTOP, SIGCONT), restart it
(`systemctl restart`, maybe with another command line: stop, then start at once), and roll it as a
Kubernetes Deployment of one replica does (RollingUpdate, maxUnavailable 0: the new process starts
beside the old one, which gets SIGTERM once the new one is ready).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from pathlib import Path

from streaming.plumbing import clock
from streaming.workshop.polling import poll
from streaming.workshop.spark_standalone import kill_session

__all__ = ["Service", "children"]


def children(pid: int) -> list[int]:
    """Direct children of `pid` (from /proc)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int((proc / "stat").read_text().rsplit(") ", 1)[1].split()[1]) == pid:
                found.append(int(proc.name))
    return found


class Service:
    """`command` in a session of its own, restarted `restart_s` after it exits (but for exit 2, a
    configuration error, and after `stop()`), its output appended to `log_path`.

    `ready_option`: the command's option that names a file the process creates once it is ready (the
    probe's `--ready-file`, a Kubernetes readiness check); every process gets a file of its own
    (`ready_path`), as every pod has its own /tmp."""

    def __init__(self, name: str, command: list[str], log_path: Path, env: dict[str, str], *,
                 restart_s: float = 2.0, cwd: Path | None = None, ready_option: str | None = None) -> None:
        self.name = name
        self.command = command
        self.log_path = log_path
        self.env = env
        self.cwd = cwd
        self.restart_s = restart_s
        self.ready_option = ready_option
        self.ready_path: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.started_ms: list[int] = []  # wall clock of every start
        self.exits: list[int] = []  # of the processes that died (not those a restart or a rollout replaced)
        self._down_s: float | None = None  # the next restart's delay, when a kill holds the unit down longer
        self._stopping = threading.Event()
        self._lock = threading.RLock()
        self._watcher = threading.Thread(target=self._watch, name=f"service-{name}", daemon=True)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> Service:
        self._spawn()
        self._watcher.start()
        return self

    def _popen(self) -> tuple[subprocess.Popen[bytes], Path | None]:
        command, ready = list(self.command), None
        if self.ready_option is not None:
            ready = self.log_path.with_name(f"{self.name}.{self.starts + 1}.ready")
            command += [self.ready_option, str(ready)]
        with self.log_path.open("ab") as log:
            proc = subprocess.Popen(command, env=self.env, cwd=self.cwd, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self.starts += 1
        self.started_ms.append(clock.now_ms())
        return proc, ready

    def _spawn(self) -> None:
        with self._lock:
            self.proc, self.ready_path = self._popen()

    def _watch(self) -> None:
        while not self._stopping.is_set():
            proc = self.proc
            if proc is None or proc.poll() is None:
                self._stopping.wait(0.2)  # a service manager's supervision, not a test's synchronisation
                continue
            with self._lock:
                if proc is not self.proc:
                    continue  # replaced by a restart or a rollout: not a death
                self.exits.append(proc.returncode)
                delay, self._down_s = self._down_s or self.restart_s, None
            kill_session(proc.pid)  # what the dead process left behind (systemd's KillMode)
            if proc.returncode == 2 or self._stopping.wait(delay):
                return
            self._spawn()

    def kill9(self, down_s: float | None = None) -> int:
        """SIGKILL the main process and every process of its session; returns the pid killed. With
        `down_s`, the unit stays down that long (an outage) instead of its restart delay."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            raise RuntimeError(f"{self.name} is not running")
        self._down_s = down_s
        kill_session(proc.pid)
        return proc.pid

    def signal(self, sig: signal.Signals) -> None:
        """`sig` to every process of the main process's group (SIGSTOP freezes the unit, SIGCONT thaws it)."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            raise RuntimeError(f"{self.name} is not running")
        os.killpg(proc.pid, sig)

    def restart(self, command: list[str] | None = None, *, timeout_s: float = 30) -> None:
        """`systemctl restart` (with `command`: after the unit's command line was changed): SIGTERM,
        wait for the exit (SIGKILL after `timeout_s`), then start at once."""
        with self._lock:
            old = self.proc
            if old is not None:
                self._end(old, timeout_s)
            if command is not None:
                self.command = command
            self._spawn()

    def roll(self, *, ready_timeout_s: float = 120, timeout_s: float = 30) -> None:
        """A rollout of a Deployment of one replica (RollingUpdate, maxSurge 1, maxUnavailable 0): a new
        process starts beside the old one, and once it is ready (its `ready_path` exists) the old one
        gets SIGTERM (SIGKILL after `timeout_s`, Kubernetes' terminationGracePeriodSeconds)."""
        if self.ready_option is None:
            raise RuntimeError(f"{self.name} has no readiness to roll by")
        new, ready = self._popen()
        poll(lambda: ready.exists() or new.poll() is not None, ready_timeout_s,
             f"the new process of {self.name} ready ({ready})", interval_s=0.1)
        if new.poll() is not None:
            raise RuntimeError(f"the new process of {self.name} exited {new.returncode} before it was ready")
        with self._lock:
            old, self.proc, self.ready_path = self.proc, new, ready
        if old is not None:
            self._end(old, timeout_s)

    @staticmethod
    def _end(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
        """SIGTERM `proc`, SIGKILL after `timeout_s`, and whatever of its session is left."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=timeout_s)
        kill_session(proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 30) -> None:
        """SIGTERM (the unit's stop), SIGKILL after `timeout_s`, and no restart."""
        self._stopping.set()
        with self._lock:
            proc = self.proc
        if proc is not None:
            self._end(proc, timeout_s)
        if self._watcher.is_alive():
            self._watcher.join(timeout=10)
