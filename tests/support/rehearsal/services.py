"""The rehearsal's long-running processes, each kept running the way systemd keeps a unit running
(deploy/systemd: `Restart=on-failure`, `RestartPreventExitStatus=2`): started again after a short
delay when it dies, until it is stopped. A kill -9 of one of them is then what production sees:
the process gone, its replacement started by the service manager.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from pathlib import Path

from support.spark_standalone import kill_session

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
    configuration error, and after `stop()`), its output appended to `log_path`."""

    def __init__(self, name: str, command: list[str], log_path: Path, env: dict[str, str], *,
                 restart_s: float = 2.0, cwd: Path | None = None) -> None:
        self.name = name
        self.command = command
        self.log_path = log_path
        self.env = env
        self.cwd = cwd
        self.restart_s = restart_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.exits: list[int] = []
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._watcher = threading.Thread(target=self._watch, name=f"service-{name}", daemon=True)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> Service:
        self._spawn()
        self._watcher.start()
        return self

    def _spawn(self) -> None:
        with self._lock, self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.command, env=self.env, cwd=self.cwd, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
            self.starts += 1

    def _watch(self) -> None:
        while not self._stopping.is_set():
            proc = self.proc
            if proc is None or proc.poll() is None:
                self._stopping.wait(0.2)  # a service manager's supervision, not a test's synchronisation
                continue
            self.exits.append(proc.returncode)
            kill_session(proc.pid)  # what the dead process left behind (systemd's KillMode)
            if proc.returncode == 2 or self._stopping.wait(self.restart_s):
                return
            self._spawn()

    def kill9(self) -> int:
        """SIGKILL the main process and every process of its session; returns the pid killed."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            raise RuntimeError(f"{self.name} is not running")
        kill_session(proc.pid)
        return proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 30) -> None:
        """SIGTERM (the unit's stop), SIGKILL after `timeout_s`, and no restart."""
        self._stopping.set()
        proc = self.proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=timeout_s)
        if proc is not None:
            kill_session(proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        if self._watcher.is_alive():
            self._watcher.join(timeout=10)
