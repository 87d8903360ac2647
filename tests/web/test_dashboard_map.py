"""The fleet map on the overview: one tile per cluster, coloured by its worst state, grouped by a tag.

Queries and views against a real SQLite store; the map itself in headless Chromium
(`pytest tests/web/test_dashboard_map.py --headless --webdriver Chrome`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from dash import no_update
from support.browser import SCREENSHOTS, STYLESHEET, screenshot, wait_for_url
from support.dashboard_fleet import T0, alert, broker

from dashboard.app import create_app
from dashboard.page_content import PageContent
from dashboard.queries import fleet as fleet_queries
from dashboard.views import fleet as fleet_views
from streaming.records.alert import Alert
from streaming.store import Store

# cluster id -> (target, tags, the state its tile must show)
FLEET = {
    "PayPayPayPayPayPayPayA": ("pay-eu", {"env": "prod", "region": "eu"}, "critical"),
    "OrdOrdOrdOrdOrdOrdOrdA": ("orders", {"env": "prod", "region": "us"}, "warning"),
    "SeaSeaSeaSeaSeaSeaSeaA": ("search", {"env": "staging", "region": "eu"}, "info"),
    "LogLogLogLogLogLogLogA": ("logs", {"env": "staging", "region": "us"}, "degraded"),
    "BilBilBilBilBilBilBilA": ("billing", {"env": "prod", "region": "eu"}, "healthy"),
    "ScrScrScrScrScrScrScrA": ("scratch", {}, "healthy"),
    # Its only alert is a target alert without a cluster id: attributed through the target.
    "MetMetMetMetMetMetMetA": ("metrics", {"env": "dev"}, "critical"),
}
TAGS = {target: tags for target, tags, _ in FLEET.values()}
PAY, ORD, SEA, LOG, BIL, SCR, MET = FLEET


def _fill(store: Store) -> None:
    store.write({
        "clusters": [{"cluster_id": cid, "target": target, "controller_id": 1, "last_response_ms": T0,
                      "updated_ms": T0} for cid, (target, _, _) in FLEET.items()],
        "targets": [{"target": target, "pinned_cluster_id": cid, "last_cluster_id": cid, "last_ok_ms": T0,
                     "updated_ms": T0} for cid, (target, _, _) in FLEET.items()],
        "brokers": [broker(cid, b, "FENCED" if (cid, b) == (LOG, 2) else "ONLINE", T0 - 500)
                    for cid in FLEET for b in (1, 2, 3)],
    })
    store.record_alerts(map(Alert.from_dict, [
        alert("pay-fenced", "broker.fenced", "warning", PAY, "pay-eu", broker_id=2,
               summary="broker 2 fenced for 31 s"),
        alert("pay-lost", "broker.heartbeat_lost", "critical", PAY, "pay-eu", broker_id=1,
               summary="broker 1 sent no heartbeat for 15.0 s"),
        alert("ord-fenced", "broker.fenced", "warning", ORD, "orders", broker_id=3, summary="broker 3 fenced"),
        alert("sea-illegal", "broker.illegal_transition", "info", SEA, "search", broker_id=1,
               summary="broker 1 went OFFLINE -> ONLINE"),
        alert("met-unreach", "cluster.unreachable", "critical", None, "metrics",
               summary="every response of metrics failed for 30 s"),
        alert("bil-old", "broker.fenced", "warning", BIL, "billing", broker_id=1, status="resolved",
               ends_at=T0 - 1000, summary="resolved long ago"),
    ]))


@pytest.fixture(scope="module")
def map_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('map') / 'store.db'}"
    store = Store(url)
    _fill(store)
    store.close()
    return url


def _tiles(fleet_map: Any) -> list[dict[str, Any]]:
    """Every tile's props in a rendered map, in order, with the group it sits in."""
    out = []
    for group in fleet_map.children[1:]:
        for tile in group.children[1].children:
            out.append({**tile["props"], "group": group.to_plotly_json()["props"]["data-group"]})
    return out


# -- queries and views, no browser -----------------------------------------------------------------

def test_worst_alert_per_cluster_is_the_most_severe_then_newest(map_url: str) -> None:
    store = Store(map_url)
    worst = fleet_queries.worst_alerts(store.engine)
    store.close()
    assert {cid: w["rule"] for cid, w in worst.items()} == {
        PAY: "broker.heartbeat_lost", ORD: "broker.fenced", SEA: "broker.illegal_transition",
        MET: "cluster.unreachable"}
    assert worst[PAY]["summary"] == "broker 1 sent no heartbeat for 15.0 s"


