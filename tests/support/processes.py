"""Real processes in tests: a free port on 127.0.0.1, polling with a deadline, stopping a child."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["free_port", "poll", "stop_process"]

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
