"""/metrics counts fleet incidents (issue 30.2): a store with two clusters' brokers in one rack
failing together and an unrelated one, read by `render_metrics` (no server, no Spark)."""

from __future__ import annotations

from streaming.config import IncidentSettings
from streaming.metrics import render_metrics
from streaming.records.alert import Alert
from streaming.store import IncidentScope, Store

T0 = 1_764_000_000_000


def test_fleet_incidents_are_counted_by_status_and_domain(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    racks = {"c0": "r7", "c1": "r7", "c2": "q2", "c3": "q3"}
    store.write({"brokers": [{"cluster_id": c, "broker_id": 1, "state": "ONLINE", "rack": rack, "endpoints": [],
                              "updated_ms": T0} for c, rack in racks.items()]})
    store.record_alerts([Alert.firing("broker.heartbeat_lost", "c0/1", T0, "s", cluster_id="c0", broker_id=1),
                         Alert.firing("broker.heartbeat_lost", "c1/1", T0 + 500, "s", cluster_id="c1", broker_id=1),
                         Alert.firing("broker.heartbeat_lost", "c2/1", T0 + 700, "s", cluster_id="c2", broker_id=1)])
    lines = render_metrics(store.engine).splitlines()
    assert 'fleetwatch_fleet_incidents{status="firing",domain="rack"} 1' in lines
    assert 'fleetwatch_fleet_incidents{status="resolved",domain="rack"} 0' in lines
    assert sum(line.startswith("fleetwatch_fleet_incidents{") for line in lines) == 10
    store.close()


def test_the_configured_tags_and_settings_of_the_serving_job_group_too(tmp_path):
    # Brokers with no rack: only the clusters' configured tags tie c0 and c1 together (one region
    # of three), as the notifier would group them; disabled settings count nothing.
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    regions = {"c0": "eu-1", "c1": "eu-1", "c2": "us-1", "c3": "ap-1"}
    store.write({"brokers": [{"cluster_id": c, "broker_id": 1, "state": "ONLINE", "endpoints": [], "updated_ms": T0}
                             for c in regions]})
    store.record_alerts([Alert.firing("broker.heartbeat_lost", f"{c}/1", T0 + i, "s", cluster_id=c, broker_id=1)
                         for i, c in enumerate(("c0", "c1", "c2"))])
    tags = tuple((c, c, {"region": region}) for c, region in regions.items())
    tagged = 'fleetwatch_fleet_incidents{status="firing",domain="tag"} 1'
    assert tagged not in render_metrics(store.engine).splitlines()  # no configuration: no tags
    assert tagged in render_metrics(store.engine, incidents=IncidentScope(configured=tags)).splitlines()
    off = IncidentScope(IncidentSettings(enabled=False), tags)
    assert 'fleetwatch_fleet_incidents{status="firing",domain="tag"} 0' in render_metrics(
        store.engine, incidents=off).splitlines()
    store.close()
