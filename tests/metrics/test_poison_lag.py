"""A watermark ahead of the wall clock must be visible: /metrics reports the lag signed (it was
clamped at 0), and the shipped Prometheus rules page on it (promtool's own rule evaluation).
Also: quarantine reasons in /metrics are grouped by code, one series per code, not per field path.
"""

from __future__ import annotations

import re
from pathlib import Path

from support.promtool import rules_firing

from streaming.job.progress import _iso_ms
from streaming.metrics import render_metrics
from streaming.store import Store

NOW_MS = 1_795_000_000_000


def _sample(text: str, name: str) -> float:
    (value,) = re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE)
    return float(value)


def _store_with_watermark(tmp_path: Path, watermark_ms: int) -> Store:
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    store.write({"pipeline_progress": [{"query": "fleetwatch", "batch_id": 7, "recorded_at": NOW_MS - 1000,
                                        "input_rows": 10, "batch_duration_ms": 800, "watermark_ms": watermark_ms,
                                        "state_rows": 3}]})
    return store


def _firing(tmp_path: Path, lag_s: float) -> list[str]:
    """The alerts promtool's rule evaluation gives for a lag series held at `lag_s` for 5 minutes."""
    return rules_firing(tmp_path, {'fleetwatch_pipeline_lag_seconds{query="fleetwatch"}': " ".join([str(lag_s)] * 21)},
                        "5m", ("FleetwatchPipelineLagging", "FleetwatchWatermarkAhead"))


def test_a_watermark_from_the_future_shows_as_negative_lag_and_pages(tmp_path):
    ahead_s = 3 * 365 * 86400  # one event in microseconds once moved it years ahead
    store = _store_with_watermark(tmp_path, NOW_MS + ahead_s * 1000)
    lag = _sample(render_metrics(store.engine, now_ms=NOW_MS), "fleetwatch_pipeline_lag_seconds")
    assert lag == -ahead_s
    assert _firing(tmp_path, lag) == ["FleetwatchWatermarkAhead"]


def test_normal_lag_pages_nothing_and_a_late_watermark_still_pages_lagging(tmp_path):
    store = _store_with_watermark(tmp_path, NOW_MS - 6000)
    lag = _sample(render_metrics(store.engine, now_ms=NOW_MS), "fleetwatch_pipeline_lag_seconds")
    assert lag == 6.0
    assert _firing(tmp_path, lag) == []
    assert _firing(tmp_path, 600.0) == ["FleetwatchPipelineLagging"]


def test_spark_watermarks_past_year_9999_are_still_read():
    # Spark prints them with 5 digits; datetime stops at 9999 and the progress row was lost.
    assert _iso_ms("2026-11-25T03:00:00.123Z") == 1_795_575_600_123
    assert _iso_ms("57000-01-01T00:00:00.000Z") == 1_736_579_088_000_000
    assert _iso_ms("1970-01-01T00:00:00.000Z") == 0


def test_quarantine_reasons_are_grouped_by_code_in_metrics(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    reasons = [f"wrong_type:brokers[{i}].port" for i in range(50)] + ["not_json", "ts_out_of_range",
                                                                        "out_of_range:broker_id"]
    store.write({"quarantine": [{"origin": f"t:0:{i}", "reason": reason, "raw": "x", "recorded_at": NOW_MS}
                                for i, reason in enumerate(reasons)]})
    text = render_metrics(store.engine, now_ms=NOW_MS)
    series = dict(re.findall(r'^fleetwatch_quarantine_messages{reason="([^"]+)"} (\S+)$', text, re.MULTILINE))
    assert series == {"wrong_type": "50", "not_json": "1", "ts_out_of_range": "1", "out_of_range": "1"}
