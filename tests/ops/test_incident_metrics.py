"""/metrics counts fleet incidents (issue 30.2): a store with two clusters' brokers in one rack
failing together and an unrelated one, read by `render_metrics` (no server, no Spark)."""

from __future__ import annotations

from streaming.alert import Alert
from streaming.metrics import render_metrics
from streaming.store import Store

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
