"""/metrics lists the blast radius of every firing broker incident (issue 30), read from a real store."""

from __future__ import annotations

from streaming.metrics import render_metrics
from streaming.records.alert import Alert
from streaming.store import Store

NOW_MS = 1_764_000_100_000
IMPACT = {"layout_at": NOW_MS - 70_000, "led_as_of": NOW_MS - 70_000, "complete": True, "partitions_led": 4,
          "replicas_held": 12, "partitions_offline": 1, "partitions_under_min_isr": 11, "top_topics": []}


def test_each_firing_broker_incident_has_its_partitions(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    alert = {"schema": "fleetwatch.alert/v1", "alert_id": "a1", "rule": "broker.heartbeat_lost", "status": "firing",
             "severity": "critical", "cluster_id": "c1", "target": None, "broker_id": 2, "endpoint": None,
             "starts_at": NOW_MS - 60_000, "ends_at": None, "summary": "broker 2 silent",
             "details": {"impact": IMPACT}}
    store.record_alerts(map(Alert.from_dict, [
        alert,
        {**alert, "alert_id": "a2", "broker_id": 3, "details": {}},  # no layout: no impact, no series
        {**alert, "alert_id": "a3", "broker_id": 1},
        {**alert, "alert_id": "a3", "broker_id": 1, "status": "resolved", "ends_at": NOW_MS},  # over
    ]))
    lines = [line for line in render_metrics(store.engine, NOW_MS).splitlines()
             if line.startswith("fleetwatch_incident_partitions{")]
    labels = 'cluster_id="c1",broker_id="2",rule="broker.heartbeat_lost"'
    assert sorted(lines) == sorted(
        f'fleetwatch_incident_partitions{{{labels},impact="{name}"}} {value}'
        for name, value in (("led", 4), ("replicas", 12), ("offline", 1), ("under_min_isr", 11)))
    store.close()