def test_map_tiles_carry_state_group_and_problem(map_url: str) -> None:
    store = Store(map_url)
    rows = fleet_queries.fleet_overview(store.engine)
    fleet_map, _ = fleet_views.fleet_map(lambda p: p, rows, fleet_queries.worst_alerts(store.engine), TAGS, "env")
    store.close()
    tiles = _tiles(fleet_map)
    assert len(tiles) == len(FLEET)
    by_cluster = {t["href"].removeprefix("/cluster/"): t for t in tiles}
    for cid, (target, tags, state) in FLEET.items():
        tile = by_cluster[cid]
        assert f"sev-{state}" in tile["className"].split(), (target, tile["className"])
        assert tile["group"] == tags.get("env", "")
        assert target in tile["title"] and cid in tile["title"]
    # Groups by value, untagged last; within a group, tiles stay in name order whatever their state.
    assert [(t["group"], t["children"]) for t in tiles] == [
        ("dev", "metrics"), ("prod", "billing"), ("prod", "orders"), ("prod", "pay-eu"),
        ("staging", "logs"), ("staging", "search"), ("", "scratch")]
    assert "critical: broker.heartbeat_lost: broker 1 sent no heartbeat for 15.0 s" in by_cluster[PAY]["title"]
    assert "and 1 more firing" in by_cluster[PAY]["title"]
    assert "1 broker fenced" in by_cluster[LOG]["title"]
    assert "all 3 brokers online" in by_cluster[BIL]["title"]
    headers = [g.children[0] for g in fleet_map.children[1:]]
    assert "no env tag" in str(headers[-1])


def test_map_without_grouping_is_one_group(map_url: str) -> None:
    store = Store(map_url)
    rows = fleet_queries.fleet_overview(store.engine)
    fleet_map, _ = fleet_views.fleet_map(lambda p: p, rows, {}, TAGS, "")
    store.close()
    assert {t["group"] for t in _tiles(fleet_map)} == {""}


def test_big_fleet_map_is_squares_without_labels(tmp_path: Path) -> None:
    rows = [{"cluster_id": f"c{c:04d}", "target": f"team-{c:04d}", "brokers": 3, "online": 3, "fenced": 0,
             "stopping": 0, "offline": 0, "unknown": 0, "firing": 0, "severity": None,
             "stalest_heartbeat_age_ms": 10} for c in range(1000)]
    tiles = _tiles(fleet_views.fleet_map(lambda p: p, rows, {}, {}, "")[0])
    assert len(tiles) == 1000
    assert all("children" not in t for t in tiles)


