"""Screenshots of every dashboard page over a realistic store, for the README.

    .venv/bin/python -m streaming.workshop.screenshots [--out dashboard/screenshots] [--clusters 40 --brokers 4]

The store is filled the way production fills it, live: an embedded Kafka-protocol broker (as
in `fleetwatch demo`), `fleetwatch simulate --bootstrap` producing a fleet's telemetry in real
time with a fault injected every few seconds, and `fleetwatch run` (the Spark job) detecting
into a SQLite store for `--seconds`; then `fleetwatch notify --once`, run twice, delivers the
alerts to webhook receivers this script serves on 127.0.0.1: `ops` takes everything, `pager`
(critical alerts) is overloaded and answers 503, `audit` (warnings) is gone and answers 410.
(A `fleetwatch replay` would fill the same tables, but runs a whole file as one micro-batch:
the pipeline charts would have one point.) Every third cluster gets no tags, the others an env
and a region. Then headless Chromium (Debian's `chromium` and `chromium-driver`) opens each page
and saves its first 1360 x 900 pixels as `<out>/<page>.png`. Needs Java; takes about 3 minutes.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from streaming.plumbing.receiver import Reply, Request, WebhookReceiver
from streaming.workshop.paths import ROOT

__all__ = ["PAGES", "LocalReceiver", "build_store", "main", "take_screenshots"]

WINDOW = (1360, 900)
ENVS = ("prod", "prod", "staging", "dev")
REGIONS = ("eu-west-1", "us-east-1", "ap-south-1")
# page name -> (path, CSS selector that is there once the page shows its data)
PAGES: dict[str, tuple[str, str]] = {
    "overview": ("/", "#fleet-map a.tile"),
    "cluster": ("", "#cluster-timeline .barlayer .point"),  # the worst cluster's page
    "alerts": ("/alerts", ".alert-row"),
    "deliveries": ("/deliveries", ".delivery-row"),
    "identity": ("/identity", "#registry .registry-row"),
    "pipeline": ("/pipeline", "#pipeline-charts .scatterlayer .point"),
    "runbook": ("/runbooks/broker.heartbeat_lost", "main.runbook h2"),  # a page of docs/runbooks/
}


class LocalReceiver:
    """A webhook receiver on 127.0.0.1 (streaming/plumbing/receiver.py): answers a POST with the status its
    path maps to (`statuses`, by path prefix; 200 otherwise) and keeps what it received."""

    def __init__(self, statuses: Mapping[str, int] | None = None) -> None:
        self.statuses = dict(statuses or {})
        self.received: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._receiver = WebhookReceiver(self._answer)
        self.port = self._receiver.port

    def _answer(self, request: Request) -> Reply:
        code = next((c for prefix, c in self.statuses.items() if request.path.startswith(prefix)), 200)
        with self._lock:
            self.received.append({"path": request.path, "status": code, "body": request.body})
        return Reply(code)

    def url(self, path: str) -> str:
        return self._receiver.url(path)

    def start(self) -> LocalReceiver:
        self._receiver.start()
        return self

    def stop(self) -> None:
        self._receiver.stop()


def _fleetwatch(*args: str, log: Path) -> subprocess.Popen[bytes]:
    """Start a fleetwatch command in its own process group, its output appended to `log`."""
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "streaming.cli", *args], cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _finish(process: subprocess.Popen[bytes], what: str, ok: tuple[int, ...] = (0,), timeout_s: float = 120) -> None:
    try:
        code = process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise SystemExit(f"{what} did not finish within {timeout_s:.0f} s") from None
    if code not in ok:
        raise SystemExit(f"{what} failed (exit {code}); see its log")


def _count(store_url: str, table: str) -> int:
    from sqlalchemy import func, select

    from streaming.store import Store, metadata

    store = Store(store_url)
    try:
        with store.engine.connect() as conn:
            return conn.scalar(select(func.count()).select_from(metadata.tables[table])) or 0
    finally:
        store.close()


def _target_tags(store_url: str) -> dict[str, dict[str, str]]:
    """Tags for the targets the job saw: an env and a region, none for every third one."""
    from sqlalchemy import select

    from streaming.store import Store, targets

    store = Store(store_url)
    with store.engine.connect() as conn:
        names = list(conn.scalars(select(targets.c.target).order_by(targets.c.target)))
    store.close()
    return {name: {"env": ENVS[i % len(ENVS)], "region": REGIONS[i % len(REGIONS)]}
            for i, name in enumerate(names) if i % 3 != 2}


def build_store(workdir: Path, receiver: LocalReceiver, *, clusters: int, brokers: int,
                seconds: int) -> tuple[str, dict[str, dict[str, str]]]:
    """Run the fleet live for `seconds` into a SQLite store under `workdir`, then the notifier;
    returns the store's URL and the clusters' tags (by target name)."""
    from streaming.bus import EmbeddedBus
    from streaming.records import topics

    store_url = f"sqlite:///{workdir / 'fleetwatch.db'}"
    config, log = workdir / "fleetwatch.yaml", workdir / "fleetwatch.log"
    with EmbeddedBus(topics=topics.ALL, log_path=workdir / "tansu.log") as bus:
        config.write_text(json.dumps({
            "bus": {"bootstrap_servers": bus.bootstrap},
            "store": {"url": store_url},
            "spark": {"master": "local[2]", "checkpoint_dir": str(workdir / "checkpoint")},
            "alerting": {
                "receivers": [{"name": "ops", "type": "webhook", "url": receiver.url("/ops?token=not-on-the-page")},
                              {"name": "pager", "type": "webhook", "url": receiver.url("/busy")},
                              {"name": "audit", "type": "webhook", "url": receiver.url("/gone")}],
                "routes": [{"receiver": "ops"}, {"receiver": "pager", "match": {"severity": ["critical"]}},
                           {"receiver": "audit", "match": {"severity": ["warning"]}}]},
        }), encoding="utf-8")  # JSON is YAML
        # Faults come every few seconds, so that several are under way when the picture is taken.
        simulate = _fleetwatch("simulate", "--bootstrap", bus.bootstrap, "--clusters", str(clusters),
                               "--brokers", str(brokers), "--faults", "all", "--duration", str(4 * seconds),
                               "--fault-every", str(max(seconds // 25, 2)), log=log)
        job = _fleetwatch("run", "--config", str(config), log=log)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if job.poll() is not None or simulate.poll() is not None:
                raise SystemExit(f"the job or the simulator stopped early; see {log}")
            time.sleep(1)
        for process in (simulate, job):
            os.killpg(process.pid, signal.SIGINT)  # as Ctrl-C: the job finishes its micro-batch
        _finish(simulate, "fleetwatch simulate", ok=(0, 130))
        _finish(job, "fleetwatch run")
    if not _count(store_url, "pipeline_progress"):
        raise SystemExit(f"the job recorded no micro-batch in {seconds} s; see {log}")
    notify = ("notify", "--config", str(config), "--once", "--group-wait-ms", "0", "--retry-base-ms", "500")
    # notify --once exits 1 when a delivery failed: here that is part of the picture.
    _finish(_fleetwatch(*notify, log=log), "fleetwatch notify", ok=(0, 1))
    time.sleep(1.5)  # past the first retry's back-off, so the overloaded receiver is tried again
    _finish(_fleetwatch(*notify, log=log), "fleetwatch notify", ok=(0, 1))
    return store_url, _target_tags(store_url)


def _chrome(window: tuple[int, int]):
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--force-device-scale-factor=1",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                f"--window-size={window[0]},{window[1]}"):
        options.add_argument(arg)
    return webdriver.Chrome(options=options)


def take_screenshots(store_url: str, tags: Mapping[str, Mapping[str, str]], out: Path,
                     window: tuple[int, int] = WINDOW) -> list[Path]:
    """Serve the dashboard over the store and save each page of PAGES as `<out>/<name>.png`."""
    from selenium.webdriver.support.wait import WebDriverWait
    from werkzeug.serving import make_server

    from dashboard import create_app
    from dashboard.queries.fleet import fleet_overview
    from dashboard.views.elements import cluster_path
    from streaming.store import Store

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line per request
    app = create_app(store_url, tags=tags)
    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    store = Store(store_url)
    worst = fleet_overview(store.engine)[0]["cluster_id"]
    store.close()
    out.mkdir(parents=True, exist_ok=True)
    driver = _chrome(window)
    # Exactly `window` pixels of page, whatever the browser's own frame takes.
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": window[0], "height": window[1], "deviceScaleFactor": 1, "mobile": False})
    saved = []
    try:
        for name, (path, ready) in PAGES.items():
            driver.get(base + (path or cluster_path(worst)))
            WebDriverWait(driver, 30).until(lambda d, css=ready: d.find_elements("css selector", css),
                                            f"{name}: {ready} never appeared")
            time.sleep(0.5)  # let plotly finish its transitions before the picture
            target = out / f"{name}.png"
            driver.save_screenshot(str(target))
            saved.append(target)
    finally:
        driver.quit()
        server.shutdown()
    return saved


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "dashboard" / "screenshots", help="where the PNGs go")
    p.add_argument("--clusters", type=int, default=40, help="simulated clusters (default 40)")
    p.add_argument("--brokers", type=int, default=4, help="brokers per cluster (default 4)")
    p.add_argument("--seconds", type=int, default=150, help="how long the fleet runs live (default 150)")
    p.add_argument("--workdir", type=Path, help="keep the config, store and logs here (default: a temporary "
                                                "folder, removed at the end)")
    args = p.parse_args(argv)
    receiver = LocalReceiver({"/busy": 503, "/gone": 410}).start()
    try:
        with tempfile.TemporaryDirectory(prefix="fleetwatch-screenshots-") as tmp:
            workdir = args.workdir or Path(tmp)
            workdir.mkdir(parents=True, exist_ok=True)
            store_url, tags = build_store(workdir, receiver, clusters=args.clusters, brokers=args.brokers,
                                          seconds=args.seconds)
            for path in take_screenshots(store_url, tags, args.out):
                print(f"{path} ({path.stat().st_size // 1024} KiB)")
    finally:
        receiver.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
