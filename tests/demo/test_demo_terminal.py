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

The same demo is watched in headless Chromium meanwhile (issue 6): the first firing alert's
cluster turns on the overview from `sev-healthy` to a severity within 15 s of the alert landing in
the store, and the deliveries page shows that alert delivered to the demo's receiver (screenshots
in artifacts/screenshots/demo-overview-alert.png and demo-deliveries.png). One demo for both: each
costs a Spark job, a Kafka cluster and about a minute of 2 cores.
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
from typing import NamedTuple, TypeVar

import psutil
import pytest
import yaml
from selenium.common.exceptions import StaleElementReferenceException

from streaming.demo import RECEIVER
from streaming.plumbing.ports import free_port
from streaming.workshop.polling import poll

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
WATCH_S = 90  # issue 20: at most 20 lines in the demo's first 90 s
MAX_LINES = 20
# On a loaded 2-core machine Spark's first micro-batch alone has taken 45 s.
DELIVERED_WITHIN_S = 240
FORBIDDEN = ("WARN", "Traceback", "Python worker", "development server")
SHOW_WITHIN_S = 15.0  # issue 6: the overview shows a fault within 15 s of its alert
# The first alert lands ~45 s after start. On a loaded machine the job can lag so far behind that
# the first fault fires and resolves in one catch-up batch (never firing in the store): the
# next fault comes 30 s later, hence the margin.
FIRST_ALERT_S = 150.0
T = TypeVar("T")


def _without_restart_reasons(screen: str) -> str:
    return re.sub(r"query restarted [^\r\n]*", "query restarted", screen)


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


# The alert's cluster as the overview attributes it (dashboard/queries/shared.py `attributed_cluster`):
# target alerts may carry no cluster id and then count against their target's cluster.
FIRST_FIRING = """
SELECT a.alert_id, a.rule, a.severity, a.recorded_at,
       COALESCE(a.cluster_id, t.pinned_cluster_id, t.last_cluster_id)
FROM alerts a LEFT JOIN targets t ON t.target = a.target
WHERE a.status = 'firing' ORDER BY a.recorded_at, a.alert_id LIMIT 1
"""
# One atomic snapshot of the overview's rows: data-cluster -> class ("cluster-row sev-<severity>").
ROWS_JS = ("return Array.from(document.querySelectorAll('#overview-body .cluster-row'),"
           " r => [r.getAttribute('data-cluster'), r.className]);")


class FirstAlert(NamedTuple):
    alert_id: str
    rule: str
    severity: str
    recorded_at_ms: int
    cluster_id: str | None
    seen_at: float  # wall time (time.time()) a poll of the store first saw the row


def _first_firing(db: Path) -> FirstAlert | None:
    if not db.exists():  # the demo creates it once Spark and the store are up
        return None
    try:
        # mode=ro: never take the writer's lock; the demo's open connection keeps the WAL's -shm.
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
            row = conn.execute(FIRST_FIRING).fetchone()
    except sqlite3.OperationalError:  # schema not created yet
        return None
    return None if row is None else FirstAlert(*row, seen_at=time.time())


def _overview_turns_faulted(dash_br, url: str, db: Path, demo: subprocess.Popen[bytes], output: Callable[[], str],
                            family: set[psutil.Process]) -> tuple[FirstAlert, float, dict[str, float], str]:
    """Watch the store (for the first firing alert) and the overview's rows (each cluster's first
    healthy and first faulted sighting) in one poll every 100 ms, until the alert's cluster shows
    faulted: (the alert, when it showed faulted, first healthy sightings, the severity shown)."""
    dash_br.wait_for_page(url=url, timeout=20)
    healthy_at: dict[str, float] = {}  # cluster -> first poll that showed it sev-healthy
    faulted_at: dict[str, tuple[float, str]] = {}  # cluster -> first poll showing a severity
    landed: list[FirstAlert] = []

    def shows_fault() -> tuple[FirstAlert, float] | None:
        family.update(descendants(demo))
        if not landed and (alert := _first_firing(db)) is not None:
            landed.append(alert)
        now = time.time()
        for cluster, classes in dash_br.driver.execute_script(ROWS_JS):
            severity = re.search(r"\bsev-(\w+)", classes or "")
            if severity and severity.group(1) == "healthy":
                healthy_at.setdefault(cluster, now)
            elif severity:
                faulted_at.setdefault(cluster, (now, severity.group(1)))
        if not landed or landed[0].cluster_id not in faulted_at:
            return None
        return landed[0], faulted_at[landed[0].cluster_id][0]

    alert, shown_at = wait_until("the first alert's cluster faulted on the overview", shows_fault,
                                 FIRST_ALERT_S + SHOW_WITHIN_S, demo, output, interval_s=0.1)
    return alert, shown_at, healthy_at, faulted_at[alert.cluster_id][1]


