"""The dashboard: its queries against a real SQLite store, and its pages in headless Chromium.

Browser tests: `pytest tests/test_dashboard.py --headless --webdriver Chrome` (Debian packages
`chromium` and `chromium-driver`). As root Chromium needs --no-sandbox, which dash_duo adds
itself; chromedriver adds --disable-background-networking and --disable-sync. Screenshots of
every page land in artifacts/screenshots/.
"""

from __future__ import annotations

import argparse
import base64
import importlib
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

from dashboard import queries, views
from dashboard.app import create_app
from dashboard.cli import command, configure_parser
from streaming.alert import Alert
from streaming.store import Store

SCREENSHOTS = Path(__file__).resolve().parents[1] / "artifacts" / "screenshots"
STYLESHEET = Path(__file__).resolve().parents[1] / "dashboard" / "assets" / "fleetwatch.css"
T0 = 1_763_800_000_000
PAY = "MkU3OEVBNTcwNTJENDM2Qg"
ORDERS = "T3JkZXJzQ2x1c3RlcjAwMQ"
EVIL = "RXZpbENsdXN0ZXIwMDAwMQ"
HOSTILE = "<img src=x onerror=alert(1)>"


def _alert(alert_id: str, rule: str, severity: str, cluster_id: str | None, target: str | None, *,
           broker_id: int | None = None, status: str = "firing", ends_at: int | None = None,
           summary: str = "", endpoint: str | None = None, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """An alert object as in SPEC section 4."""
    return {"schema": "fleetwatch.alert/v1", "alert_id": alert_id, "rule": rule, "status": status,
            "severity": severity, "cluster_id": cluster_id, "target": target, "broker_id": broker_id,
            "endpoint": endpoint, "starts_at": T0 - 30_000, "ends_at": ends_at, "summary": summary,
            "details": details or {}}


def _broker(cluster_id: str, broker_id: int, state: str, heartbeat_ms: int) -> dict[str, Any]:
    return {"cluster_id": cluster_id, "broker_id": broker_id, "state": state, "fenced": state == "FENCED",
            "broker_epoch": 40 + broker_id, "last_heartbeat_ms": heartbeat_ms, "last_answer_ms": T0,
            "rack": "a", "endpoints": [f"b{broker_id}.{cluster_id[:4].lower()}:9092"], "updated_ms": T0}


def _fill(store: Store) -> None:
    names = {PAY: "payments-eu1", ORDERS: "orders-us2", EVIL: HOSTILE}
    store.write({
        "clusters": [{"cluster_id": cid, "target": name, "controller_id": 2 if cid == PAY else 1,
                      "last_response_ms": T0 - 1000,
                      "updated_ms": T0} for cid, name in names.items()],
        "targets": [{"target": name, "pinned_cluster_id": cid, "last_cluster_id": cid, "last_ok_ms": T0,
                     "updated_ms": T0} for cid, name in names.items()],
        "brokers": [_broker(PAY, 1, "ONLINE", T0 - 2100), _broker(PAY, 2, "ONLINE", T0 - 1500),
                    _broker(PAY, 3, "FENCED", T0 - 15_000),
                    _broker(ORDERS, 1, "ONLINE", T0 - 800), _broker(ORDERS, 2, "ONLINE", T0 - 900),
                    _broker(EVIL, 1, "ONLINE", T0 - 500)],
        "broker_transitions": [
            {"cluster_id": PAY, "broker_id": b, "ts": T0 - 60_000, "state": "ONLINE",
             "previous_state": "FENCED", "reason": "caught up"} for b in (1, 2, 3)
        ] + [{"cluster_id": PAY, "broker_id": 3, "ts": T0 - 20_000, "state": "FENCED",
              "previous_state": "ONLINE", "reason": HOSTILE}],
        "quarantine": [{"origin": f"fleetwatch.metadata/0/{i}", "reason": reason, "raw": HOSTILE,
                        "recorded_at": T0} for i, reason in enumerate(["not_json", "not_json",
                                                                         "missing_field:ts"])],
        # PAY: controller 1, none for 25 s, then 2; the newest change is first on the page.
        "controller_history": [{"cluster_id": PAY, "ts": T0 - 90_000, "controller_id": 1},
                               {"cluster_id": PAY, "ts": T0 - 60_000, "controller_id": None},
                               {"cluster_id": PAY, "ts": T0 - 35_000, "controller_id": 2}],
        "pipeline_progress": [{"query": "fleetwatch", "batch_id": i, "recorded_at": T0 + i * 1000,
                               "input_rows": 1200, "input_rows_per_s": 1100.5,
                               "processed_rows_per_s": 9800.0, "batch_duration_ms": 640,
                               "watermark_ms": T0 - 5000, "state_rows": 36, "state_memory_bytes": 2**21}
                              for i in range(3)],
    })
    store.record_alerts(map(Alert.from_dict, [
        _alert("a-lost", "broker.heartbeat_lost", "critical", PAY, "payments-eu1", broker_id=3,
               summary="broker 3 sent no heartbeat for 15.0 s"),
        _alert("a-fenced", "broker.fenced", "warning", ORDERS, "orders-us2", broker_id=2,
               status="resolved", ends_at=T0 - 10_000, summary="broker 2 fenced for 31 s"),
    ]))


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('dashboard') / 'store.db'}"
    store = Store(url)
    _fill(store)
    store.close()
    return url


