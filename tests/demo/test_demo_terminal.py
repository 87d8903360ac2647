"""`fleetwatch demo` and `fleetwatch run` as a person sees them at a terminal, and as CI reads them without one.

Each command runs as a real subprocess (embedded Tansu, Spark, the dashboard under gunicorn, the
notifier and the demo's webhook receiver) under a real pseudo-terminal 120 columns wide, or with
its output to a file. Ctrl-C is SIGINT to the command's process group, as a terminal sends it.
Every wait is a poll with a deadline; the 90 s of the line count is the period the issue names.

The terminal demo runs as `make demo` runs it, with `--real-kafka`: its real Kafka 4.4 cluster (1
controller, 3 brokers, JVMs from the Maven Central jars) freezes broker 3 with SIGSTOP 45 s after
it is up, for 25 s. That alert must name the cluster the probe reports for target
`real-kafka-4.4`, be delivered to the demo's receiver, and resolve once the broker is thawed;
Ctrl-C must leave no Kafka JVM behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import re
import signal
import sqlite3
import struct
import subprocess
import sys
import termios
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import psutil
import pytest
import yaml

from streaming.polling import poll
from streaming.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
WATCH_S = 90  # issue 20: at most 20 lines in the demo's first 90 s
MAX_LINES = 20
# On a loaded 2-core machine Spark's first micro-batch alone has taken 45 s.
DELIVERED_WITHIN_S = 240
FORBIDDEN = ("WARN", "Traceback", "Python worker", "development server")
T = TypeVar("T")


class Terminal:
    """A pseudo-terminal; a thread keeps everything the command writes to it."""

    def __init__(self, rows: int = 40, columns: int = 120) -> None:
        self._master, self._slave = pty.openpty()
        fcntl.ioctl(self._slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self._data = bytearray()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)

    def spawn(self, *args: str) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            [sys.executable, "-m", "streaming.cli", *args], cwd=ROOT,
            stdin=self._slave, stdout=self._slave, stderr=self._slave,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
            start_new_session=True)  # its own group: one SIGINT like a terminal's Ctrl-C reaches all of it
        os.close(self._slave)
        self._reader.start()
        return process

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._master, 65536)
            except OSError:  # EIO: every process holding the terminal has exited
                return
            if not chunk:
                return
            with self._lock:
                self._data += chunk

    def text(self) -> str:
        with self._lock:
            return self._data.decode(errors="replace")

    def close(self) -> None:
        self._reader.join(timeout=10)
        os.close(self._master)


def descendants(process: subprocess.Popen[bytes]) -> set[psutil.Process]:
    """The command's descendants (Tansu, gunicorn and Kafka run in sessions of their own, still its children)."""
    with contextlib.suppress(psutil.NoSuchProcess):
        return set(psutil.Process(process.pid).children(recursive=True))
    return set()


def _left_running(family: set[psutil.Process]) -> list[psutil.Process]:
    alive = []
    for p in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:  # PID 1 here may never reap orphans
                alive.append(p)
    return alive


def ctrl_c(process: subprocess.Popen[bytes], family: set[psutil.Process]) -> int | None:
    """SIGINT to the group; the exit code (None: still running after 90 s, then killed with what it left)."""
    family |= descendants(process)
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
    try:
        code: int | None = process.wait(timeout=90)
    except subprocess.TimeoutExpired:
        code = None
    # The JVM and Kafka may take a moment after the command itself has gone.
    with contextlib.suppress(AssertionError):  # what is left after 20 s is killed below, and reported
        poll(lambda: not _left_running(family), 20, "the demo's processes to exit", interval_s=0.2)
    left = _left_running(family)
    for p in left:  # only ours, by id, and only after the deadline
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    if code is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    assert not left, f"left running: {[(p.pid, p.name()) for p in left]}"
    return code


