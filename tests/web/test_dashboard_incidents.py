"""The dashboard's incidents page (issue 30.2): its content from a real SQLite store, as the Dash
callback returns it (no browser): one incident of two clusters in rack r7 with its members, not
the unrelated alert of the same moment; registered in the app's router and navigation."""

from __future__ import annotations

from dashboard.app import create_app
from dashboard.page_content import PageContent
from dashboard.queries.incidents import incident_list
from streaming.config import IncidentSettings
from streaming.records.alert import Alert
from streaming.store import Store

T0 = 1_764_000_000_000


def _texts(component) -> list[str]:
    children = getattr(component, "children", component)
    if isinstance(children, str | int):
        return [str(children)]
    if isinstance(children, list | tuple):
        return [t for child in children for t in _texts(child)]
    return [] if children is None else _texts(children)


def test_incidents_page_lists_the_incident_and_its_members(tmp_path):
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    store = Store(url)
    store.write({"brokers": [{"cluster_id": c, "broker_id": 1, "state": "ONLINE", "rack": rack, "endpoints": [],
                              "updated_ms": T0} for c, rack in {"c0": "r7", "c1": "r7", "c2": "q", "c3": "z"}.items()]})
    store.record_alerts([Alert.firing("broker.heartbeat_lost", "c0/1", T0, "s", cluster_id="c0", broker_id=1),
                         Alert.firing("broker.fenced", "c1/1", T0 + 900, "s", cluster_id="c1", broker_id=1),
                         Alert.firing("broker.heartbeat_lost", "c2/1", T0 + 100, "s", cluster_id="c2", broker_id=1)])
    text = " ".join(_texts(PageContent(store, lambda path: path).incidents()))
    assert "rack:r7: 2 clusters, 2 alerts" in text and "broker.fenced" in text
    assert "c2" not in text.split()
    app = create_app(url)
    assert "/incidents" in str(app.layout) and "incidents-body" in str(app.validation_layout)
    store.close()


def test_the_page_groups_with_the_configs_incident_settings(tmp_path):
    # The same two clusters of rack r7 failing together: with the config's settings the page
    # agrees with the notifier (here a window shorter than the 900 ms between them: no incident).
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    store.write({"brokers": [{"cluster_id": c, "broker_id": 1, "state": "ONLINE", "rack": rack, "endpoints": [],
                              "updated_ms": T0} for c, rack in {"c0": "r7", "c1": "r7", "c2": "q", "c3": "z"}.items()]})
    store.record_alerts([Alert.firing("broker.heartbeat_lost", "c0/1", T0, "s", cluster_id="c0", broker_id=1),
                         Alert.firing("broker.fenced", "c1/1", T0 + 1900, "s", cluster_id="c1", broker_id=1)])
    grouped = " ".join(_texts(PageContent(store, lambda path: path).incidents()))
    assert "rack:r7: 2 clusters, 2 alerts" in grouped
    narrow = IncidentSettings(window_ms=1000)
    apart = " ".join(_texts(PageContent(store, lambda path: path, incidents=narrow).incidents()))
    assert "rack:r7" not in apart
    store.close()


def test_members_are_named_and_the_page_a_notification_links_shows_its_incident(tmp_path):
    # Issue 43: each member by its cluster's name (its id second), its rule's runbook linked; a
    # notification links /incidents?incident=<id>, which shows that incident alone.
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    store.write({"brokers": [{"cluster_id": c, "broker_id": 1, "state": "ONLINE", "rack": rack, "endpoints": [],
                              "updated_ms": T0} for c, rack in {"c0": "r7", "c1": "r7", "c2": "q", "c3": "z"}.items()]})
    store.record_alerts([Alert.firing("broker.heartbeat_lost", "c0/1", T0, "s", cluster_id="c0", broker_id=1,
                                      cluster_name="payments-eu1"),
                         Alert.firing("broker.fenced", "c1/1", T0 + 900, "s", cluster_id="c1", broker_id=1,
                                      cluster_name="orders-eu1")])
    content = PageContent(store, lambda path: path)
    page = content.incidents()
    text = " ".join(_texts(page))
    assert "orders-eu1, payments-eu1" in text  # the clusters by name, in name order
    assert text.index("orders-eu1 c1") < text.index("payments-eu1 c0")  # members by name, the id second
    assert "/runbooks/broker.fenced" in str(page)
    (incident_id,) = [i["incident_id"] for i in incident_list(store.engine)]
    assert incident_id in " ".join(_texts(content.incidents(incident_id)))
    assert "No fleet incident" in " ".join(_texts(content.incidents("0" * 32)))
    store.close()
