"""Names first on the dashboard (issue 43), without a browser: the fleet table and the alerts list show
a cluster by its name, then its id; they sort by name; a search matches names, tags and ids; an alert
recorded before names (no name of its own) is shown by its target, else its id. The pages in headless
Chromium: test_dashboard_pages.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from support.dashboard_fleet import EVIL, HOSTILE, ORDERS, PAY

from dashboard.page_content import PageContent
from dashboard.queries.alerts import alert_list
from dashboard.views.cluster import cluster_header
from streaming.store import Store

# Configured names by pinned cluster id, as `fleetwatch dashboard --config` passes them.
NAMES = {ORDERS: "aa-orders", EVIL: "zz-evil"}
TAGS = {"payments-eu1": {"env": "prod"}, "orders-us2": {"env": "staging", "team": "fulfilment"}}


def _elements(node: Any) -> Iterator[dict[str, Any]]:
    """Every element of a rendered Dash tree, whether a component or the JSON Dash sends."""
    if hasattr(node, "to_plotly_json"):
        node = node.to_plotly_json()
    if isinstance(node, dict):
        yield node
        yield from _elements(node.get("props", {}).get("children"))
    elif isinstance(node, list | tuple):
        for child in node:
            yield from _elements(child)


def _rows(table: Any) -> list[tuple[str, list[str]]]:
    """The fleet table's rows: (cluster id, the texts of its Cluster cell)."""
    out = []
    for element in _elements(table):
        props = element.get("props", {})
        if "data-cluster" in props:
            cell = props["children"][0]
            out.append((props["data-cluster"], [e["props"]["children"] for e in _elements(cell["props"]["children"])]))
    return out


def _content(store_url: str) -> PageContent:
    return PageContent(Store(store_url), lambda path: path, TAGS, names=NAMES)


def test_the_fleet_table_shows_names_first_sorted_by_name_with_the_id_second(store_url: str) -> None:
    *_, table = _content(store_url).overview(show_healthy=True)
    rows = _rows(table)
    # The critical one first; then the healthy ones by name: configured names win over targets.
    assert [cid for cid, _ in rows] == [PAY, ORDERS, EVIL]
    assert dict(rows)[ORDERS] == ["aa-orders", ORDERS] and dict(rows)[PAY] == ["payments-eu1", PAY]


def test_a_fleet_search_matches_a_configured_name_a_tag_and_an_id(store_url: str) -> None:
    content = _content(store_url)
    for search, found in (("AA-ORD", [ORDERS]), ("team=fulfil", [ORDERS]), ("prod", [PAY]), (PAY[:8], [PAY])):
        *_, table = content.overview(search=search)
        assert [cid for cid, _ in _rows(table)] == found, search


def test_the_alerts_list_names_the_cluster_and_matches_names_and_tags(engine) -> None:
    (lost,) = alert_list(engine, "firing")
    assert (lost["cluster_name"], lost["broker_host"], lost["rack"]) == ("payments-eu1", "b3.mku3:9092", "a")
    for search in ("PAYMENTS-EU", "eu-west-1", PAY[:6]):
        assert [a["alert_id"] for a in alert_list(engine, "firing", cluster=search)] == ["a-lost"], search
    assert alert_list(engine, "firing", cluster="staging") == []
    # Recorded before names: no name of its own, shown by its target.
    (fenced,) = alert_list(engine, "resolved")
    assert fenced["cluster_name"] is None and fenced["target"] == "orders-us2"


def test_the_cluster_page_title_is_its_name_then_its_id() -> None:
    texts = [e["props"].get("children") for e in _elements(cluster_header(PAY, {"target": "pay-t"}, 3, "payments"))
             if e.get("type") == "Span"]
    assert texts[:2] == ["payments", PAY]
    # A cluster no config and no target names: by its id, as before.
    title = cluster_header(HOSTILE, None, 1).children[0]
    assert title.children[0] == "Cluster " and title.children[1].children == HOSTILE
