"""Real parts for the deployment and store tests: a throwaway PostgreSQL, free ports, polling.

No tests here: the deployment and store test modules import these helpers
(`from test_deploy_support import ...`; pytest puts `tests/` on sys.path).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["PostgresServer", "free_port", "pg_binaries", "poll", "stop_process"]

T = TypeVar("T")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def poll(predicate: Callable[[], T], timeout_s: float, what: str, interval_s: float = 0.25) -> T:
    """Return the first truthy `predicate()`; fail after `timeout_s` naming `what`."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while True:
        try:
            result = predicate()
        except Exception as exc:  # the thing polled for may not be up yet
            last_error, result = exc, None
        if result:
            return result
        if time.monotonic() >= deadline:
            hint = f" (last error: {last_error!r})" if last_error else ""
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}{hint}")
        time.sleep(interval_s)  # polling, bounded by the deadline


def stop_process(proc: subprocess.Popen[Any], timeout_s: float = 20.0, *, group: bool = True) -> None:
    """SIGTERM (the process group when it has its own), then SIGKILL after `timeout_s`."""
    if proc.poll() is not None:
        return
    try:
        if group:
            os.killpg(proc.pid, 15)
        else:
            proc.terminate()
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            if group:
                os.killpg(proc.pid, 9)
            else:
                proc.kill()
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


def pg_binaries() -> Path | None:
    """The directory holding initdb and pg_ctl (Debian keeps them off PATH), or None."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).resolve().parent
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(candidate, "pg_ctl").is_file() and Path(candidate, "initdb").is_file():
            return Path(candidate)
    return None


class PostgresServer:
    """A PostgreSQL server in a temporary directory on 127.0.0.1, trust auth, no fsync.

    PostgreSQL refuses to run as root: as root the data directory is given to the `postgres`
    user and the server runs as that user (`runuser`).
    """

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.port = free_port()
        # Not under pytest's tmp_path: its parents are private to root, the server user must reach it.
        self.root = Path(tempfile.mkdtemp(prefix="fleetwatch-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._as: list[str] = []
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError("running as root and there is no postgres user to run PostgreSQL") from None
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str, timeout_s: float = 60.0) -> None:
        subprocess.run([*self._as, *args], check=True, capture_output=True, timeout=timeout_s)

    def start(self) -> PostgresServer:
        self._run(str(self.bin_dir / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
                  "--no-sync", "-E", "UTF8", "--locale=C")
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        try:
            self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.log),
                      "-w", "-t", "60", "start")
        except subprocess.CalledProcessError:
            tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            self.stop()
            raise RuntimeError(f"PostgreSQL did not start:\n{tail}") from None
        return self

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, prefix: str = "fleetwatch") -> str:
        """A fresh empty database; its SQLAlchemy URL."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
                self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
