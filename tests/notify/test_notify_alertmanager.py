"""fleetwatch's firing and resolved alerts in a real Alertmanager (Debian: prometheus-alertmanager).

The test starts Alertmanager on a free 127.0.0.1 port with a temporary config and storage path.
Its API lists active alerts only (a resolved one leaves the list), so Alertmanager's own webhook,
pointed at a receiver of the test, shows the resolved alerts with their endsAt. The fleet incident
test runs the shipped deploy/alertmanager/alertmanager.yml (its receiver's URL and timers made the
test's, its routing tree as shipped).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
import yaml
from support.paths import ROOT

from streaming.config import FleetwatchConfig
from streaming.notify import Notifier, NotifyOptions
from streaming.plumbing.ports import free_port
from streaming.records.alert import Alert
from streaming.store import Store
from streaming.workshop.hooks import (
    Hook,
    NotifierProcess,
    env_with,
    iso_ms,
    make_alert,
    rack_fleet_brokers,
    resolved,
    write_config,
)
from streaming.workshop.polling import poll

AM_BIN = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
pytestmark = [pytest.mark.integration, pytest.mark.skipif(
    AM_BIN is None, reason="Alertmanager binary not found: apt-get install prometheus-alertmanager")]

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"


SHIPPED = ROOT / "deploy" / "alertmanager" / "alertmanager.yml"


@contextlib.contextmanager
def _alertmanager(tmp_path, make_config: Callable[[str], dict]) -> Iterator[tuple[str, Hook]]:
    """(API base URL, the Hook that Alertmanager's webhook notifies) of an Alertmanager running the
    config `make_config` gives for that webhook's URL."""
    hook = Hook().start()
    port = free_port()
    config = tmp_path / "alertmanager.yml"
    config.write_text(yaml.safe_dump(make_config(hook.url("/am"))))
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


@pytest.fixture
def alertmanager(tmp_path):
    with _alertmanager(tmp_path, lambda url: {
        "route": {"receiver": "test", "group_by": ["alertname", "cluster_id", "broker"],
                  "group_wait": "1s", "group_interval": "1s", "repeat_interval": "4h"},
        "receivers": [{"name": "test", "webhook_configs": [{"url": url, "send_resolved": True}]}],
    }) as running:
        yield running


SHIPPED_TEST_GROUP_WAIT_MS = 1000


def _shipped(url: str) -> dict:
    """deploy/alertmanager/alertmanager.yml with the test's webhook and timers of a second."""
    config = yaml.safe_load(SHIPPED.read_text())
    (receiver,) = config["receivers"]
    receiver["webhook_configs"][0]["url"] = url
    config["route"].update(group_wait=f"{SHIPPED_TEST_GROUP_WAIT_MS}ms", group_interval="1s")
    return config


@pytest.fixture
def shipped_alertmanager(tmp_path):
    with _alertmanager(tmp_path, _shipped) as running:
        yield running


DASHBOARD, RUNBOOKS = "https://fleetwatch.example.com", "https://wiki.example.com/kafka/runbooks"
# Issue 43: what detection names a broker alert of payments-eu1's broker 3, and a cluster alert.
BROKER_3 = {"cluster_name": "payments-eu1", "tags": {"env": "prod"}, "broker_host": "b3.pay:9092", "rack": "a"}
CLUSTER_NAMES = {"cluster_name": "payments-eu1", "tags": {"env": "prod"}, "broker_host": None, "rack": None}


def test_firing_and_resolved_alerts_reach_alertmanager(tmp_path, alertmanager):
    base, am_hook = alertmanager
    config = write_config(tmp_path, [{"name": "am", "type": "alertmanager", "url": base}],
                          links={"dashboard_url": DASHBOARD, "runbook_base_url": RUNBOOKS})
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    now = int(time.time() * 1000)
    heartbeat = make_alert("broker.heartbeat_lost", cluster=CLUSTER, target="payments-eu1", broker=3,
                           starts_at=now - 60_000, names=BROKER_3)
    partitioned = make_alert("broker.partitioned", cluster=CLUSTER, target="payments-eu1", broker=3,
                             starts_at=now - 50_000, names=BROKER_3)
    no_controller = make_alert("cluster.no_controller", cluster=CLUSTER, target="payments-eu1",
                               starts_at=now - 40_000, names=CLUSTER_NAMES)
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
            expected = {"alertname": rule, "rule": rule, "cluster_id": CLUSTER, "cluster_name": "payments-eu1",
                        "target": "payments-eu1", "severity": alert["severity"]}
            if alert["broker_id"] is not None:
                expected["broker"] = "3"
            assert entry["labels"] == expected
            annotations = entry["annotations"]
            assert annotations["alert_id"] == alert["alert_id"]
            # Issue 43: the runbook and the alert's page, and where the broker runs.
            assert annotations["runbook_url"] == f"{RUNBOOKS}/{rule}"
            assert annotations["dashboard_url"] == f"{DASHBOARD}/alerts?alert={alert['alert_id']}"
            if alert["broker_id"] is not None:
                assert (annotations["broker_host"], annotations["rack"]) == ("b3.pay:9092", "a")
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


def test_a_fleet_incident_is_one_notification_with_the_shipped_route(tmp_path, shipped_alertmanager):
    """Rack r7 fails under c0 and c1 while an unrelated broker of c2 fails: the members are posted
    with fleet_incident and failure_domain, keep them through a refresh and in their resolves, and
    the shipped route makes them ONE notification, then one resolved notification."""
    base, am_hook = shipped_alertmanager
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    now = int(time.time() * 1000)
    store.write({"brokers": rack_fleet_brokers(now)})
    config = FleetwatchConfig.model_validate({"incidents": {"notify_wait_ms": 1000}, "alerting": {
        "receivers": [{"name": "am", "type": "alertmanager", "url": base}]}})
    notifier = Notifier(config, store, NotifyOptions(group_wait_ms=200, interval_ms=100, alertmanager_refresh_ms=500))
    stop = threading.Event()
    worker = threading.Thread(target=notifier.run, args=(stop,), name="notifier")
    members = [make_alert("broker.heartbeat_lost", cluster="c0", broker=1, starts_at=now - 60_000),
               make_alert("broker.heartbeat_lost", cluster="c1", broker=2, starts_at=now - 59_000)]
    other = make_alert("broker.heartbeat_lost", cluster="c2", broker=1, starts_at=now - 58_000)
    ids = {a["alert_id"] for a in members}

    def api_alerts():
        listed = httpx.get(f"{base}/api/v2/alerts", timeout=5).json()
        got = {a["annotations"]["alert_id"]: a for a in listed}
        assert len(got) == len(listed), f"an alert twice, under other labels: {listed}"
        return got

    def notices():
        return [json.loads(r["body"]) for r in am_hook.got("/am")]

    worker.start()
    try:
        recorded = time.monotonic()  # the members are due notify_wait_ms after they are recorded, not before
        store.record_alerts(map(Alert.from_dict, [*members, other]))
        active = poll(lambda: (got := api_alerts()) and len(got) == 3 and got, 30,
                      "the three alerts in Alertmanager's API", interval_s=0.05)
        incident_id = active[members[0]["alert_id"]]["labels"]["fleet_incident"]
        for alert in members:
            assert active[alert["alert_id"]]["labels"] == {
                "alertname": "broker.heartbeat_lost", "rule": "broker.heartbeat_lost", "severity": "critical",
                "cluster_id": alert["cluster_id"], "target": alert["target"], "broker": str(alert["broker_id"]),
                "fleet_incident": incident_id, "failure_domain": "rack:r7"}
        assert "fleet_incident" not in active[other["alert_id"]]["labels"]

        # The notifier's refresh re-posts them (a later endsAt) with the same labels: no second alert.
        first_ends = {k: iso_ms(a["endsAt"]) for k, a in active.items()}
        refreshed = poll(lambda: (got := api_alerts()) and all(iso_ms(got[k]["endsAt"]) > first_ends[k] for k in got)
                         and got, 30, "the refresh to re-post the open alerts", interval_s=0.1)
        assert {k: a["labels"] for k, a in refreshed.items()} == {k: a["labels"] for k, a in active.items()}

        def incident_notices(status):
            return [n for n in notices() if n["groupLabels"] == {"fleet_incident": incident_id}
                    and n["status"] == status]

        (fired,) = poll(lambda: incident_notices("firing"), 30, "the incident's notification", interval_s=0.05)
        assert {a["annotations"]["alert_id"] for a in fired["alerts"]} == ids
        assert fired["commonLabels"]["failure_domain"] == "rack:r7"
        # Alertmanager waited its group_wait after the members came, in one request: it did not flush the
        # group at once for members that started a minute ago, before it had taken the second one.
        (arrival,) = [a for a in am_hook.got("/am") if json.loads(a["body"]) == fired]
        assert arrival["t"] - recorded >= (config.incidents.notify_wait_ms + SHIPPED_TEST_GROUP_WAIT_MS) / 1000
        assert {a["annotations"]["alert_id"]: iso_ms(a["annotations"]["starts_at"]) for a in fired["alerts"]} == {
            a["alert_id"]: a["starts_at"] for a in members}  # their true start, beside Alertmanager's startsAt

        ended = int(time.time() * 1000)
        store.record_alerts(map(Alert.from_dict, [resolved(a, ended) for a in members]))
        (closed,) = poll(lambda: incident_notices("resolved"), 30, "the incident's resolved notification",
                         interval_s=0.05)
        assert {a["annotations"]["alert_id"]: (a["status"], iso_ms(a["endsAt"])) for a in closed["alerts"]} == {
            i: ("resolved", ended) for i in ids}
        assert set(api_alerts()) == {other["alert_id"]}
        # Nothing twice: one notification of the incident firing (the two resolves are two POSTs, one per
        # cluster: Alertmanager may tell of one resolved before the other, never of both firing again).
        assert [n for n in incident_notices("firing") if {a["status"] for a in n["alerts"]} == {"firing"}] == [fired]
        assert [{a["annotations"]["alert_id"] for a in n["alerts"]} for n in notices()
                if "fleet_incident" not in n["groupLabels"]] == [{other["alert_id"]}]
    finally:
        stop.set()
        worker.join(30)
        notifier.close()
        store.close()
