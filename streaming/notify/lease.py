"""One notifier per store at a time (order per subject needs one sender): a lease row naming its
holder, renewed by it, with an expiry.

The holder is one process *instance*: a random token, never the host name and pid, which two
containers (or two notifiers in one process) can share. A lease is taken over when it expired,
or at once when its holder is provably dead: a process of the same machine *and* the same pid
namespace (Linux: the kernel's boot id and the namespace's inode, so a container never judges
another container's pids) that no longer exists.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable

from sqlalchemy import delete, select, update
from sqlalchemy.exc import SQLAlchemyError

from streaming.store import Store, notifier_lease

__all__ = ["Lease", "process_space"]

log = logging.getLogger(__name__)


def process_space() -> str:
    """Where this process's pid means something: `host` plus, on Linux, the boot id and pid
    namespace. Elsewhere a random token, so that no other process ever judges our pid."""
    host = socket.gethostname()
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip()[:8]
        namespace = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return f"{host} #{uuid.uuid4().hex[:8]}"
    return f"{host} {namespace} boot {boot}"[:255]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Lease:
    NAME = "notifier"

    def __init__(self, store: Store, ttl_ms: int, now_ms: Callable[[], int]) -> None:
        self.store = store
        self.ttl_ms = ttl_ms
        self.now_ms = now_ms
        self.owner = uuid.uuid4().hex  # this instance, whatever its host and pid
        self.host = process_space()
        self.pid = os.getpid()
        self._valid_until = 0
        self._renewed_at = 0
        self.holder: str | None = None

    @property
    def held(self) -> bool:
        return self.now_ms() < self._valid_until

    def renew_if_due(self) -> bool:
        """Renew once a third of the lease has passed (one write every ttl/3, not every loop)."""
        if self.held and self.now_ms() < self._renewed_at + self.ttl_ms // 3:
            return True
        return self.acquire()

    def _holder_is_dead(self, host: str, pid: int) -> bool:
        # Same process space, another pid, gone: killed (kill -9, OOM) and not coming back. Our own
        # pid is never judged: the holder is then another instance in this very process.
        return host == self.host and pid != self.pid and not _pid_alive(pid)

    def acquire(self) -> bool:
        """Take or renew the lease; False (and `holder` says who) when another live notifier has it."""
        now = self.now_ms()
        t = notifier_lease
        mine = {"owner": self.owner, "host": self.host, "pid": self.pid, "acquired_at": now,
                "expires_at": now + self.ttl_ms}
        with self.store.engine.begin() as conn:
            conn.execute(self.store._insert(t).values(name=self.NAME, **mine)
                         .on_conflict_do_nothing(index_elements=["name"]))
            row = conn.execute(select(t).where(t.c.name == self.NAME)).one()
            if row.owner == self.owner:
                got = conn.execute(update(t).where(t.c.name == self.NAME, t.c.owner == self.owner)
                                   .values(expires_at=now + self.ttl_ms)).rowcount == 1
            elif row.expires_at <= now or self._holder_is_dead(row.host, row.pid):
                got = conn.execute(update(t).where(t.c.name == self.NAME, t.c.owner == row.owner)
                                   .values(**mine)).rowcount == 1
                if got:
                    log.info("took over the notifier lease", extra={"previous_pid": row.pid,
                                                                    "previous_host": row.host})
            else:
                got = False
                self.holder = f"pid {row.pid} on {row.host}"
        # Stop sending a little before the lease runs out, should renewing fail.
        self._valid_until = now + self.ttl_ms - min(5000, self.ttl_ms // 3) if got else 0
        self._renewed_at = now
        return got

    def release(self) -> None:
        self._valid_until = 0
        try:
            with self.store.engine.begin() as conn:
                conn.execute(delete(notifier_lease).where(notifier_lease.c.name == self.NAME,
                                                          notifier_lease.c.owner == self.owner))
        except SQLAlchemyError:
            log.warning("could not release the notifier lease; it expires by itself", exc_info=True)