def wait_until(what: str, check: Callable[[], T], timeout_s: float, process: subprocess.Popen[bytes],
           output: Callable[[], str], interval_s: float = 0.25) -> T:
    """Poll check() until it returns something truthy; fail at the deadline, or at once if the command exits."""
    def checked() -> T:
        value = check()
        if not value and process.poll() is not None:
            raise AssertionError(f"exited ({process.returncode}) before {what}:\n{output()[-3000:]}")
        return value

    return poll(checked, timeout_s, what, interval_s=interval_s, retry_on=())


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _received(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


REAL_HEARTBEAT_LOST = """
SELECT a.alert_id, a.status FROM alerts a JOIN targets t ON t.last_cluster_id = a.cluster_id
WHERE t.target = 'real-kafka-4.4' AND a.rule = 'broker.heartbeat_lost' AND a.broker_id = 3
"""


def _real_heartbeat_lost(db: Path) -> list[tuple[str, str]]:
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
            return conn.execute(REAL_HEARTBEAT_LOST).fetchall()
    except sqlite3.OperationalError:  # not created yet
        return []


def _delivered(db: Path) -> int:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
        return conn.execute("SELECT count(*) FROM deliveries WHERE state = 'delivered'").fetchone()[0]


@pytest.mark.spark
@pytest.mark.broker
@pytest.mark.real_kafka
def test_demo_on_a_terminal_shows_a_banner_one_status_line_and_delivers_alerts(tmp_path: Path) -> None:
    port, workdir = free_port(), tmp_path / "demo"
    url = f"http://127.0.0.1:{port}"
    terminal = Terminal()
    started = time.monotonic()
    demo = terminal.spawn("demo", "--clusters", "3", "--brokers", "3", "--port", str(port), "--workdir", str(workdir),
                          "--first-fault-s", "10", "--fault-every-s", "30", "--real-kafka")
    family: set[psutil.Process] = set()
    try:
        wait_until("the dashboard's URL on the terminal", lambda: url in terminal.text(), 60, demo, terminal.text)
        wait_until("the dashboard answering HTTP 200", lambda: _answers(url), 90, demo, terminal.text)

        def watched() -> bool:
            family.update(descendants(demo))
            return time.monotonic() - started >= WATCH_S

        wait_until(f"{WATCH_S} s of the demo", watched, WATCH_S + 10, demo, terminal.text, interval_s=1.0)
        first_90_s = terminal.text()
        received = wait_until("an alert at the demo's receiver", lambda: _received(workdir / "received.jsonl"),
                          DELIVERED_WITHIN_S - (time.monotonic() - started), demo, terminal.text)
        # The status line counts deliveries from the store: wait for it to show this one.
        wait_until("the status line counting the delivery",
               lambda: any(int(n) >= 1 for n in re.findall(r"\| (\d+) delivered", terminal.text())), 30, demo,
               terminal.text)
        # The real cluster's frozen broker: alerted, delivered, resolved once thawed, delivered again.
        family.update(descendants(demo))  # the Kafka JVMs run in sessions of their own
        firing = wait_until("the real broker 3's heartbeat_lost",
                            lambda: _real_heartbeat_lost(workdir / "fleetwatch.db"),
                            300 - (time.monotonic() - started), demo, terminal.text)
        family.update(descendants(demo))
        alert_id = firing[0][0]

        def real_alert_received(status: str) -> bool:
            return any(r["alert"]["alert_id"] == alert_id and r["alert"]["status"] == status
                       for r in _received(workdir / "received.jsonl"))

        wait_until("the real alert at the receiver", lambda: real_alert_received("firing"), 60, demo, terminal.text)
        wait_until("the real alert resolved and delivered", lambda: real_alert_received("resolved"), 120, demo,
                   terminal.text)
    finally:
        code = ctrl_c(demo, family)
        terminal.close()
    screen = terminal.text()
    statuses = [part for part in screen.split("\r\x1b[K") if "events/s" in part]
    print(f"\n{first_90_s.count(chr(10))} lines in the first {WATCH_S} s, {screen.count(chr(10))} in all "
          f"({time.monotonic() - started:.0f} s); last status line: {statuses[-1] if statuses else None}")
    assert first_90_s.count("\n") <= MAX_LINES, first_90_s
    assert screen.count("\n") <= MAX_LINES, screen
    for word in FORBIDDEN:
        assert word not in screen, f"{word!r} on the terminal:\n{screen}"
    assert url in first_90_s
    assert str(workdir / "fleetwatch.log") in first_90_s  # where the logs went
    redraws = screen.count("\r\x1b[K")
    assert redraws >= WATCH_S / 2, f"the status line was redrawn {redraws} times"
    assert re.search(r"\d+ batch(es)? \| [\d,-]+ events/s \| lag ", screen), "no status line with numbers"
    assert received[0]["signature"] == "verified" and received[0]["alert"]["rule"], received[0]
    assert _delivered(workdir / "fleetwatch.db") >= 1
    assert code == 0, f"the demo exited {code}:\n{screen}"
    closing = [line for line in screen.split("\n") if "fleetwatch demo stopped after" in line]
    assert len(closing) == 1 and screen.rstrip().endswith(f"logs in {workdir / 'fleetwatch.log'}"), screen[-500:]
    # Everything else went to the log, as JSON lines: Spark's JVM, its Python workers, the dashboard.
    records = [json.loads(line) for line in (workdir / "fleetwatch.log").read_text().splitlines()]
    loggers = {r["logger"].split(".")[0] for r in records}
    assert {"streaming", "spark", "dashboard"} <= loggers, loggers


@pytest.mark.spark
@pytest.mark.broker
def test_demo_without_a_terminal_writes_json_lines_only(tmp_path: Path) -> None:
    port, workdir, out = free_port(), tmp_path / "demo", tmp_path / "demo.out"

    def records() -> list[dict]:
        return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]

    with open(out, "wb") as sink:  # a file, not a pipe: a full pipe would block the demo
        demo = subprocess.Popen(
            [sys.executable, "-m", "streaming.cli", "demo", "--clusters", "2", "--brokers", "3", "--port", str(port),
             "--workdir", str(workdir)],
            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable}, start_new_session=True)
    family: set[psutil.Process] = set()
    try:
        # Once the job runs, Spark's JVM and the dashboard have both written something.
        wait_until("the job started", lambda: any(r["msg"] == "job started" for r in records()), 180, demo,
               out.read_text)
        family |= descendants(demo)
    finally:
        code = ctrl_c(demo, family)
    lines = [line for line in out.read_text().splitlines() if line.strip()]
    for line in lines:
        record = json.loads(line)  # every line, Spark's and the dashboard's included
        assert {"ts", "level", "logger", "msg"} <= set(record), line
    got = records()
    assert any(r["logger"].startswith("spark.") and r["level"] == "warning" for r in got)
    assert any(r["logger"] == "dashboard" for r in got)
    assert not any("development server" in line for line in lines)
    banner = next(r for r in got if r["msg"].startswith("fleetwatch demo:"))
    assert banner["dashboard"] == f"http://127.0.0.1:{port}"
    assert got[-1]["msg"].startswith("fleetwatch demo stopped after"), got[-1]
    assert code == 0


