"""The pipeline page's charts: input and processed rates, batch duration and watermark lag over time,
from the `pipeline_progress` rows of a real SQLite store, drawn by plotly in headless Chromium."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.support.wait import WebDriverWait
from support.browser import screenshot
from support.dashboard_fleet import T0

from dashboard.app import create_app
from dashboard.queries.pipeline import pipeline_series
from streaming.store import Store

METRICS = ("input_rows_per_s", "processed_rows_per_s", "batch_duration_s", "watermark_lag_s")
OLD = T0 - 2 * 3600_000  # two hours before the newest batch: outside the charts' window


def _batch(query: str, i: int, recorded_at: int) -> dict[str, Any]:
    # Batch 0 has Spark's watermark before the first data (the epoch), batch 3 none recorded, and
    # Spark gave no input rate for batch 4.
    watermark = 0 if i == 0 else None if i == 3 else recorded_at - 6000 - 100 * i
    return {"query": query, "batch_id": i, "recorded_at": recorded_at, "input_rows": 1000 + i,
            "input_rows_per_s": None if i == 4 else 1000.0 + 50 * i, "processed_rows_per_s": 3000.0 + 100 * i,
            "batch_duration_ms": 500 + 10 * i, "watermark_ms": watermark, "state_rows": 40,
            "state_memory_bytes": 2**20}


def _fill(store: Store) -> list[dict[str, Any]]:
    rows = ([_batch("fleetwatch", i, T0 + i * 2000) for i in range(20)]
            + [_batch("fleetwatch_replay", i, T0 + 500 + i * 3000) for i in range(5)])
    store.write({"pipeline_progress": [*rows, _batch("fleetwatch", 99, OLD)]})
    return rows


def _expected(rows: list[dict[str, Any]], query: str) -> dict[str, list[float | None]]:
    mine = sorted((r for r in rows if r["query"] == query), key=lambda r: r["recorded_at"])
    return {
        "input_rows_per_s": [r["input_rows_per_s"] for r in mine],
        "processed_rows_per_s": [r["processed_rows_per_s"] for r in mine],
        "batch_duration_s": [r["batch_duration_ms"] / 1000 for r in mine],
        # No lag before the first watermark: not 56 years of it.
        "watermark_lag_s": [(r["recorded_at"] - r["watermark_ms"]) / 1000 if r["watermark_ms"] else None
                            for r in mine],
    }


def test_series_keep_the_recent_window_oldest_first(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    rows = _fill(store)
    series = pipeline_series(store.engine)
    store.close()
    assert len(series) == len(rows)  # the batch of two hours ago is left out
    assert [r["recorded_at"] for r in series] == sorted(r["recorded_at"] for r in rows)


# What plotly drew: its traces as it read them (the figure sends numbers as typed arrays).
CHART_JS = """const gd = document.querySelector('#pipeline-charts .js-plotly-plot');
return gd && gd._fullData ? gd._fullData.map(t => [t.name, t.meta, t.x.length,
                                                   Array.from(t.y, v => Number.isNaN(v) ? null : v)]) : null;"""


def _charted(dash_duo) -> dict[tuple[str, str], tuple[int, list[Any]]]:
    data = dash_duo.driver.execute_script(CHART_JS) or []
    return {(name, metric): (n, y) for name, metric, n, y in data}


@pytest.mark.browser
def test_pipeline_charts_draw_the_stored_batches_and_refresh(dash_duo, tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'pipeline.db'}")
    rows = _fill(store)
    dash_duo.start_server(create_app(store.url, refresh_ms=300))
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/pipeline")
    # Four charts redrawn every 300 ms: beside the other lanes of `make test` (load 8 on 2 cores)
    # the first drawing took longer than the fixture's 10 s.
    dash_duo.wait_for_element("#pipeline-charts .scatterlayer .trace", timeout=60)
    charted = _charted(dash_duo)
    for query in ("fleetwatch", "fleetwatch_replay"):
        for metric, values in _expected(rows, query).items():
            n, y = charted[(query, metric)]
            assert (n, y) == (len(values), values), (query, metric)
    # One atomic look at the SVG: the page refreshes every 300 ms.
    titles, points = dash_duo.driver.execute_script(
        "const c = document.querySelector('#pipeline-charts');"
        "return [Array.from(c.querySelectorAll('.annotation-text'), t => t.textContent),"
        " c.querySelectorAll('.scatterlayer .point').length];")
    assert titles == ["Input rows/s", "Processed rows/s", "Batch duration (s)",
                      "Watermark lag (s): wall clock - watermark"]
    # Every value is drawn as a point (a missing one leaves a gap), and the table is still below the charts.
    assert points == sum(v is not None for query in ("fleetwatch", "fleetwatch_replay")
                         for values in _expected(rows, query).values() for v in values)
    assert len(dash_duo.find_elements(".batch-row")) == 26
    charts_y, table_y = (dash_duo.find_element(s).location["y"] for s in ("#pipeline-charts", "#pipeline-body"))
    assert charts_y < table_y
    screenshot(dash_duo, "pipeline-charts")

    # A new batch is drawn on the next refresh, as the rest of the page is.
    store.write({"pipeline_progress": [_batch("fleetwatch", 20, T0 + 20 * 2000)]})
    WebDriverWait(dash_duo.driver, 30).until(
        lambda _: _charted(dash_duo)[("fleetwatch", "processed_rows_per_s")][1][-1] == 3000.0 + 100 * 20,
        "the new batch never reached the chart")
    assert dash_duo.get_logs() == []
    store.close()


@pytest.mark.browser
def test_pipeline_charts_say_when_nothing_is_recorded(dash_duo, tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'empty.db'}")
    dash_duo.start_server(create_app(store.url, refresh_ms=60_000))
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/pipeline")
    dash_duo.wait_for_contains_text("#pipeline-charts", "No batch recorded yet.")
    dash_duo.wait_for_contains_text("#pipeline-body", "No batch recorded yet.")
    assert dash_duo.get_logs() == []
    store.close()


@pytest.mark.browser
def test_pipeline_page_shows_each_collectors_clock_leaders_first_and_refreshes(dash_duo, tmp_path: Path) -> None:
    # Issue 26 point 3: a collector whose clock runs ahead is named on the pipeline page, with its
    # lead, what was refused of it, and what quarantine holds of it; a hostile source id is text.
    store = Store(f"sqlite:///{tmp_path / 'clocks.db'}")
    hostile = "<img src=x onerror=alert(1)>"
    store.write({
        "source_clocks": [
            {"source": "probe-1", "lead_ms": -320, "events": 40, "ahead": 0, "updated_ms": T0},
            {"source": "agent-fast", "lead_ms": 9_750, "events": 20, "ahead": 20, "updated_ms": T0},
            {"source": hostile, "lead_ms": -1_200, "events": 3, "ahead": 0, "updated_ms": T0},
        ],
        "quarantine": [{"origin": f"fleetwatch.heartbeats:0:{i}", "reason": "ts_ahead_of_clock", "detail": "x",
                        "raw": "{}", "source": "agent-fast", "recorded_at": T0} for i in range(37)],
    })
    dash_duo.start_server(create_app(store.url, refresh_ms=300))
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/pipeline")
    dash_duo.wait_for_element("#source-clocks .source-clock-row")

    def shown() -> list[tuple[list[str], bool]]:
        # One atomic look at the rows: the page refreshes every 300 ms.
        return [(cells, ahead) for cells, ahead in dash_duo.driver.execute_script(
            "return Array.from(document.querySelectorAll('#source-clocks .source-clock-row'),"
            " r => [Array.from(r.cells, c => c.textContent), r.classList.contains('ahead')]);")]

    assert [(cells[:5], ahead) for cells, ahead in shown()] == [
        (["agent-fast", "+9.8 s", "20", "20", "37"], True),
        (["probe-1", "-0.3 s", "40", "0", "0"], False),
        ([hostile, "-1.2 s", "3", "0", "0"], False),
    ]
    screenshot(dash_duo, "pipeline-source-clocks")
    # The next batch: the collector's clock was fixed.
    store.write({"source_clocks": [{"source": "agent-fast", "lead_ms": -500, "events": 22, "ahead": 0,
                                    "updated_ms": T0 + 1000}]})
    WebDriverWait(dash_duo.driver, 30).until(
        lambda _: [cells[:4] for cells, _ in shown()[:2]] == [["probe-1", "-0.3 s", "40", "0"],
                                                              ["agent-fast", "-0.5 s", "22", "0"]],
        "the fixed clock never reached the page")
    # What quarantine holds of it stays until retention: the row still says so.
    cells, ahead = shown()[1]
    assert (cells[:5], ahead) == (["agent-fast", "-0.5 s", "22", "0", "37"], True)
    assert dash_duo.get_logs() == []
    store.close()
