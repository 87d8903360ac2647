"""Riding out outages: store retries with backoff, and warnings that repeat at a bounded rate.

The streaming job must outlive a database restart or a bus outage (deploy/README.md, "The
streaming job"): a micro-batch whose store write fails on a transient error waits and retries,
the same batch, until the store is back; a data error (a bug: the contract bounds every value)
still fails.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["BACKOFF_FIRST_S", "BACKOFF_MAX_S", "Stopping", "Throttle", "backoff_delay", "is_transient",
           "one_line", "retry_store"]

log = logging.getLogger(__name__)

T = TypeVar("T")

BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 10.0


class Stopping(Exception):
    """The process was asked to stop while it waited for the store."""


def is_transient(exc: BaseException) -> bool:
    """A store error that waiting may cure: the server is down, restarting, unreachable or locked."""
    # SQLAlchemy is imported where it is used: the readers import this module for `Throttle`, and
    # each of Spark's planner processes would load SQLAlchemy for nothing (0.15 s of CPU each).
    from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

    if isinstance(exc, OperationalError | InterfaceError):
        return True
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


def backoff_delay(attempt: int, first_s: float = BACKOFF_FIRST_S, max_s: float = BACKOFF_MAX_S) -> float:
    """Seconds to wait before retry number `attempt` (1, 2, ...): doubling from `first_s`, at most `max_s`."""
    return min(max_s, first_s * 2 ** min(attempt - 1, 32))


def one_line(exc: BaseException) -> str:
    """An exception as one short log field (driver messages span lines and can be long)."""
    text = str(exc).strip().splitlines()
    return f"{exc.__class__.__name__}: {text[0][:300] if text else ''}"


def retry_store(action: Callable[[], T], *, what: str, stop: threading.Event | None = None,
                on_retry: Callable[[], Any] | None = None) -> T:
    """Run `action` until it does not fail on a transient store error, waiting `backoff_delay`
    between attempts. One structured warning per retry: with the backoff, at most one line every
    10 s during a long outage. Raises `Stopping` once `stop` is set, and any non-transient error."""
    from sqlalchemy.exc import SQLAlchemyError  # see is_transient

    attempt = 0
    while True:
        try:
            result = action()
        except SQLAlchemyError as exc:
            if not is_transient(exc):
                raise
            attempt += 1
            delay = backoff_delay(attempt)
            if on_retry is not None:
                on_retry()
            log.warning("store unavailable, retrying", extra={"what": what, "attempt": attempt,
                                                              "retry_in_s": delay, "error": one_line(exc)})
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
