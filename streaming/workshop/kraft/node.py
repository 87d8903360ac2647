"""One Kafka process of a `KRaftCluster`: its id, roles, ports, folder and JVM, its clock (a node can
run with its wall clock shifted, through libfaketime), and the error a node that did not format or
start raises."""

from __future__ import annotations

import glob
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from streaming.plumbing.errors import SetupFailure

__all__ = ["KafkaNode", "NodeFailed", "clock_environment"]

# Debian's `faketime` package (libfaketime); the Makefile's `system` target installs it.
_LIBFAKETIME = ("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/*/faketime/libfaketime.so.1",
                "/usr/local/lib/faketime/libfaketime.so.1")


class NodeFailed(SetupFailure):
    """A node did not format or start; the message names its log file."""


@dataclass
class KafkaNode:
    """One Kafka process: its id, roles, ports and folder."""

    node_id: int
    roles: tuple[str, ...]
    workdir: Path
    client_port: int | None = None  # PLAINTEXT listener (brokers)
    secure_port: int | None = None  # SASL_SSL listener (brokers of a cluster with `secure`)
    controller_port: int | None = None  # CONTROLLER listener (controllers)
    metrics_port: int | None = None  # the Prometheus JMX exporter agent's HTTP port (controllers of `metrics_exporter`)
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    started_s: float | None = None  # seconds from spawn to "Kafka Server started", last start
    # Seconds the node's wall clock (System.currentTimeMillis) runs ahead (negative: behind) of the
    # machine's, from its next start: a controller with a wrong clock.
    clock_offset_s: float = 0.0

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def metrics_url(self) -> str | None:
        return None if self.metrics_port is None else f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def log_path(self) -> Path:
        return self.workdir / "server.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def rss_bytes(self) -> int:
        """Resident memory of the node's JVM (0 when not running)."""
        if not self.running or self.process is None:
            return 0
        try:
            for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def signal(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, sig)


def clock_environment(offset_s: float) -> dict[str, str]:
    """Environment entries that start a process with its wall clock `offset_s` seconds off (libfaketime:
    LD_PRELOAD, FAKETIME); empty for 0. Raises NodeFailed when libfaketime is not installed."""
    if not offset_s:
        return {}
    library = next((hit for pattern in _LIBFAKETIME for hit in sorted(glob.glob(pattern))), None)
    if library is None:
        raise NodeFailed("a shifted clock needs libfaketime: apt-get install faketime")
    # The monotonic clock moves by the same constant (its differences are unchanged): leaving it alone
    # (FAKETIME_DONT_FAKE_MONOTONIC) made a JVM start 15x slower, measured. File times stay real.
    return {"LD_PRELOAD": library, "FAKETIME": f"{offset_s:+g}s", "NO_FAKE_STAT": "1"}