ORD, BIL = "OrdOrdOrdOrdOrdOrdOrdA", "BilBilBilBilBilBilBilA"
SEA, NEW, LOG = "SeaSeaSeaSeaSeaSeaSeaA", "NewNewNewNewNewNewNewA", "LogLogLogLogLogLogLogA"
# Target name -> tags, as `fleetwatch dashboard --config` passes them; "payments" never answered.
IDENTITY_TAGS = {"orders": {"env": "prod", "region": "eu"}, "billing": {"env": "prod", "region": "us"},
                 "search": {"env": "staging", "region": "eu"}, "payments": {"env": "prod", "region": "eu"}}


def _fill_identity(store: Store) -> None:
    """A fleet with routing trouble: ord-2 reaches billing, an address advertised twice (once by a
    hostile cluster id), and search's bootstrap answering with another cluster id."""
    store.write({
        "clusters": [{"cluster_id": cid, "target": name, "controller_id": 1, "last_response_ms": T0,
                      "updated_ms": T0} for cid, name in ((ORD, "orders"), (BIL, "billing"), (SEA, "search"))],
        "brokers": [_broker(cid, 1, "ONLINE", T0 - 500) for cid in (ORD, BIL, SEA)],
        # Every row with every key: one executemany takes its columns from the first row.
        "targets": [{"target": t, "pinned_cluster_id": pinned, "last_cluster_id": last, "last_ok_ms": ok,
                     "last_error": error, "last_error_ms": error_ms, "updated_ms": T0}
                    for t, pinned, last, ok, error, error_ms in (
                        ("orders", ORD, ORD, T0, None, None),
                        ("billing", BIL, BIL, T0 - 60_000, "timed out", T0 - 2000),
                        ("search", SEA, NEW, T0, None, None))],
    })
    store.record_alerts(map(Alert.from_dict, [
        _alert("m-ord2", "connection.misrouted", "critical", BIL, "orders", endpoint="ord-2:9092",
               summary="ord-2:9092 reaches cluster Bil node 1",
               details={"expected": {"cluster_id": ORD, "node_id": 2}, "answered": {"cluster_id": BIL, "node_id": 1}}),
        _alert("m-ord3", "connection.misrouted", "critical", ORD, "orders", endpoint="ord-3:9092",
               status="resolved", ends_at=T0 - 5000,
               details={"expected": {"cluster_id": ORD, "node_id": 3}, "error": "REBOOTSTRAP_REQUIRED"}),
        _alert("c-shared", "endpoint.collision", "critical", ORD, None, endpoint="shared-1:9092",
               details={"advertised_by": [f"{ORD}/1", f"{HOSTILE}/7"]}),
        _alert("i-search", "cluster.id_changed", "critical", NEW, "search", endpoint="sea-1:9092",
               summary=f"bootstrap of search reports cluster id {NEW}, pinned {SEA}"),
    ]))


@pytest.fixture(scope="module")
def identity_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('identity') / 'store.db'}"
    store = Store(url)
    _fill_identity(store)
    store.close()
    return url


@pytest.fixture
def engine(store_url: str):
    store = Store(store_url)
    yield store.engine
    store.close()


def _screenshot(dash_duo, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    dash_duo.driver.set_window_size(1400, 1000)
    dash_duo.driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))


# -- queries and views, no browser -----------------------------------------------------------------

def test_overview_aggregates_per_cluster(engine) -> None:
    ordered = queries.fleet_overview(engine)
    assert ordered[0]["cluster_id"] == PAY  # worst first
    rows = {r["cluster_id"]: r for r in ordered}
    pay = rows[PAY]
    assert (pay["brokers"], pay["online"], pay["fenced"], pay["firing"], pay["severity"]) == (3, 2, 1, 1, "critical")
    assert pay["stalest_heartbeat_age_ms"] == 15_000  # against the fleet clock, not the wall clock
    assert rows[ORDERS]["severity"] is None and rows[ORDERS]["firing"] == 0
    assert [r["cluster_id"] for r in queries.fleet_overview(engine, "ORDERS-")] == [ORDERS]
    assert [r["cluster_id"] for r in queries.fleet_overview(engine, PAY[:6].lower())] == [PAY]
    summary = queries.fleet_summary(engine)
    assert summary == {"clusters": 3, "brokers": {"ONLINE": 5, "FENCED": 1}, "firing": {"critical": 1}}


