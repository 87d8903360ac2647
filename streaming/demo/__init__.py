"""`fleetwatch demo`: the whole product on the embedded default in one command (`program`), and the
demo's own webhook receiver, which the notifier delivers every alert to (`webhook`)."""

from __future__ import annotations

from streaming.demo.program import (
    RECEIVER,
    WORKDIR_MARKER,
    DemoOptions,
    check_workdir,
    demo_alerting,
    prepare_workdir,
    run_demo,
)
from streaming.demo.webhook import DemoReceiver

__all__ = ["RECEIVER", "WORKDIR_MARKER", "DemoOptions", "DemoReceiver", "check_workdir", "demo_alerting",
           "prepare_workdir", "run_demo"]
