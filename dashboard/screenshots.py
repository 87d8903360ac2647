"""Screenshots of every dashboard page over a realistic store, for the README.

    .venv/bin/python -m dashboard.screenshots [--out dashboard/screenshots] [--clusters 40 --brokers 4]

The store is filled the way production fills it: `fleetwatch simulate` writes a fleet's telemetry
with faults injected in turn (its event time ending now), `fleetwatch replay --config` runs the
Spark detectors over it into a SQLite store (alerts, broker history, pipeline progress), and
`fleetwatch notify --once`, run twice, delivers the alerts to webhook receivers this script serves
on 127.0.0.1: `ops` takes everything, `pager` (critical alerts) is overloaded and answers 503,
`audit` (warnings) is gone for good and answers 410. Then headless Chromium (Debian's `chromium`
and `chromium-driver`) opens each page and saves what a 1200 x 860 window shows as
`<out>/<page>.png`. Needs Java for Spark; takes about a minute.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["PAGES", "LocalReceiver", "build_store", "main", "take_screenshots"]

ROOT = Path(__file__).resolve().parents[1]
WINDOW = (1200, 860)
ENVS = ("prod", "prod", "staging", "dev")
REGIONS = ("eu-west-1", "us-east-1", "ap-south-1")
# page name -> (path, CSS selector that is there once the page shows its data)
PAGES: dict[str, tuple[str, str]] = {
    "overview": ("/", "#fleet-map a.tile"),
    "cluster": ("", "#cluster-timeline .barlayer .point"),  # the worst cluster's page
    "alerts": ("/alerts", "#alerts-firing .alert-row"),
    "deliveries": ("/deliveries", ".delivery-row"),
    "identity": ("/identity", "#registry .registry-row"),
    "pipeline": ("/pipeline", "#pipeline-charts .scatterlayer .point"),
}


class LocalReceiver:
    """A webhook receiver on 127.0.0.1: answers a POST with the status its path maps to
    (`statuses`, by path prefix; 200 otherwise) and keeps what it received."""

    def __init__(self, statuses: Mapping[str, int] | None = None) -> None:
        self.statuses = dict(statuses or {})
        self.received: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                code = next((c for prefix, c in receiver.statuses.items() if self.path.startswith(prefix)), 200)
                with receiver._lock:
                    receiver.received.append({"path": self.path, "status": code, "body": body})
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self) -> LocalReceiver:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _fleetwatch(*args: str) -> None:
    """Run a fleetwatch command; its output goes to this script's stderr."""
    result = subprocess.run([sys.executable, "-m", "streaming.cli", *args], cwd=ROOT, stdout=sys.stderr,
                            check=False)
    # notify --once exits 1 when a delivery failed: that is part of the picture.
    if result.returncode not in ((0, 1) if args[0] == "notify" else (0,)):
        raise SystemExit(f"fleetwatch {args[0]} failed (exit {result.returncode})")


def _targets(events: Path) -> list[str]:
    names = set()
    with events.open(encoding="utf-8") as fh:
        for line in fh:
            target = json.loads(line).get("target")
            if target:
                names.add(target)
    return sorted(names)


def build_store(workdir: Path, receiver: LocalReceiver, *, clusters: int, brokers: int,
                duration_s: int) -> tuple[str, dict[str, dict[str, str]]]:
    """Simulate, replay and notify into a SQLite store under `workdir`; returns its URL and the
    clusters' tags (by target name), as `fleetwatch dashboard --config` would pass them."""
    events, config = workdir / "events.jsonl", workdir / "fleetwatch.yaml"
    start_ms = int(time.time() * 1000) - duration_s * 1000
    _fleetwatch("simulate", "--clusters", str(clusters), "--brokers", str(brokers), "--faults", "all",
                "--duration", str(duration_s), "--fault-every", str(max(duration_s // 20, 10)),
                "--start-ms", str(start_ms), "--out", str(events))
    # Every third cluster has no tags: the map shows them in a group of their own.
    tags = {name: {"env": ENVS[i % len(ENVS)], "region": REGIONS[i % len(REGIONS)]}
            for i, name in enumerate(_targets(events)) if i % 3 != 2}
    store_url = f"sqlite:///{workdir / 'fleetwatch.db'}"
    config.write_text(json.dumps({
        "store": {"url": store_url},
        # Small batches, so the pipeline charts have points to draw.
        "spark": {"master": "local[2]", "checkpoint_dir": str(workdir / "checkpoint"),
                  "max_records_per_batch": max(2000, clusters * brokers * duration_s // 40)},
        "clusters": [{"name": name, "tags": own} for name, own in tags.items()],
        "alerting": {
            "receivers": [{"name": "ops", "type": "webhook", "url": receiver.url("/ops?token=not-on-the-page")},
                          {"name": "pager", "type": "webhook", "url": receiver.url("/busy")},
                          {"name": "audit", "type": "webhook", "url": receiver.url("/gone")}],
            "routes": [{"receiver": "ops"}, {"receiver": "pager", "match": {"severity": ["critical"]}},
                       {"receiver": "audit", "match": {"severity": ["warning"]}}]},
    }), encoding="utf-8")  # JSON is YAML
    _fleetwatch("replay", str(events), "--alerts-out", str(workdir / "alerts.jsonl"), "--config", str(config))
    notify = ("notify", "--config", str(config), "--once", "--group-wait-ms", "0", "--retry-base-ms", "500")
    _fleetwatch(*notify)
    time.sleep(1.5)  # past the first retry's back-off, so the overloaded receiver is tried again
    _fleetwatch(*notify)
    return store_url, tags


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

    from dashboard import queries
    from dashboard.app import create_app
    from dashboard.views import cluster_path
    from streaming.sinks.store import Store

    app = create_app(store_url, tags=tags)
    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    store = Store(store_url)
    worst = queries.fleet_overview(store.engine)[0]["cluster_id"]
    store.close()
    out.mkdir(parents=True, exist_ok=True)
    driver = _chrome(window)
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
    p.add_argument("--duration", type=int, default=900, help="seconds of event time to simulate (default 900)")
    args = p.parse_args(argv)
    receiver = LocalReceiver({"/busy": 503, "/gone": 410}).start()
    try:
        with tempfile.TemporaryDirectory(prefix="fleetwatch-screenshots-") as tmp:
            store_url, tags = build_store(Path(tmp), receiver, clusters=args.clusters, brokers=args.brokers,
                                          duration_s=args.duration)
            for path in take_screenshots(store_url, tags, args.out):
                print(f"{path} ({path.stat().st_size // 1024} KiB)")
    finally:
        receiver.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