def test_unchanged_map_is_not_sent_again(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    _fill(store)
    pages = PageContent(store, lambda p: p, TAGS)
    _, fleet_map, first, _ = pages.overview()
    assert _tiles(fleet_map)
    assert pages.overview(shown_key=first)[1:3] == (no_update, first)  # the browser shows it already
    assert pages.overview(group_by="region", shown_key=first)[2] != first
    store.record_alerts(map(Alert.from_dict, [
        alert("bil-new", "broker.fenced", "warning", BIL, "billing", broker_id=1)]))
    _, fleet_map, key, _ = pages.overview(shown_key=first)
    assert key != first and _tiles(fleet_map)
    store.close()


# -- in headless Chromium ---------------------------------------------------------------------------

def _palette() -> dict[str, tuple[int, ...]]:
    light = STYLESHEET.read_text(encoding="utf-8").split("@media")[0]
    return {k: tuple(int(v[i:i + 2], 16) for i in (1, 3, 5))
            for k, v in re.findall(r"--([a-z-]+):\s*(#[0-9a-f]{6})", light)}


def _rgb(css: str) -> tuple[int, ...]:
    return tuple(int(float(x)) for x in re.findall(r"[\d.]+", css)[:3])


TILE_COLOUR = {"critical": "crit", "warning": "warn", "info": "info", "degraded": "quiet", "healthy": "ok"}
# [cluster id, class, title, group, background colour, left border colour] of every tile.
TILES_JS = """return Array.from(document.querySelectorAll('#fleet-map a.tile'), t => [
    decodeURIComponent(t.getAttribute('href').split('/').pop()), t.className, t.title,
    t.closest('.map-group').getAttribute('data-group'), getComputedStyle(t).backgroundColor,
    getComputedStyle(t).borderLeftColor]);"""


@pytest.mark.browser
def test_map_colours_groups_and_click_through(dash_duo, map_url: str) -> None:
    dash_duo.start_server(create_app(map_url, refresh_ms=60_000, tags=TAGS))
    dash_duo.wait_for_element("#fleet-map a.tile")
    palette = _palette()
    tiles = {cid: rest for cid, *rest in dash_duo.driver.execute_script(TILES_JS)}
    assert set(tiles) == set(FLEET)
    for cid, (target, tags, state) in FLEET.items():
        classes, title, group, background, bar = tiles[cid]
        assert f"sev-{state}" in classes.split(), (target, classes)
        # A small fleet's tiles carry names: tinted like the table's rows, with the state's colour as a bar.
        colour = TILE_COLOUR[state]
        assert (_rgb(background), _rgb(bar)) == (palette[f"{colour}-bg"], palette[colour]), (target, state)
        assert group == tags.get("env", "")
        assert target in title
    assert "broker.heartbeat_lost" in tiles[PAY][1]
    # The table is still there, below the map.
    dash_duo.wait_for_element(f'#overview-body .cluster-row[data-cluster="{PAY}"]')
    map_top, table_top = (dash_duo.find_element(s).location["y"] for s in ("#fleet-map", "#overview-body"))
    assert map_top < table_top
    screenshot(dash_duo, "overview-map")

    # A click opens the cluster page in place: no page load (the marker survives).
    dash_duo.driver.execute_script("window.fleetwatchMarker = 1")
    dash_duo.find_element(f'#fleet-map a.tile[href="/cluster/{PAY}"]').click()
    dash_duo.wait_for_contains_text("#cluster-body", "pay-eu")
    assert dash_duo.driver.current_url == f"{dash_duo.server_url}/cluster/{PAY}"
    assert dash_duo.driver.execute_script("return window.fleetwatchMarker") == 1
    assert dash_duo.get_logs() == []


@pytest.mark.browser
def test_map_group_by_another_tag_and_the_link(dash_duo, map_url: str) -> None:
    dash_duo.start_server(create_app(map_url, refresh_ms=60_000, tags=TAGS))
    dash_duo.wait_for_element('#fleet-map .map-group[data-group="prod"]')
    dash_duo.select_dcc_dropdown("#map-group", value="group by region")
    dash_duo.wait_for_element('#fleet-map .map-group[data-group="eu"]')
    groups = {group for _, _, _, group, *_ in dash_duo.driver.execute_script(TILES_JS)}
    assert set(groups) == {"eu", "us", ""}
    wait_for_url(dash_duo, f"{dash_duo.server_url}/?group=region")
    # The search narrows the map as it narrows the table.
    dash_duo.find_element("#search").send_keys("pay")
    dash_duo.wait_for_no_elements(f'#fleet-map a.tile[href="/cluster/{ORD}"]')
    assert [t[0] for t in dash_duo.driver.execute_script(TILES_JS)] == [PAY]
    # A link asking for no grouping opens the map in one group.
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/?group=")
    dash_duo.wait_for_contains_text("#fleet-map .group-head", "all clusters")
    assert {t[3] for t in dash_duo.driver.execute_script(TILES_JS)} == {""}
    assert len(dash_duo.find_elements("#fleet-map .map-group")) == 1
    assert dash_duo.get_logs() == []


@pytest.mark.browser
def test_map_of_a_thousand_clusters(dash_duo, tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'big.db'}")
    n = 1000
    store.write({
        "clusters": [{"cluster_id": f"c{c:04d}", "target": f"team-{c:04d}", "updated_ms": T0} for c in range(n)],
        "brokers": [broker(f"c{c:04d}", b, "ONLINE", T0 - b) for c in range(n) for b in range(3)],
    })
    troubled = [17, 404, 999]
    store.record_alerts(map(Alert.from_dict, [
        alert(f"x{c}", "broker.heartbeat_lost", "critical", f"c{c:04d}", f"team-{c:04d}", broker_id=1)
        for c in troubled]))
    tags = {f"team-{c:04d}": {"env": ("prod", "staging", "dev")[c % 3]} for c in range(n)}
    dash_duo.start_server(create_app(store.url, refresh_ms=60_000, tags=tags))
    dash_duo.wait_for_element("#fleet-map a.tile")
    tiles = dash_duo.driver.execute_script(TILES_JS)
    assert len(tiles) == n
    assert sorted(cid for cid, classes, *_ in tiles if "sev-critical" in classes) == [
        f"c{c:04d}" for c in troubled]
    # A big fleet's tiles are plain squares in the state's colour.
    palette = _palette()
    assert {_rgb(t[4]) for t in tiles if "sev-critical" in t[1]} == {palette["crit"]}
    assert {_rgb(t[4]) for t in tiles if "sev-healthy" in t[1]} == {palette["ok"]}
    # 1,000 tiles fit on one screen: the table starts within the first 1,000 px of a 1,400 px wide page.
    dash_duo.driver.set_window_size(1400, 1000)
    assert dash_duo.find_element("#overview-body").location["y"] < 1000
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    dash_duo.driver.save_screenshot(str(SCREENSHOTS / "overview-map-1000.png"))
    store.close()


@pytest.mark.browser
def test_map_follows_the_store_live(dash_duo, tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'live.db'}")
    _fill(store)
    dash_duo.start_server(create_app(store.url, refresh_ms=300, tags=TAGS))
    billing = f'#fleet-map a.tile[href="/cluster/{BIL}"]'
    dash_duo.wait_for_element(f"{billing}.sev-healthy")
    store.record_alerts(map(Alert.from_dict, [
        alert("bil-live", "broker.fenced", "warning", BIL, "billing", broker_id=1)]))
    # The map is sent again only when it changed: the next refresh after a change recolours the tile.
    dash_duo.wait_for_element(f"{billing}.sev-warning")
    assert len(dash_duo.find_elements("#fleet-map a.tile")) == len(FLEET)
    assert dash_duo.get_logs() == []
    store.close()
