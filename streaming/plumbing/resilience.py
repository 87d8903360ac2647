"""Riding out outages: store retries with backoff, and warnings that repeat at a bounded rate.

The streaming job must outlive a database restart or a bus outage (deploy/README.md, "The
streaming job"): a micro-batch whose store write fails on a transient error waits and retries,
the same batch, until the store is back; any other store error (a schema error such as "no such
table", a read-only or full database file, bad credentials, a data error) fails at once with a
one-line message (`StoreFailure`): waiting would stall the job without curing it.

Transient is decided by the database's own error code where there is one (`is_transient`):
SQLite's result code (SQLITE_BUSY, SQLITE_LOCKED, SQLITE_PROTOCOL); PostgreSQL's SQLSTATE (class
08 connection exceptions, 57P01-57P03 and 57P05 shutdown, crash and start-up, 53300 too many
connections, 55P03 lock not available, 40001 serialization failure, 40P01 deadlock); and,
without a code, a driver error raised before any server answered (connection refused, lost or
closed), a connection SQLAlchemy found invalidated, or the pool's timeout.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from streaming.plumbing.errors import FleetwatchError, StoreFailure, first_line

__all__ = [
    "BACKOFF_FIRST_S",
    "BACKOFF_MAX_S",
    "Stopping",
    "StoreFailure",
    "Throttle",
    "backoff_delay",
    "is_transient",
    "retry_store",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 10.0


class Stopping(FleetwatchError):
    """The process was asked to stop while it waited for the store."""


# SQLite primary result codes (https://sqlite.org/rescode.html) a wait may cure: another connection
# holds a lock. An extended code (SQLITE_BUSY_SNAPSHOT, ...) carries its primary code in the low byte.
_SQLITE_TRANSIENT = {5: "SQLITE_BUSY", 6: "SQLITE_LOCKED", 15: "SQLITE_PROTOCOL"}
# PostgreSQL SQLSTATEs a wait may cure (https://www.postgresql.org/docs/current/errcodes-appendix.html),
# besides class 08 (connection exception).
_PG_TRANSIENT = {
    "40001",  # serialization_failure
    "40P01",  # deadlock_detected
    "53300",  # too_many_connections
    "55P03",  # lock_not_available
    "57P01",  # admin_shutdown
    "57P02",  # crash_shutdown
    "57P03",  # cannot_connect_now (starting up, shutting down, in recovery)
    "57P05",  # idle_session_timeout
}


def is_transient(exc: BaseException) -> bool:
    """A store error that waiting may cure: the server is down, restarting, unreachable or busy,
    or the database is locked. Decided by the database's error code (module docstring)."""
    # SQLAlchemy is imported where it is used: the readers import this module for `Throttle`, and
    # each of Spark's planner processes would load SQLAlchemy for nothing (0.15 s of CPU each).
    from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    if isinstance(exc, PoolTimeout):  # every pooled connection busy for pool_timeout
        return True
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:  # SQLAlchemy saw the connection die (server gone, network cut)
        return True
    orig = exc.orig
    code = getattr(orig, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in _SQLITE_TRANSIENT
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)  # psycopg 3, psycopg2
    if isinstance(sqlstate, str) and sqlstate:
        return sqlstate.startswith("08") or sqlstate in _PG_TRANSIENT
    if type(orig).__module__.partition(".")[0] == "sqlite3":
        return False  # SQLite without a result code: never a server to wait for
    # A server driver's error without SQLSTATE was raised before the server answered: connection
    # refused, lost, or closed by the server.
    return isinstance(exc, OperationalError | InterfaceError)


def backoff_delay(attempt: int, first_s: float = BACKOFF_FIRST_S, max_s: float = BACKOFF_MAX_S) -> float:
    """Seconds to wait before retry number `attempt` (1, 2, ...): doubling from `first_s`, at most `max_s`."""
    return min(max_s, first_s * 2 ** min(attempt - 1, 32))


def retry_store(action: Callable[[], T], *, what: str, stop: threading.Event | None = None,
                on_retry: Callable[[], Any] | None = None) -> T:
    """Run `action` until it does not fail on a transient store error, waiting `backoff_delay`
    between attempts. One structured warning per retry: with the backoff, at most one line every
    10 s during a long outage. Raises `Stopping` once `stop` is set, and `StoreFailure` (one line,
    logged once, the cause chained) at once for any other store error."""
    from sqlalchemy.exc import SQLAlchemyError  # see is_transient

    attempt = 0
    while True:
        try:
            result = action()
        except SQLAlchemyError as exc:
            error = first_line(exc, named=True)
            if not is_transient(exc):
                failure = StoreFailure(f"cannot {what}: {error} (not a transient store error: not retried)")
                log.error("store error, not retried", extra={"what": what, "error": error})
                raise failure from exc
            attempt += 1
            delay = backoff_delay(attempt)
            if on_retry is not None:
                on_retry()
            log.warning("store unavailable, retrying", extra={"what": what, "attempt": attempt,
                                                              "retry_in_s": delay, "error": error})
            if stop is not None and stop.wait(delay):
                raise Stopping(f"stopped while waiting for the store to {what}") from exc
            if stop is None:
                time.sleep(delay)
            continue
        if attempt:
            log.info("store available again", extra={"what": what, "attempts": attempt + 1})
        return result


class Throttle:
    """At most one log line per `every_s` for a repeated condition; the lines in between are
    counted and the next line that passes says how many were held back."""

    def __init__(self, every_s: float = 30.0) -> None:
        self.every_s = every_s
        self._last = float("-inf")
        self._held = 0
        self._lock = threading.Lock()

    def warning(self, logger: logging.Logger, msg: str, **fields: Any) -> bool:
        """Log `msg` with `fields` unless a line passed less than `every_s` ago; True when logged."""
        with self._lock:
            now = time.monotonic()
            if now - self._last < self.every_s:
                self._held += 1
                return False
            held, self._held, self._last = self._held, 0, now
        logger.warning(msg, extra={**fields, "repeats_held_back": held})
        return True
