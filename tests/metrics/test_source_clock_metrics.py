"""Each collector's clock in /metrics (issue 26 point 3): its lead over the job's clock and its
messages quarantined for an event time ahead, over a real HTTP GET of the metrics server on a real
SQLite store; the series are capped (a source id is whatever a producer writes), and the shipped
Prometheus rule pages on a collector that runs ahead (promtool's own rule evaluation).
"""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

from support.promtool import rules_firing

from streaming.metrics import start_metrics_server
from streaming.plumbing import clock
from streaming.store import Store


def _samples(text: str, name: str) -> dict[str, float]:
    return {source: float(value) for source, value in
            re.findall(rf'^{name}{{source="([^"]*)"}} (\S+)$', text, re.MULTILINE)}


def test_metrics_show_each_sources_lead_and_what_was_refused_for_it(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    now = clock.now_ms()
    store.write({
        "source_clocks": [
            {"source": "agent-fast", "lead_ms": 9_750, "events": 20, "ahead": 20, "updated_ms": now - 1000},
            {"source": "probe-1", "lead_ms": -320, "events": 40, "ahead": 0, "updated_ms": now - 1000},
            {"source": "agent-gone", "lead_ms": 30_000, "events": 1, "ahead": 1, "updated_ms": now - 3_600_000},
            *({"source": f"agent-{i:04}", "lead_ms": -1000 - i, "events": 1, "ahead": 0, "updated_ms": now}
              for i in range(150)),
        ],
        "quarantine": [
            *({"origin": f"fleetwatch.heartbeats:0:{i}", "reason": "ts_ahead_of_clock", "detail": "x", "raw": "{}",
               "source": "agent-fast", "recorded_at": now} for i in range(3)),
            {"origin": "fleetwatch.heartbeats:0:9", "reason": "ts_out_of_range", "detail": "in the future: x",
             "raw": "{}", "source": "agent-micros", "recorded_at": now},
            {"origin": "fleetwatch.heartbeats:0:10", "reason": "not_json", "detail": None, "raw": "x",
             "source": None, "recorded_at": now},
        ],
    })
    server = start_metrics_server(store, 0, host="127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=30) as response:
            assert response.status == 200
            text = response.read().decode()
    finally:
        server.stop()
        store.close()
    lead = _samples(text, "fleetwatch_source_clock_lead_seconds")
    assert lead["agent-fast"] == 9.75 and lead["probe-1"] == -0.32
    assert "agent-gone" not in lead  # not heard of for an hour
    assert len(lead) == 100  # capped: those that lead the most
    assert "agent-0097" in lead and "agent-0098" not in lead
    assert _samples(text, "fleetwatch_source_quarantined_ahead_messages") == {"agent-fast": 3, "agent-micros": 1}
    assert "# TYPE fleetwatch_source_clock_lead_seconds gauge" in text


def _firing(tmp_path: Path, series: str, values: str) -> list[str]:
    return rules_firing(tmp_path, {series: values}, "6m", ("FleetwatchSourceClockAhead",))


def test_a_collector_ahead_pages_and_one_in_step_does_not(tmp_path):
    series = 'fleetwatch_source_clock_lead_seconds{source="agent-fast"}'
    assert _firing(tmp_path, series, " ".join(["9.75"] * 25)) == ["FleetwatchSourceClockAhead"]
    assert _firing(tmp_path, series, " ".join(["-0.3"] * 25)) == []
