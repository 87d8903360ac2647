"""The dashboard's pages in headless Chromium, over a real SQLite store.

Browser tests: `pytest tests/web/test_dashboard_pages.py --headless --webdriver Chrome` (Debian
packages `chromium` and `chromium-driver`). As root Chromium needs --no-sandbox, which dash_duo adds
itself; chromedriver adds --disable-background-networking and --disable-sync. Screenshots of
every page land in artifacts/screenshots/.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from support.browser import contrast, screenshot, wait_for_url
from support.dashboard_fleet import (
    BIL,
    EVIL,
    HOSTILE,
    IDENTITY_TAGS,
    LOG,
    NEW,
    ORD,
    ORDERS,
    PAY,
    SEA,
    T0,
    fill_fleet,
)
from support.paths import EXAMPLES

from dashboard.app import create_app
from dashboard.views.formatting import format_ts
from streaming.store import Store


@pytest.mark.browser
def test_overview_lists_clusters_and_search_narrows(dash_duo, store_url: str) -> None:
    dash_duo.start_server(create_app(store_url, refresh_ms=60_000))
    dash_duo.wait_for_contains_text("#overview-body", "orders-us2")
    rows = dash_duo.find_elements(".cluster-row")
    assert [r.get_attribute("data-cluster") for r in rows] == [PAY, EVIL, ORDERS]
    assert "sev-critical" in rows[0].get_attribute("class")
    dash_duo.wait_for_contains_text("#summary", "critical firing")
    assert dash_duo.find_element(f'.cluster-row[data-cluster="{PAY}"] td:last-child').text == "15.0 s"
    screenshot(dash_duo, "overview")

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
    screenshot(dash_duo, "alerts")
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
    assert rows == [[format_ts(T0 - 35_000), "2", "35.0 s so far"],
                    [format_ts(T0 - 60_000), "none", "25.0 s"], [format_ts(T0 - 90_000), "1", "30.0 s"]]
    dash_duo.wait_for_element("#cluster-timeline .barlayer .point")
    screenshot(dash_duo, "cluster")
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
    screenshot(dash_duo, "pipeline")


@pytest.mark.browser
def test_pages_refresh_live(dash_duo, tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'live.db'}")
    fill_fleet(store)
    dash_duo.start_server(create_app(store.url, refresh_ms=300))
    dash_duo.wait_for_contains_text("#overview-body", "orders-us2")
    dash_duo.find_element("#search").send_keys("new")
    dash_duo.wait_for_no_elements(".cluster-row")
    store.write({"clusters": [{"cluster_id": "TmV3Q2x1c3Rlcg", "target": "new-cluster", "updated_ms": T0}]})
    dash_duo.wait_for_contains_text("#overview-body", "new-cluster")
    # The refresh re-renders the data, not the page: the search box keeps what was typed.
    assert dash_duo.find_element("#search").get_attribute("value") == "new"
    store.close()


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
    screenshot(dash_duo, "identity")

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
    wait_for_url(dash_duo, f"{dash_duo.server_url}/?env=staging")
    dash_duo.find_element("h1").click()  # close the dropdown's menu
    screenshot(dash_duo, "overview-tags")

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
    wait_for_url(dash_duo, f"{base}?severity=warning&cluster=orders-us2")

    dash_duo.wait_for_page(url=f"{base}?rule=broker.heartbeat_lost")
    dash_duo.wait_for_contains_text("#alerts-firing", "broker.heartbeat_lost")
    dash_duo.wait_for_contains_text("#alerts-resolved", "None.")
    assert [r.get_attribute("data-alert") for r in dash_duo.find_elements(".alert-row")] == ["a-lost"]
    assert dash_duo.get_logs() == []


@pytest.mark.browser
def test_a_broker_alert_reads_its_cluster_by_name_and_opens_its_runbook(dash_duo, store_url: str) -> None:
    """Issue 43: on /alerts a broker alert says its cluster's name (its id second, to copy), where the
    broker runs, and links its rule's runbook, which opens as a page of its own."""
    dash_duo.start_server(create_app(store_url, refresh_ms=60_000))
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/alerts?cluster=eu-west")  # a tag of the cluster
    row = '#alerts-firing .alert-row[data-alert="a-lost"]'
    dash_duo.wait_for_element(row)
    assert dash_duo.find_element(f"{row} td.cluster .cluster-name").text == "payments-eu1"
    assert dash_duo.find_element(f"{row} td.cluster .cluster-id").text == PAY
    assert dash_duo.find_element(f"{row} td.broker").text.split("\n") == ["3", "b3.mku3:9092 · rack a"]
    link = dash_duo.find_element(f"{row} a.runbook-link")
    assert link.get_attribute("href") == f"{dash_duo.server_url}/runbooks/broker.heartbeat_lost"
    # The resolved alert was recorded before names: its cluster by its target's name.
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/alerts?cluster=orders-us2")
    dash_duo.wait_for_contains_text("#alerts-resolved .cluster-name", "orders-us2")
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/alerts?cluster=payments-eu1")
    dash_duo.wait_for_element(row)
    screenshot(dash_duo, "alerts-names")
    dash_duo.find_element(f"{row} a.runbook-link").click()
    dash_duo.wait_for_text_to_equal("main.runbook h1", "broker.heartbeat_lost")
    assert dash_duo.driver.current_url == f"{dash_duo.server_url}/runbooks/broker.heartbeat_lost"
    headings = [h.text for h in dash_duo.find_elements("main.runbook h2")]
    assert headings[:2] == ["What it means", "Confirm with Kafka's tools"]
    assert "kafka-metadata-quorum.sh" in dash_duo.find_element("main.runbook pre").text
    # Readable on a phone: at 390 px wide nothing but a code block scrolls sideways.
    dash_duo.driver.set_window_size(390, 844)
    width = dash_duo.driver.execute_script("return document.documentElement.scrollWidth")
    assert width <= dash_duo.driver.execute_script("return window.innerWidth")


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
        assert contrast(_rgb(text), _rgb(under)) >= 4.5, (text, under)
    card = dash_duo.find_element("#summary .card.critical")
    number = card.find_element(By.CSS_SELECTOR, ".n")
    assert contrast(_rgb(dash_duo.driver.execute_script(style, number, "color")),
                    _rgb(dash_duo.driver.execute_script(style, card, "backgroundColor"))) >= 4.5
    screenshot(dash_duo, "overview-dark")
    critical.find_element(By.CSS_SELECTOR, "a").click()
    dash_duo.wait_for_element("#cluster-timeline .barlayer .point")
    screenshot(dash_duo, "cluster-dark")
    dash_duo.find_element('nav a[href="/alerts"]').click()
    dash_duo.wait_for_contains_text("#alerts-firing", "broker.heartbeat_lost")
    screenshot(dash_duo, "alerts-dark")


