"""One notifier per store at a time (order per subject needs one sender): a lease row naming its
holder, renewed by it, with an expiry.

The lease runs on one clock only, the database's: the statement that takes or renews it sets
`expires_at` from the database's own time (PostgreSQL's `clock_timestamp()`, SQLite's
`julianday('now')`), and the one that takes it over compares `expires_at` with that same time, so
the hosts' clocks are never compared (two notifiers whose clocks differ by minutes never send at
once, and a standby never waits longer than the lease for a dead holder). The holder counts its
own validity on its monotonic clock from *before* the statement that renewed it, so it stops
before the database would let another take over: it renews every ttl/3 and stops sending
min(5 s, ttl/3) before the lease runs out; an attempt starts only while the lease covers the
whole attempt (`held_for`, the attempt's deadline, `alerting.delivery.attempt_timeout_ms`).

Every takeover increments the lease's `generation`, a fencing token: the write that records a
send's outcome checks, in its own transaction, that the lease still has this owner and
generation (`fence`, `DeliveryQueue.record_outcome`), so a deposed notifier's late write (one
paused past its lease) is refused and the new holder sends that notification again (at least
once; the receiver deduplicates on (alert_id, status)). The lease row's SQL is the store's
(`try_lease`, `release_lease`: streaming/store/leasing.py).

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
import time
import uuid

from sqlalchemy.exc import SQLAlchemyError

from streaming.config import lease_margin_ms
from streaming.store import LeaseClaim, LeaseFence, Store, release_lease, try_lease

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

    def __init__(self, store: Store, ttl_ms: int) -> None:
        self.store = store
        self.ttl_ms = ttl_ms
        self.owner = uuid.uuid4().hex  # this instance, whatever its host and pid
        self.host = process_space()
        self.pid = os.getpid()
        self.generation: int | None = None
        # Monotonic seconds: until when this instance may send, when it last renewed.
        self._valid_until = 0.0
        self._renewed_at = 0.0
        self.holder: str | None = None

    @property
    def held(self) -> bool:
        return time.monotonic() < self._valid_until

    def held_for(self, seconds: float) -> bool:
        """Held now and for `seconds` more (an attempt of that deadline may start)."""
        return time.monotonic() + seconds < self._valid_until

    @property
    def fence(self) -> LeaseFence | None:
        """The token a write of this tenure checks (None before the lease was first held)."""
        return None if self.generation is None else LeaseFence(self.NAME, self.owner, self.generation)

    def renew_if_due(self) -> bool:
        """Renew once a third of the lease has passed (one write every ttl/3, not every loop)."""
        if self.held and time.monotonic() < self._renewed_at + self.ttl_ms / 3000:
            return True
        return self.acquire()

    def _holder_is_dead(self, host: str, pid: int) -> bool:
        # Same process space, another pid, gone: killed (kill -9, OOM) and not coming back. Our own
        # pid is never judged: the holder is then another instance in this very process.
        return host == self.host and pid != self.pid and not _pid_alive(pid)

    def acquire(self) -> bool:
        """Take or renew the lease; False (and `holder` says who) when another live notifier has it."""
        started = time.monotonic()  # before the database's now: the local validity ends first
        tried = try_lease(self.store, LeaseClaim(self.NAME, self.owner, self.host, self.pid), self.ttl_ms,
                          self._holder_is_dead)
        found = tried.found
        if tried.got and found.owner != self.owner:
            log.info("took over the notifier lease", extra={
                "previous_pid": found.pid, "previous_host": found.host, "generation": tried.generation,
                "previous_expired_ms_ago": found.db_now - found.expires_at, "previous_dead": tried.holder_dead})
        elif not tried.got and found.owner != self.owner:
            self.holder = f"pid {found.pid} on {found.host}"
        self.generation = tried.generation if tried.got else self.generation
        # Stop sending a little before the lease runs out, should renewing fail.
        self._valid_until = started + (self.ttl_ms - lease_margin_ms(self.ttl_ms)) / 1000 if tried.got else 0.0
        self._renewed_at = started
        return tried.got

    def release(self) -> None:
        self._valid_until = 0.0
        try:
            release_lease(self.store, self.NAME, self.owner)
        except SQLAlchemyError:
            log.warning("could not release the notifier lease; it expires by itself", exc_info=True)