@pytest.mark.spark
@pytest.mark.broker
@pytest.mark.real_kafka
@pytest.mark.browser
def test_demo_on_a_terminal_shows_a_banner_one_status_line_and_delivers_alerts(dash_br, tmp_path: Path) -> None:
    port, workdir = free_port(), tmp_path / "demo"
    url = f"http://127.0.0.1:{port}"
    terminal = Terminal()
    started = time.monotonic()
    # The first simulated fault 30 s after the job starts, as `make demo` has it: the job's first
    # micro-batch (its clusters healthy on the overview) comes before it, also at load 8 (CI, stop
    # 37: when the fleet's clock started before Spark, the first batch already held the fault).
    demo = terminal.spawn("demo", "--clusters", "3", "--brokers", "3", "--port", str(port), "--workdir", str(workdir),
                          "--fault-every-s", "30", "--real-kafka")
    family: set[psutil.Process] = set()
    try:
        wait_until("the dashboard's URL on the terminal", lambda: url in terminal.text(), 60, demo, terminal.text)
        wait_until("the dashboard answering HTTP 200", lambda: _answers(url), 90, demo, terminal.text)
        alert, shown_at, healthy_at, shown_severity = _overview_turns_faulted(
            dash_br, url + "/", workdir / "fleetwatch.db", demo, terminal.text, family)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        dash_br.driver.set_window_size(1400, 1000)
        dash_br.driver.save_screenshot(str(SCREENSHOTS / "demo-overview-alert.png"))

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

        # The webhook third of the product on the dashboard: the deliveries page shows the first
        # alert delivered to the demo's own receiver.
        dash_br.wait_for_page(url=url + "/deliveries", timeout=20)
        row = f'.delivery-row[data-alert="{alert.alert_id}"]'

        def delivered_rows() -> list[list[str]]:
            try:
                cells = [[td.text for td in r.find_elements("css selector", "td")] for r in dash_br.find_elements(row)]
            except StaleElementReferenceException:  # the page redrew the table between the two reads: look again
                return []
            return [c for c in cells if len(c) > 4 and c[3] == "firing" and c[4] == "delivered"]

        [cells] = wait_until("the first alert delivered on the deliveries page", delivered_rows, 60, demo,
                             terminal.text, interval_s=0.2)
        dash_br.driver.save_screenshot(str(SCREENSHOTS / "demo-deliveries.png"))
    finally:
        code = ctrl_c(demo, family)
        terminal.close()
    screen = terminal.text()
    statuses = [part for part in screen.split("\r\x1b[K") if "events/s" in part]
    print(f"\n{first_90_s.count(chr(10))} lines in the first {WATCH_S} s, {screen.count(chr(10))} in all "
          f"({time.monotonic() - started:.0f} s); last status line: {statuses[-1] if statuses else None}")
    delay = shown_at - alert.seen_at
    print(f"first alert {alert.rule} ({alert.severity}) on cluster {alert.cluster_id}: on the overview "
          f"{delay:.2f} s after it landed in the store, "
          f"{alert.seen_at - healthy_at.get(alert.cluster_id, float('inf')):.1f} s after it was first shown healthy")
    assert alert.cluster_id is not None, alert
    # Not showing before: an earlier poll saw that very row healthy while no alert had landed.
    assert healthy_at.get(alert.cluster_id, float("inf")) < alert.seen_at, (
        f"cluster {alert.cluster_id} never shown healthy before its alert: {healthy_at}")
    # The row shows its cluster's worst firing alert: at least this one's severity.
    ranks = ("info", "warning", "critical")
    assert ranks.index(shown_severity) >= ranks.index(alert.severity)
    assert delay <= SHOW_WITHIN_S, f"the overview showed the alert {delay:.1f} s after it landed"
    assert cells[0] == RECEIVER and cells[1] == alert.rule, cells
    assert first_90_s.count("\n") <= MAX_LINES, first_90_s
    assert screen.count("\n") <= MAX_LINES, screen
    # The status line names why the query last restarted (a Python worker that did not connect
    # back within Spark's 10 s, at load 8): the job's own word, not a log line on the terminal.
    shown = _without_restart_reasons(screen)
    for word in FORBIDDEN:
        assert word not in shown, f"{word!r} on the terminal:\n{screen}"
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
    shown = _without_restart_reasons(screen)
    for word in FORBIDDEN:
        assert word not in shown, f"{word!r} on the terminal:\n{screen}"
    assert "fleetwatch run stopped after" in screen.rsplit("\r\x1b[K", 1)[-1]
    assert code == 0
    loggers = {json.loads(line)["logger"].split(".")[0] for line in log_file.read_text().splitlines()}
    assert {"streaming", "spark"} <= loggers
