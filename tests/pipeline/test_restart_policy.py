"""The supervisor's settings and the restart count from the store to /metrics, without Spark."""

from __future__ import annotations

import pytest

from streaming.config import ConfigError, load_config
from streaming.ops.metrics import render_metrics
from streaming.store import Store


def test_restart_settings_are_validated(tmp_path):
    path = tmp_path / "fleetwatch.yaml"
    path.write_text("spark:\n  restarts:\n    first_delay_ms: 5000\n    max_delay_ms: 1000\n")
    with pytest.raises(ConfigError, match="max_delay_ms"):
        load_config(path)
    path.write_text("spark:\n  restarts:\n    give_up_after_ms: 5\n")
    with pytest.raises(ConfigError, match="give_up_after_ms"):
        load_config(path)


def test_restarts_are_counted_in_the_store_over_runs_and_served_as_a_counter(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    assert Store(url).count_restart("fleetwatch", "NullPointerException: Cannot invoke", 1_764_000_000_000) == 1
    assert Store(url).count_restart("fleetwatch", "SparkException: Python worker exited", 1_764_000_060_000) == 2
    text = render_metrics(Store(url).engine)
    assert "# TYPE fleetwatch_job_restarts_total counter" in text
    assert 'fleetwatch_job_restarts_total{query="fleetwatch"} 2' in text
    assert 'fleetwatch_job_last_failure_timestamp_seconds{query="fleetwatch"} 1764000060' in text