@pytest.mark.spark
@pytest.mark.broker
def test_run_on_a_terminal_shows_a_banner_and_a_status_line(tmp_path: Path) -> None:
    config = tmp_path / "fleetwatch.yaml"
    config.write_text(yaml.safe_dump({
        "store": {"url": f"sqlite:///{tmp_path / 'fleetwatch.db'}"},
        "spark": {"master": "local[2]", "checkpoint_dir": str(tmp_path / "checkpoint")}}))
    log_file = tmp_path / "run.log"
    terminal = Terminal()
    run = terminal.spawn("run", "--config", str(config), "--log-file", str(log_file))
    family: set[psutil.Process] = set()
    try:
        # Stop only once the job runs (Spark's own SIGINT handler is gone by then).
        wait_until("the status line of a running job", lambda: "waiting for the first micro-batch" in terminal.text(),
               180, run, terminal.text)
        family |= descendants(run)
    finally:
        code = ctrl_c(run, family)
        terminal.close()
    screen = terminal.text()
    assert screen.startswith("fleetwatch run: the streaming job"), screen
    assert f"{log_file} (--verbose shows them here)" in screen
    assert screen.count("\n") <= 10, screen
    for word in FORBIDDEN:
        assert word not in screen, f"{word!r} on the terminal:\n{screen}"
    assert "fleetwatch run stopped after" in screen.rsplit("\r\x1b[K", 1)[-1]
    assert code == 0
    loggers = {json.loads(line)["logger"].split(".")[0] for line in log_file.read_text().splitlines()}
    assert {"streaming", "spark"} <= loggers