@pytest.mark.spark
@pytest.mark.browser
@pytest.mark.skipif(not (EXAMPLES / "misroute.jsonl").is_file(), reason=f"worked examples not found at {EXAMPLES}")
def test_pages_over_a_replayed_store(dash_duo, spark, test_config, tmp_path: Path) -> None:
    from streaming.job import replay_file

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
    screenshot(dash_duo, "replay-overview")
    dash_duo.select_dcc_dropdown('.tag-filter[data-tag="env"]', value="prod")
    dash_duo.wait_for_no_elements(f'.cluster-row[data-cluster="{LOG}"]')
    assert _clusters_listed(dash_duo) == {ORD, BIL}
    dash_duo.find_element("h1").click()
    screenshot(dash_duo, "replay-overview-prod")

    # Alerts: the duplicate id still firing, the misroute and the id change resolved.
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/alerts")
    dash_duo.wait_for_contains_text("#alerts-firing", "cluster.id_duplicate")
    dash_duo.wait_for_contains_text("#alerts-resolved", "connection.misrouted")
    dash_duo.wait_for_contains_text("#alerts-resolved", "cluster.id_changed")
    screenshot(dash_duo, "replay-alerts")

    # Identity & routing: the registry, and what ord-2:9092 reached instead of orders' broker 2.
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/identity")
    dash_duo.wait_for_contains_text("#misrouted", "ord-2:9092")
    assert {r.get_attribute("data-target") for r in dash_duo.find_elements(".registry-row")} == {
        "billing", "logs", "logs-dr", "orders", "search"}
    misroute = dash_duo.find_element("#misrouted .misrouted-row")
    assert [td.text for td in misroute.find_elements(By.TAG_NAME, "td")[:5]] == [
        "resolved", "ord-2:9092", "orders", f"cluster {ORD} node 2", f"cluster {BIL} node 1"]
    dash_duo.wait_for_contains_text("#identity-alerts", "cluster.id_duplicate")
    screenshot(dash_duo, "replay-identity")

    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/pipeline")
    dash_duo.wait_for_element(".batch-row")
    assert dash_duo.get_logs() == []


@pytest.mark.browser
def test_silence_a_firing_alert_from_the_alerts_page(dash_duo, tmp_path: Path) -> None:
    from sqlalchemy import select

    from streaming.store import silences

    store = Store(f"sqlite:///{tmp_path / 'silence.db'}")
    fill_fleet(store)
    # No auth: the person at the machine, who asked to silence (`fleetwatch dashboard --allow-local-silences`).
    dash_duo.start_server(create_app(store.url, refresh_ms=60_000, host="127.0.0.1", local_silences=True))
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
    screenshot(dash_duo, "alerts-silenced")
    assert dash_duo.get_logs() == []
    store.close()
