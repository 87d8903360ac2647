"""`make demo` end to end: an injected fault shows on the overview within 15 s of its alert, and
the deliveries page shows it delivered to the demo's receiver.

The real demo runs as a subprocess (embedded Tansu, simulated fleet, Spark job, dashboard); one
thread watches its SQLite store for the first firing alert while headless Chromium watches the
overview page for that alert's cluster row turning from `sev-healthy` to a severity. Run with
`pytest -s tests/demo/test_demo_dashboard.py --headless --webdriver Chrome` to see the delay; the
screenshot lands in artifacts/screenshots/demo-overview-alert.png. Then, like Ctrl-C, SIGINT to
the demo's process group: it must exit 0 and leave no process (JVM, dashboard, Tansu) behind.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import pytest

from streaming.demo import RECEIVER
from streaming.polling import poll
from streaming.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
SHOW_WITHIN_S = 15.0  # issue 6: the overview shows a fault within 15 s of its alert
# The first alert lands ~45 s after start. On a loaded machine the job can lag so far behind that
# the first fault fires and resolves in one catch-up batch (never firing in the store): the
# next fault comes 60 s later, hence the margin.
FIRST_ALERT_S = 150.0

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


class Alert(NamedTuple):
    alert_id: str
    rule: str
    severity: str
    recorded_at_ms: int
    cluster_id: str | None
    seen_at: float  # wall time (time.time()) the poller first saw the row


def _alive(pids_of: Callable[[], set[int]]) -> set[int]:
    """Live (not zombie) processes among pids_of(): PID 1 here may never reap orphans."""
    alive = set()
    for pid in pids_of():
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if state != "Z":
            alive.add(pid)
    return alive


def _group(pgid: int) -> set[int]:
    """Every process of the process group (demo, dashboard, JVM, Python workers)."""
    pids = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[2]) == pgid:
            pids.add(int(stat.parent.name))
    return pids


def _tansu(log: Path) -> set[int]:
    """The demo's Tansu (its own session, so not in the demo's group), found by its listener."""
    found = re.search(r"embedded broker on ([\d.]+:\d+)", log.read_text(errors="replace"))
    if found is None:
        return set()
    needle = f"tcp://{found.group(1)}".encode()
    pids = set()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
            if needle in args and b"broker" in args:
                pids.add(int(cmdline.parent.name))
        except (FileNotFoundError, ProcessLookupError):
            continue
    return pids


def _first_alert(db: Path, demo: subprocess.Popen[bytes], stop: threading.Event) -> Alert:
    """Poll the store read-only every 100 ms until a firing alert lands."""
    conn: sqlite3.Connection | None = None

    def check() -> Alert | None:
        nonlocal conn
        if stop.is_set() or demo.poll() is not None:
            raise AssertionError(f"stopped before the first alert (demo exit code {demo.poll()})")
        if conn is None:
            if not db.exists():  # the demo creates it once Spark and the store are up
                return None
            # mode=ro: never take the writer's lock; the demo's open connection keeps the WAL's -shm.
            conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5, check_same_thread=False)
        try:
            row = conn.execute(FIRST_FIRING).fetchone()
        except sqlite3.OperationalError:  # schema not created yet
            return None
        return None if row is None else Alert(*row, seen_at=time.time())

    try:
        return poll(check, FIRST_ALERT_S, "the first firing alert in the store", interval_s=0.1, retry_on=())
    finally:
        if conn is not None:
            conn.close()


def _dashboard_up(url: str, demo: subprocess.Popen[bytes]) -> bool:
    if demo.poll() is not None:
        raise AssertionError(f"the demo exited ({demo.returncode}) before its dashboard answered")
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _leftovers(demo: subprocess.Popen[bytes], tansu: set[int]) -> set[int]:
    return _alive(lambda: _group(demo.pid) | tansu)


@pytest.mark.spark
@pytest.mark.broker
@pytest.mark.browser
def test_demo_fault_reaches_the_overview_within_15_s_of_its_alert(dash_br, tmp_path: Path) -> None:
    started = time.time()
    port, workdir, log = free_port(), tmp_path / "demo", tmp_path / "demo.log"
    url = f"http://127.0.0.1:{port}/"
    with open(log, "wb") as out:  # a file, not a pipe: a full pipe would block the demo
        demo = subprocess.Popen(
            [sys.executable, "-m", "streaming.cli", "demo", "--clusters", "3", "--brokers", "3",
             "--port", str(port), "--workdir", str(workdir)],
            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
            start_new_session=True)  # its own group: one SIGINT like a terminal's Ctrl-C, one cleanup
    stop = threading.Event()
    tansu: set[int] = set()
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        landed: Future[Alert] = pool.submit(_first_alert, workdir / "fleetwatch.db", demo, stop)
        poll(lambda: _dashboard_up(url, demo), 60.0, "the demo's dashboard answering", interval_s=0.2, retry_on=())
        tansu = _tansu(log)
        dash_br.wait_for_page(url=url, timeout=20)
        healthy_at: dict[str, float] = {}  # cluster -> first poll that showed it sev-healthy
        faulted_at: dict[str, tuple[float, str]] = {}  # cluster -> first poll showing a severity

        def shows_fault() -> tuple[Alert, float] | None:
            now = time.time()
            for cluster, classes in dash_br.driver.execute_script(ROWS_JS):
                severity = re.search(r"\bsev-(\w+)", classes or "")
                if severity and severity.group(1) == "healthy":
                    healthy_at.setdefault(cluster, now)
                elif severity:
                    faulted_at.setdefault(cluster, (now, severity.group(1)))
            if not landed.done():
                if demo.poll() is not None:
                    raise AssertionError(f"the demo exited ({demo.returncode}) before its first alert")
                return None
            alert = landed.result()  # re-raises the store poller's failure
            return (alert, faulted_at[alert.cluster_id][0]) if alert.cluster_id in faulted_at else None

        alert, shown_at = poll(shows_fault, FIRST_ALERT_S + SHOW_WITHIN_S + 15,
                               "the first alert's cluster faulted on the overview", interval_s=0.2, retry_on=())
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        dash_br.driver.set_window_size(1400, 1000)
        dash_br.driver.save_screenshot(str(SCREENSHOTS / "demo-overview-alert.png"))
        delay = shown_at - alert.seen_at
        print(f"\nfirst alert {alert.rule} ({alert.severity}) on cluster {alert.cluster_id}: in the store "
              f"{alert.seen_at - started:.1f} s after start, on the overview {delay:.2f} s after it landed "
              f"({shown_at - alert.recorded_at_ms / 1000:.2f} s after its recorded_at)")
        assert alert.cluster_id is not None, alert
        # Not showing before: an earlier poll saw that very row healthy while no alert had landed.
        assert healthy_at.get(alert.cluster_id, float("inf")) < alert.seen_at, (
            f"cluster {alert.cluster_id} never shown healthy before its alert: {healthy_at}")
        # The row shows its cluster's worst firing alert: at least this one's severity.
        ranks = ("info", "warning", "critical")
        assert ranks.index(faulted_at[alert.cluster_id][1]) >= ranks.index(alert.severity)
        assert delay <= SHOW_WITHIN_S, f"the overview showed the alert {delay:.1f} s after it landed"

        # The webhook third of the product: the demo's notifier delivers that alert to the demo's own
        # receiver, and the deliveries page shows it so.
        dash_br.wait_for_page(url=url + "deliveries", timeout=20)
        row = f'.delivery-row[data-alert="{alert.alert_id}"]'

        def delivered_rows() -> list[list[str]]:
            cells = [[td.text for td in r.find_elements("css selector", "td")] for r in dash_br.find_elements(row)]
            return [c for c in cells if len(c) > 4 and c[3] == "firing" and c[4] == "delivered"]

        [cells] = poll(delivered_rows, 60.0, "the first alert delivered on the deliveries page", interval_s=0.2,
                       retry_on=())
        assert cells[0] == RECEIVER and cells[1] == alert.rule, cells
        dash_br.driver.save_screenshot(str(SCREENSHOTS / "demo-deliveries.png"))
    finally:
        stop.set()
        pool.shutdown(wait=True)
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGINT)  # what Ctrl-C in `make demo` sends to the group
        try:
            code: int | None = demo.wait(timeout=60)
        except subprocess.TimeoutExpired:
            code = None
        # The JVM and Tansu may take a moment after the demo itself has gone.
        with contextlib.suppress(AssertionError):  # what is left after 20 s is killed below, and reported
            poll(lambda: not _leftovers(demo, tansu), 20, "the demo's processes to exit", interval_s=0.2)
        left = _leftovers(demo, tansu)
        for pid in left:  # only ours, by id, and only after the deadline
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        print(f"test wall time {time.time() - started:.1f} s")
    assert code == 0, f"the demo exited {code}:\n{log.read_text(errors='replace')[-3000:]}"
    assert not left, f"the demo left processes behind: {sorted(left)}"
