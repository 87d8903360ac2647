"""The receiver down for 10 minutes (issue 19): afterwards every (alert_id, status) is delivered
exactly once, in order per rule and subject; nothing lost, nothing repeated.

Runs `bench/outage_receiver.py` (the same code as the bench): a real receiver process killed with
SIGKILL and started again on the same port, the real notifier over a real SQLite store with its
default retry schedule and dead-letter limits, its clock moved through the 10 minutes.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest
from support.paths import ROOT

pytestmark = pytest.mark.integration


def _bench():
    spec = importlib.util.spec_from_file_location("outage_receiver", ROOT / "bench" / "outage_receiver.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_receiver_down_for_ten_minutes_loses_and_repeats_nothing(tmp_path):
    figures = _bench().run_outage(tmp_path, down_s=600, subjects=24)
    print(figures.summary())
    assert figures.down_s >= 600 and figures.down_wall_s > 0
    assert figures.failed_attempts > 0, "the receiver was really down: attempts were refused"
    assert figures.notifications > 24 * 2
    assert figures.lost == 0 and figures.duplicates == 0 and figures.out_of_order == 0, figures
    assert figures.delivered == figures.notifications and figures.dead_letters == 0
    # back within the longest retry pause (5 min) plus a few passes
    assert figures.catch_up_s <= 300 + 30, figures
