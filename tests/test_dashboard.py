"""The dashboard: its queries against a real SQLite store, and its pages in headless Chromium.

Browser tests: `pytest tests/test_dashboard.py --headless --webdriver Chrome` (Debian packages
`chromium` and `chromium-driver`). As root Chromium needs --no-sandbox, which dash_duo adds
itself; chromedriver adds --disable-background-networking and --disable-sync. Screenshots of
every page land in artifacts/screenshots/.
"""

from __future__ import annotations

import argparse
import base64
import time
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.action_chains import ActionChains

from dashboard import queries, views
from dashboard.app import create_app
from dashboard.cli import command, configure_parser
from streaming.sinks.store import Store

SCREENSHOTS = Path(__file__).resolve().parents[1] / "artifacts" / "screenshots"
T0 = 1_763_800_000_000
PAY = "MkU3OEVBNTcwNTJENDM2Qg"
ORDERS = "T3JkZXJzQ2x1c3RlcjAwMQ"
EVIL = "RXZpbENsdXN0ZXIwMDAwMQ"
HOSTILE = "<img src=x onerror=alert(1)>"


def _alert(alert_id: str, rule: str, severity: str, cluster_id: str | None, target: str, *,
           broker_id: int | None = None, status: str = "firing", ends_at: int | None = None,
           summary: str = "") -> dict[str, Any]:
    """An alert object as in SPEC section 4."""
    return {"schema": "fleetwatch.alert/v1", "alert_id": alert_id, "rule": rule, "status": status,
            "severity": severity, "cluster_id": cluster_id, "target": target, "broker_id": broker_id,
            "endpoint": None, "starts_at": T0 - 30_000, "ends_at": ends_at, "summary": summary,
            "details": {}}


def _broker(cluster_id: str, broker_id: int, state: str, heartbeat_ms: int) -> dict[str, Any]:
    return {"cluster_id": cluster_id, "broker_id": broker_id, "state": state, "fenced": state == "FENCED",
            "broker_epoch": 40 + broker_id, "last_heartbeat_ms": heartbeat_ms, "last_answer_ms": T0,
            "rack": "a", "endpoints": [f"b{broker_id}.{cluster_id[:4].lower()}:9092"], "updated_ms": T0}


def _fill(store: Store) -> None:
    names = {PAY: "payments-eu1", ORDERS: "orders-us2", EVIL: HOSTILE}
    store.write({
        "clusters": [{"cluster_id": cid, "target": name, "controller_id": 1, "last_response_ms": T0 - 1000,
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
        "pipeline_progress": [{"query": "fleetwatch", "batch_id": i, "recorded_at": T0 + i * 1000,
                               "input_rows": 1200, "input_rows_per_s": 1100.5,
                               "processed_rows_per_s": 9800.0, "batch_duration_ms": 640,
                               "watermark_ms": T0 - 5000, "state_rows": 36, "state_memory_bytes": 2**21}
                              for i in range(3)],
    })
    store.record_alerts([
        _alert("a-lost", "broker.heartbeat_lost", "critical", PAY, "payments-eu1", broker_id=3,
               summary="broker 3 sent no heartbeat for 15.0 s"),
        _alert("a-fenced", "broker.fenced", "warning", ORDERS, "orders-us2", broker_id=2,
               status="resolved", ends_at=T0 - 10_000, summary="broker 2 fenced for 31 s"),
    ])


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('dashboard') / 'store.db'}"
    store = Store(url)
    _fill(store)
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
    store.record_alerts([_alert("a-unreach", "cluster.unreachable", "critical", None, "orders-us2")])
    rows = {r["cluster_id"]: r for r in queries.fleet_overview(store.engine)}
    assert rows[ORDERS]["severity"] == "critical"
    assert [a["alert_id"] for a in queries.cluster_alerts(store.engine, ORDERS, "firing")] == ["a-unreach"]
    store.close()


def test_timeline_segments_end_at_next_transition_or_fleet_clock(engine) -> None:
    frame = queries.broker_timeline(engine, PAY)
    b3 = frame[frame["broker_id"] == 3]
    assert b3[["state", "start_ms", "end_ms"]].values.tolist() == [
        ["ONLINE", T0 - 60_000, T0 - 20_000], ["FENCED", T0 - 20_000, T0]]


def test_many_healthy_clusters_collapse_into_a_count(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    n_clusters, n_brokers = 1000, 12
    store.write({
        "clusters": [{"cluster_id": f"c{c:04d}", "target": f"team-{c}", "updated_ms": T0}
                     for c in range(n_clusters)],
        "brokers": [_broker(f"c{c:04d}", b, "ONLINE", T0 - b) for c in range(n_clusters)
                    for b in range(n_brokers)],
    })
    store.record_alerts([_alert("x", "broker.fenced", "warning", "c0042", "team-42", broker_id=1)])
    started = time.perf_counter()
    rows = queries.fleet_overview(store.engine)
    elapsed = time.perf_counter() - started
    store.close()
    assert len(rows) == n_clusters and rows[0]["cluster_id"] == "c0042"
    assert elapsed < 1.0, f"overview of {n_clusters} x {n_brokers} took {elapsed:.2f} s"
    table = views.fleet_table(lambda p: p, rows, show_healthy=False)
    listed = [r for r in table.children[1].children if "cluster-row" in r.className]
    assert len(listed) == 1
    assert "999 healthy clusters" in str(table)


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
def test_alert_row_opens_its_cluster_page(dash_duo, store_url: str) -> None:
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
