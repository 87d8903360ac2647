"""The deliveries page: what the notifier did with each alert, per receiver.

The rows are written by the real notifier (`streaming.notify.delivery.Notifier`) delivering real
alerts from a real SQLite store to real HTTP receivers on 127.0.0.1: one accepts, one refuses for
good (a dead letter), one is overloaded (retried later). The page runs in headless Chromium.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from sqlalchemy import create_engine
from support.browser import screenshot, wait_for_url
from support.dashboard_fleet import PAY, T0, alert

from dashboard.app import create_app
from dashboard.queries.deliveries import delivery_counts, delivery_list, delivery_receivers
from streaming.config import FleetwatchConfig
from streaming.notify.delivery import Notifier, NotifyOptions
from streaming.records.alert import Alert
from streaming.store import Store
from streaming.workshop.screenshots import LocalReceiver

TOKEN = "tok-9d3e7c1a55"  # in the receiver's URL: must never reach the page


def _alerts() -> list[dict[str, Any]]:
    return [
        alert("d-lost", "broker.heartbeat_lost", "critical", PAY, "payments-eu1", broker_id=3,
              summary="broker 3 sent no heartbeat for 15.0 s"),
        alert("d-fenced", "broker.fenced", "warning", PAY, "payments-eu1", broker_id=2, summary="broker 2 fenced"),
    ]


@pytest.fixture
def delivered(tmp_path: Path):
    """A store after one notifier pass: ops accepted everything, pager refused its critical alert
    for good (410), chat is overloaded (503) and will be retried."""
    receiver = LocalReceiver({"/gone": 410, "/busy": 503}).start()
    store = Store(f"sqlite:///{tmp_path / 'deliveries.db'}")
    store.record_alerts(map(Alert.from_dict, _alerts()))
    config = FleetwatchConfig.model_validate({"store": {"url": store.url}, "alerting": {
        "receivers": [{"name": "ops", "type": "webhook", "url": receiver.url(f"/ok?token={TOKEN}")},
                      {"name": "pager", "type": "webhook", "url": receiver.url("/gone")},
                      {"name": "chat", "type": "webhook", "url": receiver.url("/busy")}],
        "routes": [{"receiver": "ops"}, {"receiver": "pager", "match": {"severity": ["critical"]}},
                   {"receiver": "chat"}]}})
    notifier = Notifier(config, store, NotifyOptions(group_wait_ms=0, retry_base_ms=600_000, retry_max_ms=600_000))
    try:
        notifier.run(once=True)
    finally:
        notifier.close()
    yield store, receiver
    store.close()
    receiver.stop()


def test_deliveries_list_reads_what_the_notifier_wrote(delivered) -> None:
    store, receiver = delivered
    assert len(receiver.received) == 5  # ops x2, pager x1, chat x2
    rows = {(r["receiver"], r["alert_id"]): r for r in delivery_list(store.engine)}
    assert set(rows) == {("ops", "d-lost"), ("ops", "d-fenced"), ("pager", "d-lost"), ("chat", "d-lost"),
                         ("chat", "d-fenced")}
    assert rows[("pager", "d-lost")]["state"] == "dead" and "410" in rows[("pager", "d-lost")]["last_error"]
    assert rows[("chat", "d-fenced")]["attempts"] == 1 and "503" in rows[("chat", "d-fenced")]["last_error"]
    assert rows[("ops", "d-lost")]["summary"] == "broker 3 sent no heartbeat for 15.0 s"
    counts = delivery_counts(store.engine)
    assert (counts["delivered"], counts["dead"], counts["retrying"], counts["queued"]) == (2, 1, 2, 0)
    assert delivery_receivers(store.engine) == ["chat", "ops", "pager"]
    assert [r["receiver"] for r in delivery_list(store.engine, states=["dead"])] == ["pager"]
    assert {r["alert_id"] for r in delivery_list(store.engine, receivers=["ops"])} == {"d-lost", "d-fenced"}


def test_deliveries_table_without_newer_columns(tmp_path: Path) -> None:
    """A store whose deliveries table lacks columns (older, or newer, than this dashboard): the
    page reads the columns it finds by name and derives the rest."""
    path = tmp_path / "old.db"
    Store(f"sqlite:///{path}").close()  # every other table as the store makes it
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE deliveries")
        conn.execute("CREATE TABLE deliveries (id INTEGER PRIMARY KEY, outbox_id INTEGER, receiver TEXT,"
                     " alert_id TEXT, status TEXT, rule TEXT, subject TEXT, attempts INTEGER,"
                     " last_attempt_at INTEGER, last_error TEXT, created_at INTEGER, delivered_at INTEGER)")
        conn.executemany("INSERT INTO deliveries VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", [
            (1, 1, "ops", "a1", "firing", "broker.fenced", "broker:x:1", 1, T0, None, T0, T0),
            (2, 1, "chat", "a1", "firing", "broker.fenced", "broker:x:1", 2, T0 + 1, "HTTP 503", T0, None)])
    # A plain engine: the dashboard only reads (Store() would bring the schema up to date).
    engine = create_engine(f"sqlite:///{path}")
    rows = {r["receiver"]: r for r in delivery_list(engine)}
    counts = delivery_counts(engine)
    engine.dispose()
    assert rows["ops"]["dead_letter"] is None and rows["ops"]["silence_id"] is None
    assert (rows["ops"]["state"], rows["chat"]["state"]) == ("delivered", "pending")
    assert [rows[n]["receiver"] for n in ("chat", "ops")] == ["chat", "ops"]  # latest activity first
    assert (counts["delivered"], counts["retrying"]) == (1, 1)


def _cells(row) -> list[str]:
    return [td.text for td in row.find_elements(By.TAG_NAME, "td")]


@pytest.mark.browser
def test_deliveries_page_lists_rows_without_secrets(dash_duo, delivered) -> None:
    store, receiver = delivered
    dash_duo.start_server(create_app(store.url, refresh_ms=60_000))
    dash_duo.wait_for_element("#overview-body")
    dash_duo.find_element('nav a[href="/deliveries"]').click()
    dash_duo.wait_for_element(".delivery-row")
    rows = {(r.get_attribute("data-receiver"), r.get_attribute("data-alert")): r
            for r in dash_duo.find_elements(".delivery-row")}
    assert len(rows) == 5
    dead = rows[("pager", "d-lost")]
    assert "sev-critical" in dead.get_attribute("class")
    cells = _cells(dead)
    assert cells[:4] == ["pager", "broker.heartbeat_lost", f"broker:{PAY}:3", "firing"]
    assert cells[4] == "dead letter" and cells[5] == "1" and "410" in cells[7]
    retrying = rows[("chat", "d-fenced")]
    assert "sev-warning" in retrying.get_attribute("class") and _cells(retrying)[4].startswith("retrying")
    assert _cells(rows[("ops", "d-lost")])[4] == "delivered"
    assert dash_duo.find_element("#deliveries-summary").text.split("\n")[:2] == ["2", "delivered"]
    # Receivers are named, never located: no URL, no token, no port of theirs.
    page = dash_duo.driver.page_source
    assert TOKEN not in page and f":{receiver.port}" not in page and "/gone" not in page
    screenshot(dash_duo, "deliveries")

    # Filters narrow the list and follow in the address.
    dash_duo.select_dcc_dropdown("#deliveries-state", value="dead letter")
    dash_duo.wait_for_no_elements('.delivery-row[data-receiver="ops"]')
    assert [r.get_attribute("data-receiver") for r in dash_duo.find_elements(".delivery-row")] == ["pager"]
    wait_for_url(dash_duo, f"{dash_duo.server_url}/deliveries?state=dead")

    # The alert's rule links to that alert on the alerts page.
    dash_duo.find_element('.delivery-row[data-receiver="pager"] a.alert-link').click()
    dash_duo.wait_for_element('#alerts-firing .alert-row[data-alert="d-lost"]')
    assert dash_duo.driver.current_url == f"{dash_duo.server_url}/alerts?alert=d-lost"
    assert [r.get_attribute("data-alert") for r in dash_duo.find_elements(".alert-row")] == ["d-lost"]
    assert dash_duo.get_logs() == []
