"""A throwaway PostgreSQL server for the store, notifier and deployment tests (no tests here).

The server of the whole session is the `postgres` fixture of tests/conftest.py; modules that need
a server of their own start a `PostgresServer` themselves.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import uuid
from pathlib import Path

from streaming.plumbing.ports import free_port
from streaming.workshop.polling import poll

__all__ = ["PostgresServer", "pg_binaries"]


def pg_binaries() -> Path | None:
    """The directory holding initdb and pg_ctl (Debian keeps them off PATH), or None."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).resolve().parent
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(candidate, "pg_ctl").is_file() and Path(candidate, "initdb").is_file():
            return Path(candidate)
    return None


def _parent(proc: Path) -> int | None:
    try:
        return int((proc / "stat").read_text().rsplit(") ", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][:1] == "Z"
    except (OSError, IndexError):
        return True


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
                  "--no-sync", "-E", "UTF8", "--locale=C", timeout_s=180)  # 60 s was not enough at load 20
        return self.serve()

    def serve(self) -> PostgresServer:
        """Start the server on the initialised data directory (again, after `crash`: crash recovery)."""
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

    def crash(self) -> None:
        """SIGKILL the postmaster and every backend (the host lost power); `serve()` starts it again."""
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        family = [pid] + [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _parent(p) == pid]
        for member in family:
            with contextlib.suppress(ProcessLookupError):
                os.kill(member, signal.SIGKILL)
        gone = lambda: not any(Path(f"/proc/{m}").exists() and not _zombie(m) for m in family)  # noqa: E731
        # the kernel reaps them within milliseconds
        poll(gone, 30, f"PostgreSQL processes {family} to be gone after SIGKILL", interval_s=0.05, retry_on=(),
             error=RuntimeError)

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
