"""A rehearsal of the production topology on one machine (issue 26): `topology.py` starts and stops
it, `targets.py` holds the real target clusters and their faults, `rows.py` kills or disrupts one part
while a fault is open (or removes the target), `scoring.py` counts what a real receiver got. Used by
bench/rehearsal.py and tests/ops/test_deploy_standalone.py (no tests here)."""

from streaming.workshop.rehearsal.rows import DISRUPTIONS, KILLS, POSTGRES_DOWN_S, TARGET_REMOVED, Rehearsal, describe
from streaming.workshop.rehearsal.scoring import RowScore
from streaming.workshop.rehearsal.targets import Fault, Targets, subject
from streaming.workshop.rehearsal.topology import Plan, Topology

__all__ = ["DISRUPTIONS", "KILLS", "POSTGRES_DOWN_S", "TARGET_REMOVED", "Fault", "Plan", "Rehearsal", "RowScore",
           "Targets", "Topology", "describe", "subject"]
