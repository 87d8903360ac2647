"""Scenarios of the partition layout rules (issue 30; streaming/detect/partitions.py)."""

from __future__ import annotations

from support.rule_events import PARTITIONS_OFFLINE, UNDER_MIN_ISR, C, Cases, F, R, case_adder, layout, t

CASES: Cases = {}
case = case_adder(CASES)

HEALTHY = {"orders": [(0, 1, [1, 2, 3], [1, 2, 3]), (1, 2, [2, 3, 1], [2, 3, 1])]}
ONE_OFFLINE = {"orders": [(0, -1, [1, 2, 3], [1]), (1, 2, [2, 3, 1], [2, 3, 1])]}
ONE_UNDER = {"orders": [(0, 1, [1, 2, 3], [1]), (1, 2, [2, 3, 1], [2, 3])]}
MIN2 = {"orders": 2}

# cluster.partitions_offline --------------------------------------------------------------------
case(PARTITIONS_OFFLINE, "a layout with a leaderless partition fires; a complete one without resolves",
     [layout(0, HEALTHY), layout(30, ONE_OFFLINE), layout(60, ONE_OFFLINE), layout(90, HEALTHY)],
     [F(PARTITIONS_OFFLINE, C, t(30)), R(PARTITIONS_OFFLINE, C, t(30), t(90))], "fires", "resolves")
case(PARTITIONS_OFFLINE, "a partial layout without one resolves nothing",
     [layout(0, ONE_OFFLINE), layout(30, HEALTHY, complete=False), layout(60, HEALTHY)],
     [F(PARTITIONS_OFFLINE, C, t(0)), R(PARTITIONS_OFFLINE, C, t(0), t(60))], "resolves", "tricky")
case(PARTITIONS_OFFLINE, "every partition led, however few in sync",
     [layout(0, {"orders": [(0, 1, [1, 2, 3], [1])]}), layout(30, HEALTHY)],
     [], "quiet")

# cluster.under_min_isr --------------------------------------------------------------------------
case(UNDER_MIN_ISR, "fewer in sync than the topic's minimum fires; enough again resolves",
     [layout(0, HEALTHY, MIN2), layout(30, ONE_UNDER, MIN2), layout(60, HEALTHY, MIN2)],
     [F(UNDER_MIN_ISR, C, t(30)), R(UNDER_MIN_ISR, C, t(30), t(60))], "fires", "resolves")
case(UNDER_MIN_ISR, "exactly the minimum in sync is quiet",
     [layout(0, ONE_UNDER, {"orders": 1}), layout(30, {"orders": [(0, 1, [1, 2, 3], [1, 2])]}, MIN2)],
     [], "quiet")
case(UNDER_MIN_ISR, "a topic without its own minimum takes the brokers' default",
     [layout(0, ONE_UNDER, default_min=2), layout(30, ONE_UNDER, default_min=1)],
     [F(UNDER_MIN_ISR, C, t(0)), R(UNDER_MIN_ISR, C, t(0), t(30))], "fires", "resolves")
case(UNDER_MIN_ISR, "an offline partition is offline, not under min ISR",
     [layout(0, ONE_OFFLINE, MIN2)],
     [F(PARTITIONS_OFFLINE, C, t(0))], "quiet", "tricky")
