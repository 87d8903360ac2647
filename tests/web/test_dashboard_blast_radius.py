"""The cluster page's blast radius (issue 30): each firing broker incident with what it does to the
cluster's partitions, from a real store (the page content as the Dash callback returns it)."""

from __future__ import annotations

import json
from pathlib import Path

from dashboard.page_content import PageContent
from streaming.records.alert import Alert
from streaming.store import Store

NOW_MS = 1_764_000_100_000
IMPACT = {"layout_at": NOW_MS - 70_000, "led_as_of": NOW_MS - 70_000, "complete": False, "partitions_led": 4,
          "replicas_held": 12, "partitions_offline": 1, "partitions_under_min_isr": 11,
          "top_topics": [{"topic": "orders", "led": 4, "replicas": 12, "offline": 1, "under_min_isr": 11}]}


def _text(component: object) -> str:
    """Every string of a Dash component tree, in order."""
    return json.dumps(component.to_plotly_json(), default=lambda c: c.to_plotly_json())  # type: ignore[attr-defined]


def test_the_cluster_page_shows_each_incidents_blast_radius(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    alert = {"schema": "fleetwatch.alert/v1", "alert_id": "a1", "rule": "broker.heartbeat_lost", "status": "firing",
             "severity": "critical", "cluster_id": "c1", "target": "pay", "broker_id": 2, "endpoint": None,
             "starts_at": NOW_MS - 60_000, "ends_at": None, "summary": "broker 2 silent",
             "details": {"impact": IMPACT}}
    pages = PageContent(store, lambda p: p, None)
    empty = _text(pages.cluster("c1")[0])
    assert "No firing broker incident" in empty
    store.record_alerts([Alert.from_dict(alert)])
    text = _text(pages.cluster("c1")[0])
    assert "Blast radius" in text and "impact-row sev-critical" in text
    assert "orders (4 led, 11 under min ISR, 1 offline)" in text and "partial layout" in text
    for number in ('"4"', '"12"', '"1"', '"11"'):
        assert number in text
    store.close()
