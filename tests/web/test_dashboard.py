"""The dashboard's queries against a real SQLite store, its views without a browser, its command
line and its stylesheet. Its pages in headless Chromium are in test_dashboard_pages.py."""

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
from support.browser import STYLESHEET, contrast
from support.dashboard_fleet import (
    BIL,
    IDENTITY_TAGS,
    NEW,
    ORD,
    ORDERS,
    PAY,
    SEA,
    T0,
    alert,
    broker,
    fill_fleet,
)

from dashboard.app import create_app
from dashboard.cli import command, configure_parser
from dashboard.queries.alerts import cluster_alerts
from dashboard.queries.cluster import broker_timeline, controller_changes
from dashboard.queries.fleet import fleet_overview, fleet_summary, tagged_targets
from dashboard.queries.identity import target_registry
from dashboard.views.elements import cluster_path
from dashboard.views.fleet import LISTED_LIMIT, fleet_table
from dashboard.views.formatting import format_age
from streaming.config import IncidentSettings
from streaming.records.alert import Alert
from streaming.store import Store


def test_overview_aggregates_per_cluster(engine) -> None:
    ordered = fleet_overview(engine)
    assert ordered[0]["cluster_id"] == PAY  # worst first
    rows = {r["cluster_id"]: r for r in ordered}
    pay = rows[PAY]
    assert (pay["brokers"], pay["online"], pay["fenced"], pay["firing"], pay["severity"]) == (3, 2, 1, 1, "critical")
    assert pay["stalest_heartbeat_age_ms"] == 15_000  # against the fleet clock, not the wall clock
    assert rows[ORDERS]["severity"] is None and rows[ORDERS]["firing"] == 0
    assert [r["cluster_id"] for r in fleet_overview(engine, "ORDERS-")] == [ORDERS]
    assert [r["cluster_id"] for r in fleet_overview(engine, PAY[:6].lower())] == [PAY]
    summary = fleet_summary(engine)
    assert summary == {"clusters": 3, "brokers": {"ONLINE": 5, "FENCED": 1}, "firing": {"critical": 1}}


