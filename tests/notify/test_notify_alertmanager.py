"""fleetwatch's firing and resolved alerts in a real Alertmanager (Debian: prometheus-alertmanager).

The test starts Alertmanager on a free 127.0.0.1 port with a temporary config and storage path.
Its API lists active alerts only (a resolved one leaves the list), so Alertmanager's own webhook,
pointed at a receiver of the test, shows the resolved alerts with their endsAt.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import httpx
import pytest
import yaml
from support.notify import Hook, NotifierProcess, env_with, iso_ms, make_alert, resolved, write_config

from streaming.alert import Alert
from streaming.polling import poll
from streaming.ports import free_port
from streaming.store import Store

AM_BIN = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
pytestmark = [pytest.mark.integration, pytest.mark.skipif(
    AM_BIN is None, reason="Alertmanager binary not found: apt-get install prometheus-alertmanager")]

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"


@pytest.fixture
def alertmanager(tmp_path):
    """(API base URL, the Hook that Alertmanager's webhook notifies)."""
    hook = Hook().start()
    port = free_port()
    config = tmp_path / "alertmanager.yml"
    config.write_text(yaml.safe_dump({
        "route": {"receiver": "test", "group_by": ["alertname", "cluster_id", "broker"],
                  "group_wait": "1s", "group_interval": "1s", "repeat_interval": "4h"},
        "receivers": [{"name": "test", "webhook_configs": [{"url": hook.url("/am"), "send_resolved": True}]}],
    }))
    log = open(tmp_path / "alertmanager.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([AM_BIN, f"--config.file={config}", f"--storage.path={tmp_path / 'am-data'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=",
                             "--log.level=warn"], stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"

    def ready():
        if proc.poll() is not None:
            raise AssertionError(f"alertmanager exited: {(tmp_path / 'alertmanager.log').read_text()}")
        try:
            return httpx.get(f"{base}/-/ready", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        poll(ready, 30, "Alertmanager to be ready", interval_s=0.05)
        yield base, hook
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        hook.stop()


def test_firing_and_resolved_alerts_reach_alertmanager(tmp_path, alertmanager):
    base, am_hook = alertmanager
    config = write_config(tmp_path, [{"name": "am", "type": "alertmanager", "url": base}])
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    now = int(time.time() * 1000)
    heartbeat = make_alert("broker.heartbeat_lost", cluster=CLUSTER, target="payments-eu1", broker=3,
                           starts_at=now - 60_000)
    partitioned = make_alert("broker.partitioned", cluster=CLUSTER, target="payments-eu1", broker=3,
                             starts_at=now - 50_000)
    no_controller = make_alert("cluster.no_controller", cluster=CLUSTER, target="payments-eu1",
                               starts_at=now - 40_000)
    ours = {a["rule"]: a for a in (heartbeat, partitioned, no_controller)}
    log = tmp_path / "notify.log"
    proc = NotifierProcess(config, log, env_with(), "--group-wait-ms", "500")

    def api_alerts():
        listed = httpx.get(f"{base}/api/v2/alerts", timeout=5).json()
        return {a["labels"]["rule"]: a for a in listed if a["labels"].get("cluster_id") == CLUSTER}

    try:
        store.record_alerts(map(Alert.from_dict, [heartbeat, partitioned, no_controller]))
        active = poll(lambda: (got := api_alerts()) and set(got) == set(ours) and got, 30,
                      "fleetwatch's firing alerts in Alertmanager's API", interval_s=0.05)
        for rule, entry in active.items():
            alert = ours[rule]
            assert entry["status"]["state"] == "active"
            expected = {"alertname": rule, "rule": rule, "cluster_id": CLUSTER, "target": "payments-eu1",
                        "severity": alert["severity"]}
            if alert["broker_id"] is not None:
                expected["broker"] = "3"
            assert entry["labels"] == expected
            assert entry["annotations"]["alert_id"] == alert["alert_id"]
            assert iso_ms(entry["startsAt"]) == alert["starts_at"]
            assert iso_ms(entry["endsAt"]) > now  # open: kept alive by the notifier, not expired
        # the storm went out as one POST (storm control), logged once the store has recorded it
        def logged():
            return [e for e in map(json.loads, log.read_text().splitlines()) if e.get("msg") == "delivered"]

        assert [e["messages"] for e in poll(logged, 30, "the delivery to be recorded", interval_s=0.05)] == [3]

        ended = int(time.time() * 1000)
        store.record_alerts(map(Alert.from_dict, [resolved(heartbeat, ended), resolved(partitioned, ended)]))
        poll(lambda: set(api_alerts()) == {"cluster.no_controller"}, 30,
             "the resolved alerts to leave Alertmanager's active alerts", interval_s=0.05)

        def resolved_notices():
            out = {}
            for request in am_hook.got("/am"):
                for alert in json.loads(request["body"])["alerts"]:
                    if alert["status"] == "resolved":
                        out[alert["labels"]["rule"]] = alert
            return out

        notices = poll(lambda: (got := resolved_notices()) and set(got) >= {"broker.heartbeat_lost",
                                                                                "broker.partitioned"} and got,
                       30, "Alertmanager's resolved notifications", interval_s=0.05)
        for rule in ("broker.heartbeat_lost", "broker.partitioned"):
            assert iso_ms(notices[rule]["endsAt"]) == ended <= int(time.time() * 1000)
            assert notices[rule]["labels"]["broker"] == "3"
        assert "cluster.no_controller" not in notices
        firing_notices = {a["labels"]["rule"] for r in am_hook.got("/am") for a in json.loads(r["body"])["alerts"]
                          if a["status"] == "firing"}
        assert firing_notices == set(ours)
    finally:
        assert proc.stop() == 0
    store.close()
