"""A stalled broker is amber before it is red (issue 44): the alerts the engines make of a broker that stops
fetching under quorum readings (`broker.stalled`, a warning; then `broker.heartbeat_lost`, critical), stored
one after the other in a real SQLite store as the job stores them, shown by the real dashboard in headless
Chromium: the cluster's tile on the fleet map and the broker's row on the cluster page turn the warning's
colour first, the critical one's at the page.

    pytest tests/web/test_dashboard_stalled.py --headless --webdriver Chrome
"""

from __future__ import annotations

import pytest
from support.dashboard_fleet import broker
from support.rule_cases.readings import frozen, readings
from support.rule_events import C, run, t
from test_dashboard_map import TILE_COLOUR, _palette, _rgb

from dashboard.app import create_app
from streaming.records.alert import Alert
from streaming.store import Store
from streaming.workshop.polling import poll

TILE_JS = """const t = document.querySelector('#fleet-map a.tile');
return [t.className, getComputedStyle(t).backgroundColor, getComputedStyle(t).borderLeftColor];"""
ROW_JS = """const r = document.querySelector(
    '#cluster-body .broker-row.sev-warning, #cluster-body .broker-row.sev-critical');
return r ? [r.className, r.textContent] : null;"""


@pytest.mark.browser
def test_a_stalled_broker_is_amber_on_the_map_and_its_cluster_page_before_it_is_red(dash_duo, tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = Store(url)
    now = t(14)
    store.write({"clusters": [{"cluster_id": C, "target": "pay", "controller_id": 3000, "last_response_ms": now,
                               "updated_ms": now}],
                 "targets": [{"target": "pay", "pinned_cluster_id": C, "last_cluster_id": C, "last_ok_ms": now,
                              "updated_ms": now}],
                 "brokers": [broker(C, b, "ONLINE", now - 100) for b in (1, 2)]})
    stalled, lost = run(readings(0, 14, frozen(4)))  # the warning, then the page at the session's end
    assert (stalled["rule"], lost["rule"]) == ("broker.stalled", "broker.heartbeat_lost")
    store.record_alerts([Alert.from_dict(stalled)])
    palette = _palette()

    def shown(state: str) -> None:
        def tile_is() -> bool:
            classes, background, bar = dash_duo.driver.execute_script(TILE_JS)
            colour = TILE_COLOUR[state]
            return f"sev-{state}" in classes.split() and (_rgb(background), _rgb(bar)) == (
                palette[f"{colour}-bg"], palette[colour])
        dash_duo.wait_for_element("#fleet-map a.tile")
        poll(tile_is, 30, f"the cluster's tile {state}")

    dash_duo.start_server(create_app(url, refresh_ms=1000))
    shown("warning")
    dash_duo.find_element(f'#fleet-map a.tile[href="/cluster/{C}"]').click()
    row = poll(lambda: dash_duo.driver.execute_script(ROW_JS), 30, "a broker row")
    assert "sev-warning" in row[0].split() and row[1].startswith("1")

    store.record_alerts([Alert.from_dict(lost)])  # Kafka's session ran out: the page
    dash_duo.wait_for_element_by_css_selector("#cluster-body .broker-row.sev-critical", timeout=30)
    dash_duo.driver.back()
    shown("critical")
    assert dash_duo.get_logs() == []
    store.close()