def test_target_alert_without_cluster_id_is_attributed_through_its_target(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    _fill(store)
    store.record_alerts(map(Alert.from_dict, [
        _alert("a-unreach", "cluster.unreachable", "critical", None, "orders-us2")]))
    rows = {r["cluster_id"]: r for r in queries.fleet_overview(store.engine)}
    assert rows[ORDERS]["severity"] == "critical"
    assert [a["alert_id"] for a in queries.cluster_alerts(store.engine, ORDERS, "firing")] == ["a-unreach"]
    store.close()


def test_timeline_segments_end_at_next_transition_or_fleet_clock(engine) -> None:
    frame = queries.broker_timeline(engine, PAY)
    b3 = frame[frame["broker_id"] == 3]
    assert b3[["state", "start_ms", "end_ms"]].values.tolist() == [
        ["ONLINE", T0 - 60_000, T0 - 20_000], ["FENCED", T0 - 20_000, T0]]


def _class_of(row: Any) -> str:
    # Cluster rows are written as the JSON Dash sends (views._element), the count row as a component.
    return row["props"]["className"] if isinstance(row, dict) else row.className


def test_many_healthy_clusters_collapse_into_a_count(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    n_clusters, n_brokers = 1000, 12
    store.write({
        "clusters": [{"cluster_id": f"c{c:04d}", "target": f"team-{c}", "updated_ms": T0}
                     for c in range(n_clusters)],
        "brokers": [_broker(f"c{c:04d}", b, "ONLINE", T0 - b) for c in range(n_clusters)
                    for b in range(n_brokers)],
    })
    store.record_alerts(map(Alert.from_dict, [
        _alert("x", "broker.fenced", "warning", "c0042", "team-42", broker_id=1)]))
    started = time.perf_counter()
    rows = queries.fleet_overview(store.engine)
    elapsed = time.perf_counter() - started
    store.close()
    assert len(rows) == n_clusters and rows[0]["cluster_id"] == "c0042"
    assert elapsed < 1.0, f"overview of {n_clusters} x {n_brokers} took {elapsed:.2f} s"
    table = views.fleet_table(lambda p: p, rows, show_healthy=False)
    listed = [r for r in table.children[1].children if "cluster-row" in _class_of(r)]
    assert len(listed) == 1
    assert "999 healthy clusters" in str(table)
    # Asked for, the healthy ones are listed, but not a thousand rows every refresh.
    table = views.fleet_table(lambda p: p, rows, show_healthy=True)
    listed = [r for r in table.children[1].children if "cluster-row" in _class_of(r)]
    assert len(listed) == 1 + views.LISTED_LIMIT
    assert f"and {999 - views.LISTED_LIMIT} more healthy clusters" in str(table)


def test_format_age() -> None:
    assert [views.format_age(ms) for ms in (2100, 59_949, 240_000, 3 * 3600_000, None)] == [
        "2.1 s", "59.9 s", "4.0 min", "3.0 h", "—"]


def test_cluster_paths_survive_any_id() -> None:
    assert views.cluster_path("a/b c?<x>") == "/cluster/a%2Fb%20c%3F%3Cx%3E"


def test_basic_auth_when_configured(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETWATCH_DASHBOARD_USER", "sre")
    monkeypatch.setenv("FLEETWATCH_DASHBOARD_PASSWORD", "s3cret")
    client = create_app(store_url).server.test_client()
    assert client.get("/").status_code == 401
    wrong = base64.b64encode(b"sre:guess").decode()
    assert client.get("/", headers={"Authorization": f"Basic {wrong}"}).status_code == 401
    right = base64.b64encode(b"sre:s3cret").decode()
    assert client.get("/", headers={"Authorization": f"Basic {right}"}).status_code == 200


def test_cli_bad_config_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("store: {url: sqlite:///x.db, colour: blue}\n", encoding="utf-8")
    parser = argparse.ArgumentParser()
    configure_parser(parser)
    args = parser.parse_args(["--config", str(bad)])
    assert (args.host, args.port, args.store_url) == ("127.0.0.1", 8050, None)
    assert command(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "store.colour: unknown key" in err


def test_tag_filter_narrows_overview_and_summary(identity_url: str) -> None:
    store = Store(identity_url)
    assert queries.tagged_targets(IDENTITY_TAGS, {"env": [], "region": []}) is None  # nothing selected
    prod = queries.tagged_targets(IDENTITY_TAGS, {"env": ["prod"], "region": []})
    assert prod == {"orders", "billing", "payments"}
    assert queries.tagged_targets(IDENTITY_TAGS, {"env": ["prod"], "region": ["us"]}) == {"billing"}
    assert {r["cluster_id"] for r in queries.fleet_overview(store.engine, targets_in=prod)} == {ORD, BIL}
    assert queries.fleet_summary(store.engine, prod) == {
        "clusters": 2, "brokers": {"ONLINE": 2}, "firing": {"critical": 2}}
    # NEW has no row of its own: it belongs to search as the id search last answered with.
    staging = queries.tagged_targets(IDENTITY_TAGS, {"env": ["staging"]})
    assert {r["cluster_id"] for r in queries.fleet_overview(store.engine, targets_in=staging)} == {SEA, NEW}
    assert queries.fleet_overview(store.engine, "sea", targets_in=staging)[0]["cluster_id"] == SEA
    assert queries.fleet_overview(store.engine, targets_in=set()) == []
    store.close()


def test_controller_changes_newest_first_with_how_long_each_held(engine) -> None:
    changes = queries.controller_changes(engine, PAY)
    assert [(c["controller_id"], c["held_ms"], c["current"]) for c in changes] == [
        (2, 35_000, True), (None, 25_000, False), (1, 30_000, False)]
    assert queries.controller_changes(engine, PAY, limit=1)[0]["controller_id"] == 2
    assert queries.controller_changes(engine, ORDERS) == []


def test_registry_lists_differing_then_failing_then_the_rest(identity_url: str) -> None:
    store = Store(identity_url)
    rows = queries.target_registry(store.engine, IDENTITY_TAGS)
    store.close()
    assert [(r["target"], r["differs"], r["failing"], r["seen"]) for r in rows] == [
        ("search", True, False, True), ("billing", False, True, True), ("orders", False, False, True),
        ("payments", False, False, False)]
    assert (rows[0]["pinned_cluster_id"], rows[0]["last_cluster_id"]) == (SEA, NEW)


def _contrast(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    def lum(rgb: tuple[float, ...]) -> float:
        c = [x / 255 for x in rgb[:3]]
        c = [x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4 for x in c]
        return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]
    hi, lo = sorted((lum(a), lum(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_text_colours_are_readable_in_light_and_dark() -> None:
    def palette(block: str) -> dict[str, tuple[int, ...]]:
        return {k: tuple(int(v[i:i + 2], 16) for i in (1, 3, 5))
                for k, v in re.findall(r"--([a-z-]+):\s*(#[0-9a-f]{6})", block)}
    css = STYLESHEET.read_text(encoding="utf-8")
    light = palette(css.split("@media")[0])
    dark = {**light, **palette(css.split("prefers-color-scheme: dark")[1].split("}")[0])}
    text_on = [("fg", bg) for bg in ("bg", "panel", "th-bg", "crit-bg", "warn-bg", "info-bg", "ok-bg", "quiet-bg")]
    text_on += [("muted", "panel"), ("muted", "bg"), ("link", "panel"), ("link", "crit-bg"), ("link", "warn-bg"),
                ("ok-fg", "ok-bg"), *((f"{s}-fg", "panel") for s in ("crit", "warn", "info", "ok"))]
    # Severity bars are not text: WCAG asks 3:1 of graphical objects.
    bars_on = [(s, bg) for s in ("crit", "warn", "info", "quiet") for bg in ("panel", f"{s}-bg")] + [("ok", "panel")]
    for name, pal in (("light", light), ("dark", dark)):
        for pairs, need in ((text_on, 4.5), (bars_on, 3.0)):
            low = [(f, b, round(_contrast(pal[f], pal[b]), 2)) for f, b in pairs if _contrast(pal[f], pal[b]) < need]
            assert not low, f"{name}: below {need}:1: {low}"


def test_cli_and_wsgi_pass_the_config_tags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "fleetwatch.yaml"
    config.write_text(f"store: {{url: 'sqlite:///{tmp_path / 's.db'}'}}\n"
                      "clusters:\n  - {name: orders, tags: {env: prod}}\n  - {name: billing}\n", encoding="utf-8")
    seen: list[dict[str, Any]] = []

    class FakeApp:
        server = "wsgi-app"

        def run(self, **_kw: Any) -> None:
            pass

    def fake_create_app(url: str, **kwargs: Any) -> FakeApp:
        seen.append({"url": url, **kwargs})
        return FakeApp()

    monkeypatch.setattr("dashboard.app.create_app", fake_create_app)
    parser = argparse.ArgumentParser()
    configure_parser(parser)
    assert command(parser.parse_args(["--config", str(config)])) == 0
    monkeypatch.setenv("FLEETWATCH_CONFIG", str(config))
    monkeypatch.delenv("FLEETWATCH_STORE_URL", raising=False)
    monkeypatch.delitem(sys.modules, "dashboard.wsgi", raising=False)
    try:
        assert importlib.import_module("dashboard.wsgi").server == "wsgi-app"
    finally:
        sys.modules.pop("dashboard.wsgi", None)  # built over the fake: no later import may get it
    tags = {"orders": {"env": "prod"}, "billing": {}}
    url = f"sqlite:///{tmp_path / 's.db'}"
    # The CLI also says where it listens (a dashboard without auth beyond loopback is a warning).
    assert seen == [{"url": url, "tags": tags, "host": "127.0.0.1"}, {"url": url, "tags": tags}]


# -- pages in headless Chromium ------------------------------------------------------------------

@pytest.mark.browser
def test_overview_lists_clusters_and_search_narrows(dash_duo, store_url: str) -> None:
    dash_duo.start_server(create_app(store_url, refresh_ms=60_000))
    dash_duo.wait_for_contains_text("#overview-body", "orders-us2")
    rows = dash_duo.find_elements(".cluster-row")
    assert [r.get_attribute("data-cluster") for r in rows] == [PAY, EVIL, ORDERS]
    assert "sev-critical" in rows[0].get_attribute("class")
    dash_duo.wait_for_contains_text("#summary", "critical firing")
    assert dash_duo.find_element(f'.cluster-row[data-cluster="{PAY}"] td:last-child').text == "15.0 s"
    _screenshot(dash_duo, "overview")

    dash_duo.find_element("#search").send_keys("orders")
    dash_duo.wait_for_no_elements(f'.cluster-row[data-cluster="{PAY}"]')
    assert [r.get_attribute("data-cluster") for r in dash_duo.find_elements(".cluster-row")] == [ORDERS]
    assert dash_duo.get_logs() == []


@pytest.mark.browser
def test_hostile_target_name_is_literal_text(dash_duo, store_url: str) -> None:
    dash_duo.start_server(create_app(store_url, refresh_ms=60_000))
    dash_duo.wait_for_contains_text("#overview-body", HOSTILE)
    cell = dash_duo.find_element(f'.cluster-row[data-cluster="{EVIL}"] td:nth-child(2)')
    assert cell.text == HOSTILE
    assert dash_duo.driver.execute_script("return document.images.length") == 0

    dash_duo.find_element(f'.cluster-row[data-cluster="{EVIL}"] a').click()
    dash_duo.wait_for_contains_text("#cluster-body", HOSTILE)
    assert dash_duo.driver.execute_script("return document.images.length") == 0


@pytest.mark.browser
def test_alert_row_opens_its_cluster_page_with_controller_history(dash_duo, store_url: str) -> None:
    dash_duo.start_server(create_app(store_url, refresh_ms=60_000))
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/alerts")
    dash_duo.wait_for_contains_text("#alerts-firing", "broker.heartbeat_lost")
    dash_duo.wait_for_contains_text("#alerts-resolved", "broker.fenced")
    _screenshot(dash_duo, "alerts")
    dash_duo.find_element("#alerts-cluster").send_keys("orders")
    dash_duo.wait_for_no_elements("#alerts-firing .alert-row")
    dash_duo.select_dcc_dropdown("#alerts-severity", value="critical")
    dash_duo.wait_for_no_elements("#alerts-resolved .alert-row")

    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/alerts")

    dash_duo.find_element('#alerts-firing .alert-row[data-alert="a-lost"] a.cluster-link').click()
    dash_duo.wait_for_contains_text("#cluster-body", "payments-eu1")
    assert dash_duo.driver.current_url == f"{dash_duo.server_url}/cluster/{PAY}"
    dash_duo.wait_for_contains_text("#cluster-firing", "broker.heartbeat_lost")
    assert len(dash_duo.find_elements(".broker-row")) == 3
    # Controller history, newest first; "none": no active controller for those 25 s.
    rows = [[td.text for td in r.find_elements(By.TAG_NAME, "td")]
            for r in dash_duo.find_elements(".controller-row")]
    assert rows == [[views.format_ts(T0 - 35_000), "2", "35.0 s so far"],
                    [views.format_ts(T0 - 60_000), "none", "25.0 s"], [views.format_ts(T0 - 90_000), "1", "30.0 s"]]
    dash_duo.wait_for_element("#cluster-timeline .barlayer .point")
    _screenshot(dash_duo, "cluster")
    # The FENCED bar's reason is hostile: plotly must show it as text, not build an <img>.
    fenced_bar = dash_duo.find_element("#cluster-timeline .barlayer .trace:first-child .point")
    ActionChains(dash_duo.driver).move_to_element(fenced_bar).perform()
    dash_duo.wait_for_contains_text("#cluster-timeline .hoverlayer", HOSTILE)
    assert dash_duo.driver.execute_script("return document.images.length") == 0
    assert dash_duo.get_logs() == []


@pytest.mark.browser
def test_pipeline_page_shows_quarantine_reasons(dash_duo, store_url: str) -> None:
    dash_duo.start_server(create_app(store_url, refresh_ms=60_000))
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/pipeline")
    dash_duo.wait_for_contains_text("#quarantine", "missing_field:ts")
    reasons = [r.text.split()[:2] for r in dash_duo.find_elements(".quarantine-row")]
    assert reasons == [["not_json", "2"], ["missing_field:ts", "1"]]
    assert len(dash_duo.find_elements(".batch-row")) == 3
    _screenshot(dash_duo, "pipeline")


@pytest.mark.browser
def test_pages_refresh_live(dash_duo, tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'live.db'}")
    _fill(store)
    dash_duo.start_server(create_app(store.url, refresh_ms=300))
    dash_duo.wait_for_contains_text("#overview-body", "orders-us2")
    dash_duo.find_element("#search").send_keys("new")
    dash_duo.wait_for_no_elements(".cluster-row")
    store.write({"clusters": [{"cluster_id": "TmV3Q2x1c3Rlcg", "target": "new-cluster", "updated_ms": T0}]})
    dash_duo.wait_for_contains_text("#overview-body", "new-cluster")
    # The refresh re-renders the data, not the page: the search box keeps what was typed.
    assert dash_duo.find_element("#search").get_attribute("value") == "new"
    store.close()


def _wait_for_url(dash_duo, url: str) -> None:
    """The address bar follows the filters (history.replaceState, no navigation to wait on)."""
    WebDriverWait(dash_duo.driver, 4).until(lambda d: d.current_url == url,
                                            f"the address never became {url}")


def _clusters_listed(dash_duo) -> set[str]:
    return {r.get_attribute("data-cluster") for r in dash_duo.find_elements(".cluster-row")}


@pytest.mark.browser
def test_identity_page_shows_registry_misroute_and_collision(dash_duo, identity_url: str) -> None:
    dash_duo.start_server(create_app(identity_url, refresh_ms=60_000, tags=IDENTITY_TAGS))
    dash_duo.wait_for_contains_text("#overview-body", "orders")
    dash_duo.find_element('nav a[href="/identity"]').click()
    dash_duo.wait_for_contains_text("#registry", "search")
    rows = dash_duo.find_elements(".registry-row")
    # Trouble first: a different id, a failing target, one never heard of; then the calm ones.
    assert [r.get_attribute("data-target") for r in rows] == ["search", "billing", "payments", "orders"]
    search = rows[0]
    assert "differs" in search.get_attribute("class") and "sev-critical" in search.get_attribute("class")
    assert [td.text for td in search.find_elements(By.TAG_NAME, "td")[:3]] == ["search", SEA, NEW]
    assert "timed out" in rows[1].text and "configured, never answered" in rows[2].text

    firing = dash_duo.find_element('.misrouted-row[data-alert="m-ord2"]')
    cells = [td.text for td in firing.find_elements(By.TAG_NAME, "td")]
    assert cells[:5] == ["firing", "ord-2:9092", "orders", f"cluster {ORD} node 2", f"cluster {BIL} node 1"]
    resolved = dash_duo.find_element('.misrouted-row[data-alert="m-ord3"]')
    assert "REBOOTSTRAP_REQUIRED" in resolved.text and "resolved" in resolved.get_attribute("class")

    advertisers = dash_duo.find_element('.collision-row[data-alert="c-shared"] .advertisers')
    assert advertisers.text == f"{ORD}/1, {HOSTILE}/7"  # an event's text, not markup
    assert dash_duo.driver.execute_script("return document.images.length") == 0
    dash_duo.wait_for_contains_text("#identity-alerts", "cluster.id_changed")
    _screenshot(dash_duo, "identity")

    # What answered is a link to that cluster's page.
    firing.find_elements(By.CSS_SELECTOR, "a.cluster-link")[1].click()
    dash_duo.wait_for_contains_text("#cluster-body", "billing")
    assert dash_duo.driver.current_url == f"{dash_duo.server_url}/cluster/{BIL}"
    assert dash_duo.get_logs() == []


@pytest.mark.browser
def test_tag_filter_narrows_the_overview_and_the_link(dash_duo, identity_url: str) -> None:
    dash_duo.start_server(create_app(identity_url, refresh_ms=60_000, tags=IDENTITY_TAGS))
    dash_duo.wait_for_contains_text("#overview-body", "orders")
    assert _clusters_listed(dash_duo) == {ORD, BIL, SEA, NEW}
    dash_duo.select_dcc_dropdown('.tag-filter[data-tag="env"]', value="staging")
    dash_duo.wait_for_no_elements(f'.cluster-row[data-cluster="{ORD}"]')
    assert _clusters_listed(dash_duo) == {SEA, NEW}
    assert dash_duo.find_element(f'.cluster-row[data-cluster="{SEA}"] td.tags').text == "env=staging region=eu"
    assert dash_duo.find_element("#summary .card").text.split() == ["2", "clusters"]
    _wait_for_url(dash_duo, f"{dash_duo.server_url}/?env=staging")
    dash_duo.find_element("h1").click()  # close the dropdown's menu
    _screenshot(dash_duo, "overview-tags")

    # The link pasted elsewhere opens the overview filtered the same way.
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/?region=us")
    dash_duo.wait_for_no_elements(f'.cluster-row[data-cluster="{ORD}"]')
    assert _clusters_listed(dash_duo) == {BIL}
    assert "us" in dash_duo.find_element('.tag-filter[data-tag="region"]').text
    assert dash_duo.get_logs() == []


@pytest.mark.browser
def test_alerts_deep_link_prefilters(dash_duo, store_url: str) -> None:
    dash_duo.start_server(create_app(store_url, refresh_ms=60_000))
    base = f"{dash_duo.server_url}/alerts"
    dash_duo.wait_for_page(url=f"{base}?severity=warning&cluster=orders")
    dash_duo.wait_for_contains_text("#alerts-resolved", "broker.fenced")
    assert dash_duo.find_elements("#alerts-firing .alert-row") == []
    assert dash_duo.find_element("#alerts-cluster").get_attribute("value") == "orders"
    assert "warning" in dash_duo.find_element("#alerts-severity").text

    # Narrowing further rewrites the link in place.
    dash_duo.find_element("#alerts-cluster").send_keys("-us2")
    _wait_for_url(dash_duo, f"{base}?severity=warning&cluster=orders-us2")

    dash_duo.wait_for_page(url=f"{base}?rule=broker.heartbeat_lost")
    dash_duo.wait_for_contains_text("#alerts-firing", "broker.heartbeat_lost")
    dash_duo.wait_for_contains_text("#alerts-resolved", "None.")
    assert [r.get_attribute("data-alert") for r in dash_duo.find_elements(".alert-row")] == ["a-lost"]
    assert dash_duo.get_logs() == []


def _rgb(css: str) -> tuple[float, ...]:
    return tuple(float(x) for x in re.findall(r"[\d.]+", css)[:3])


@pytest.mark.browser
def test_dark_scheme_is_readable(dash_duo, store_url: str) -> None:
    dash_duo.start_server(create_app(store_url, refresh_ms=60_000))
    dash_duo.driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {
        "media": "", "features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    dash_duo.wait_for_contains_text("#overview-body", "orders-us2")
    style = "return getComputedStyle(arguments[0])[arguments[1]]"
    body = dash_duo.find_element("body")
    assert sum(_rgb(dash_duo.driver.execute_script(style, body, "backgroundColor"))) < 3 * 64  # dark
    critical = dash_duo.find_element(f'.cluster-row[data-cluster="{PAY}"]')
    for cell in critical.find_elements(By.TAG_NAME, "td")[1:3]:
        text, under = (dash_duo.driver.execute_script(style, el, prop)
                       for el, prop in ((cell, "color"), (critical, "backgroundColor")))
        assert _contrast(_rgb(text), _rgb(under)) >= 4.5, (text, under)
    card = dash_duo.find_element("#summary .card.critical")
    number = card.find_element(By.CSS_SELECTOR, ".n")
    assert _contrast(_rgb(dash_duo.driver.execute_script(style, number, "color")),
                     _rgb(dash_duo.driver.execute_script(style, card, "backgroundColor"))) >= 4.5
    _screenshot(dash_duo, "overview-dark")
    critical.find_element(By.CSS_SELECTOR, "a").click()
    dash_duo.wait_for_element("#cluster-timeline .barlayer .point")
    _screenshot(dash_duo, "cluster-dark")
    dash_duo.find_element('nav a[href="/alerts"]').click()
    dash_duo.wait_for_contains_text("#alerts-firing", "broker.heartbeat_lost")
    _screenshot(dash_duo, "alerts-dark")


@pytest.mark.spark
@pytest.mark.browser
@pytest.mark.skipif(not (EXAMPLES / "misroute.jsonl").is_file(), reason=f"worked examples not found at {EXAMPLES}")
def test_pages_over_a_replayed_store(dash_duo, spark, test_config, tmp_path: Path) -> None:
    from streaming.replay import replay_file

    url = f"sqlite:///{tmp_path / 'replayed.db'}"
    store = Store(url)
    for name in ("misroute", "identity"):
        replay_file(EXAMPLES / f"{name}.jsonl", tmp_path / f"{name}.alerts.jsonl", test_config, store=store)
    store.close()
    tags = {"orders": {"env": "prod"}, "billing": {"env": "prod"}, "search": {"env": "staging"},
            "logs": {"env": "staging"}, "logs-dr": {"env": "dr"}}
    dash_duo.start_server(create_app(url, refresh_ms=60_000, tags=tags))

    # Overview: every replayed cluster, the one whose id is reported twice in red.
    dash_duo.wait_for_contains_text("#overview-body", "logs-dr")
    assert _clusters_listed(dash_duo) == {ORD, BIL, SEA, NEW, LOG}
    assert "sev-critical" in dash_duo.find_element(f'.cluster-row[data-cluster="{LOG}"]').get_attribute("class")
    _screenshot(dash_duo, "replay-overview")
    dash_duo.select_dcc_dropdown('.tag-filter[data-tag="env"]', value="prod")
    dash_duo.wait_for_no_elements(f'.cluster-row[data-cluster="{LOG}"]')
    assert _clusters_listed(dash_duo) == {ORD, BIL}
    dash_duo.find_element("h1").click()
    _screenshot(dash_duo, "replay-overview-prod")

    # Alerts: the duplicate id still firing, the misroute and the id change resolved.
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/alerts")
    dash_duo.wait_for_contains_text("#alerts-firing", "cluster.id_duplicate")
    dash_duo.wait_for_contains_text("#alerts-resolved", "connection.misrouted")
    dash_duo.wait_for_contains_text("#alerts-resolved", "cluster.id_changed")
    _screenshot(dash_duo, "replay-alerts")

    # Identity & routing: the registry, and what ord-2:9092 reached instead of orders' broker 2.
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/identity")
    dash_duo.wait_for_contains_text("#misrouted", "ord-2:9092")
    assert {r.get_attribute("data-target") for r in dash_duo.find_elements(".registry-row")} == {
        "billing", "logs", "logs-dr", "orders", "search"}
    misroute = dash_duo.find_element("#misrouted .misrouted-row")
    assert [td.text for td in misroute.find_elements(By.TAG_NAME, "td")[:5]] == [
        "resolved", "ord-2:9092", "orders", f"cluster {ORD} node 2", f"cluster {BIL} node 1"]
    dash_duo.wait_for_contains_text("#identity-alerts", "cluster.id_duplicate")
    _screenshot(dash_duo, "replay-identity")

    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/pipeline")
    dash_duo.wait_for_element(".batch-row")
    assert dash_duo.get_logs() == []


@pytest.mark.browser
def test_silence_a_firing_alert_from_the_alerts_page(dash_duo, tmp_path: Path) -> None:
    from sqlalchemy import select

    from streaming.store import silences

    store = Store(f"sqlite:///{tmp_path / 'silence.db'}")
    _fill(store)
    dash_duo.start_server(create_app(store.url, refresh_ms=60_000))
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/alerts")
    button = '.alert-row[data-alert="a-lost"] .silence-btn'
    dash_duo.wait_for_element(button).click()
    dash_duo.wait_for_contains_text("#silence-result", "Give a reason")
    with store.engine.connect() as conn:
        assert conn.execute(select(silences)).all() == []

    dash_duo.find_element("#silence-reason").send_keys(f"rolling restart {HOSTILE}")
    dash_duo.find_element(button).click()
    dash_duo.wait_for_contains_text("#silence-result", "until")
    dash_duo.wait_for_contains_text('.alert-row[data-alert="a-lost"] td.silenced', "silenced until")
    assert dash_duo.driver.execute_script("return document.images.length") == 0
    with store.engine.connect() as conn:
        [row] = conn.execute(select(silences)).mappings().all()
    assert (row["cluster"], row["rule"], row["broker_id"]) == (PAY, "broker.heartbeat_lost", 3)
    assert row["ends_at"] - row["starts_at"] == 2 * 3600_000
    assert row["reason"] == f"rolling restart {HOSTILE}" and row["created_by"] == "dashboard"
    _screenshot(dash_duo, "alerts-silenced")
    assert dash_duo.get_logs() == []
    store.close()