def test_target_alert_without_cluster_id_is_attributed_through_its_target(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    fill_fleet(store)
    store.record_alerts(map(Alert.from_dict, [
        alert("a-unreach", "cluster.unreachable", "critical", None, "orders-us2")]))
    rows = {r["cluster_id"]: r for r in fleet_overview(store.engine)}
    assert rows[ORDERS]["severity"] == "critical"
    assert [a["alert_id"] for a in cluster_alerts(store.engine, ORDERS, "firing")] == ["a-unreach"]
    store.close()


def test_timeline_segments_end_at_next_transition_or_fleet_clock(engine) -> None:
    frame = broker_timeline(engine, PAY)
    b3 = frame[frame["broker_id"] == 3]
    assert b3[["state", "start_ms", "end_ms"]].values.tolist() == [
        ["ONLINE", T0 - 60_000, T0 - 20_000], ["FENCED", T0 - 20_000, T0]]


def _class_of(row: Any) -> str:
    # Cluster rows are written as the JSON Dash sends (views.elements.dash_element), the count row as a component.
    return row["props"]["className"] if isinstance(row, dict) else row.className


def test_many_healthy_clusters_collapse_into_a_count(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    n_clusters, n_brokers = 1000, 12
    store.write({
        "clusters": [{"cluster_id": f"c{c:04d}", "target": f"team-{c}", "updated_ms": T0}
                     for c in range(n_clusters)],
        "brokers": [broker(f"c{c:04d}", b, "ONLINE", T0 - b) for c in range(n_clusters)
                    for b in range(n_brokers)],
    })
    store.record_alerts(map(Alert.from_dict, [alert("x", "broker.fenced", "warning", "c0042", "team-42", broker_id=1)]))
    started = time.perf_counter()
    rows = fleet_overview(store.engine)
    elapsed = time.perf_counter() - started
    store.close()
    assert len(rows) == n_clusters and rows[0]["cluster_id"] == "c0042"
    assert elapsed < 1.0, f"overview of {n_clusters} x {n_brokers} took {elapsed:.2f} s"
    table = fleet_table(lambda p: p, rows, show_healthy=False)
    listed = [r for r in table.children[1].children if "cluster-row" in _class_of(r)]
    assert len(listed) == 1
    assert "999 healthy clusters" in str(table)
    # Asked for, the healthy ones are listed, but not a thousand rows every refresh.
    table = fleet_table(lambda p: p, rows, show_healthy=True)
    listed = [r for r in table.children[1].children if "cluster-row" in _class_of(r)]
    assert len(listed) == 1 + LISTED_LIMIT
    assert f"and {999 - LISTED_LIMIT} more healthy clusters" in str(table)


def test_format_age() -> None:
    assert [format_age(ms) for ms in (2100, 59_949, 240_000, 3 * 3600_000, None)] == [
        "2.1 s", "59.9 s", "4.0 min", "3.0 h", "—"]


def test_cluster_paths_survive_any_id() -> None:
    assert cluster_path("a/b c?<x>") == "/cluster/a%2Fb%20c%3F%3Cx%3E"


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
    assert tagged_targets(IDENTITY_TAGS, {"env": [], "region": []}) is None  # nothing selected
    prod = tagged_targets(IDENTITY_TAGS, {"env": ["prod"], "region": []})
    assert prod == {"orders", "billing", "payments"}
    assert tagged_targets(IDENTITY_TAGS, {"env": ["prod"], "region": ["us"]}) == {"billing"}
    assert {r["cluster_id"] for r in fleet_overview(store.engine, targets_in=prod)} == {ORD, BIL}
    assert fleet_summary(store.engine, prod) == {
        "clusters": 2, "brokers": {"ONLINE": 2}, "firing": {"critical": 2}}
    # NEW has no row of its own: it belongs to search as the id search last answered with.
    staging = tagged_targets(IDENTITY_TAGS, {"env": ["staging"]})
    assert {r["cluster_id"] for r in fleet_overview(store.engine, targets_in=staging)} == {SEA, NEW}
    assert fleet_overview(store.engine, "sea", targets_in=staging)[0]["cluster_id"] == SEA
    assert fleet_overview(store.engine, targets_in=set()) == []
    store.close()


def test_controller_changes_newest_first_with_how_long_each_held(engine) -> None:
    changes = controller_changes(engine, PAY)
    assert [(c["controller_id"], c["held_ms"], c["current"]) for c in changes] == [
        (2, 35_000, True), (None, 25_000, False), (1, 30_000, False)]
    assert controller_changes(engine, PAY, limit=1)[0]["controller_id"] == 2
    assert controller_changes(engine, ORDERS) == []


def test_registry_lists_differing_then_failing_then_the_rest(identity_url: str) -> None:
    store = Store(identity_url)
    rows = target_registry(store.engine, IDENTITY_TAGS)
    store.close()
    assert [(r["target"], r["differs"], r["failing"], r["seen"]) for r in rows] == [
        ("search", True, False, True), ("billing", False, True, True), ("orders", False, False, True),
        ("payments", False, False, False)]
    assert (rows[0]["pinned_cluster_id"], rows[0]["last_cluster_id"]) == (SEA, NEW)


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
            low = [(f, b, round(contrast(pal[f], pal[b]), 2)) for f, b in pairs if contrast(pal[f], pal[b]) < need]
            assert not low, f"{name}: below {need}:1: {low}"


def test_cli_and_wsgi_pass_the_config_tags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "fleetwatch.yaml"
    config.write_text(f"store: {{url: 'sqlite:///{tmp_path / 's.db'}'}}\n"
                      "clusters:\n  - {name: orders, tags: {env: prod}, expected_cluster_id: OrdId}\n"
                      "  - {name: billing}\n"
                      "incidents: {window_ms: 30000}\n", encoding="utf-8")
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
    incidents = IncidentSettings(window_ms=30_000)  # the incidents page groups as the notifier does
    names = {"OrdId": "orders"}  # a pinned cluster is shown by its configured name (issue 43)
    # The CLI also says where it listens (a dashboard without auth beyond loopback is a warning).
    assert seen == [{"url": url, "tags": tags, "incidents": incidents, "host": "127.0.0.1", "local_silences": False,
                     "names": names},
                    {"url": url, "tags": tags, "incidents": incidents, "names": names}]
