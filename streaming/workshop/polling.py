"""Waiting for something to happen by asking, with a deadline: the one way the tests, the benches and
the local clusters wait (no sleep as synchronisation)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["poll"]

T = TypeVar("T")


def poll(check: Callable[[], T], timeout_s: float, what: str | Callable[[], str], *, interval_s: float = 0.25,
         retry_on: tuple[type[Exception], ...] = (Exception,), error: type[Exception] = AssertionError) -> T:
    """Call `check()` until it returns something truthy and return that; after `timeout_s` raise
    `error` naming `what` (and the last exception the check raised). A callable `what` is asked at the
    deadline, so the message can say how far things got (the alerts still missing).

    An exception of `retry_on` counts as "not yet" (the thing polled for may not be up yet); any
    other ends the wait at once: a check raises one to give up early (a process that exited).
    """
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while True:
        try:
            value = check()
        except retry_on as exc:
            last_error, value = exc, None
        if value:
            return value
        if time.monotonic() >= deadline:
            awaited = what if isinstance(what, str) else what()
            hint = f" (last error: {last_error!r})" if last_error else ""
            raise error(f"timed out after {timeout_s:g} s waiting for {awaited}{hint}")
        time.sleep(interval_s)  # polling, bounded by the deadline
