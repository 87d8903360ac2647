"""Real processes in tests: stopping a child (ports: streaming.plumbing.ports; polling: streaming.workshop.polling)."""

from __future__ import annotations

import os
import subprocess
from typing import Any

__all__ = ["stop_process"]

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
