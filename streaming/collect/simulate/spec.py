"""What to simulate: the fleet's shape, the fault kinds and the schedule's timing, and the
settings and names the whole simulation is built on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streaming.config import ProbeConfig, RuleSettings

__all__ = [
    "CORRELATED_KINDS",
    "DEFAULT_START_MS",
    "ERROR_REFUSED",
    "ERROR_TIMEOUT",
    "FAULT_KINDS",
    "LAYOUT_INTERVAL_MS",
    "RULES",
    "FleetSpec",
    "InjectedFault",
    "parse_faults",
]

# A fixed epoch for file output, so that recorded streams are byte-for-byte reproducible.
DEFAULT_START_MS = 1_764_000_000_000

FAULT_KINDS: tuple[str, ...] = (
    "broker.heartbeat_lost",
    "broker.fenced",
    "broker.partitioned",
    "broker.stuck_stopping",
    "broker.epoch_regression",
    "broker.flapping",
    "broker.illegal_transition",
    "cluster.no_controller",
    "cluster.controller_flapping",
    "cluster.controller_disagreement",
    "cluster.id_changed",
    "cluster.id_duplicate",
    "cluster.id_invalid",
    "cluster.unreachable",
    "connection.misrouted",
    "endpoint.collision",
    "cluster.partitions_offline",
)
# Correlated faults (fleet incidents): one rack failing under several clusters, one bad release.
CORRELATED_KINDS = ("rack", "release")
_SHORT_NAMES = {kind.split(".", 1)[1]: kind for kind in FAULT_KINDS}

# Labels are what the default rule settings produce; a replay with overrides differs.
RULES = RuleSettings()
# The errors the simulated prober reports, named as the real probe names them.
ERROR_REFUSED = "CONNECTION_REFUSED"
ERROR_TIMEOUT = "TIMEOUT"
# The simulated prober reads each cluster's partition layout at the real probe's default cadence.
LAYOUT_INTERVAL_MS = ProbeConfig().layout_interval_ms


def parse_faults(text: str) -> tuple[str, ...]:
    """`all`, `none`, or a comma list of fault kinds (the part after the dot is enough)."""
    value = text.strip()
    if value.lower() == "all":
        return FAULT_KINDS
    if value.lower() == "none":
        return ()
    kinds: list[str] = []
    for raw in value.split(","):
        name = raw.strip()
        kind = name if name in FAULT_KINDS else _SHORT_NAMES.get(name)
        if kind is None:
            raise ValueError(f"unknown fault {name!r}: use all, none, or a comma list of "
                             f"{', '.join(FAULT_KINDS)} (the part after the dot is enough)")
        if kind not in kinds:
            kinds.append(kind)
    return tuple(kinds)


@dataclass(frozen=True)
class FleetSpec:
    """What to simulate. Times are epoch ms (`start_ms`) or ms offsets and durations."""

    clusters: int
    brokers: int
    faults: tuple[str, ...]
    start_ms: int
    duration_ms: int
    seed: int = 0
    fault_every_ms: int = 60_000
    first_fault_ms: int = 30_000
    heartbeat_interval_ms: int = 2000
    probe_interval_ms: int = 5000
    # The simulated probe's quorum readings (issue 44): each broker's fetch age every this often, as the
    # real probe's default (`probe.quorum_interval_ms`); 0: none (the stream of an older probe).
    quorum_interval_ms: int = ProbeConfig().quorum_interval_ms
    jitter_ms: int = 0
    # CORRELATED_KINDS to inject besides `faults`; with any, racks are named fleet-wide
    # (identities.shared_racks) and clusters carry a release.
    correlated: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        problems = []
        if self.clusters < 1:
            problems.append("clusters must be at least 1")
        if self.brokers < 1:
            problems.append("brokers must be at least 1")
        if self.duration_ms <= 0:
            problems.append("duration_ms must be positive")
        if self.fault_every_ms <= 0:
            problems.append("fault_every_ms must be positive")
        # The fleet must be up and probed once before the first fault, so identities are pinned.
        if self.first_fault_ms < 10_000:
            problems.append("first_fault_ms must be at least 10000")
        # Restart gaps are designed to stay under the 9 s session timeout with these intervals.
        if not 1000 <= self.heartbeat_interval_ms <= 4000:
            problems.append("heartbeat_interval_ms must be within 1000..4000")
        # Controller views only count responders heard within 15 s: several rounds must fit.
        if not 1000 <= self.probe_interval_ms <= 10_000:
            problems.append("probe_interval_ms must be within 1000..10000")
        # A broker stopped for 3 s (a quick restart) may or may not be read stalled: no slower cadence.
        if self.quorum_interval_ms and not 200 <= self.quorum_interval_ms <= 2000:
            problems.append("quorum_interval_ms must be 0 or within 200..2000")
        if not 0 <= self.jitter_ms < RULES.allowed_lateness_ms:
            problems.append(f"jitter_ms must be within 0..{RULES.allowed_lateness_ms - 1} "
                            "(more would make events late)")
        if set(self.correlated) - set(CORRELATED_KINDS):
            problems.append(f"correlated faults must be among {CORRELATED_KINDS}")
        unknown = [f for f in self.faults if f not in FAULT_KINDS]
        if unknown:
            problems.append(f"unknown fault kinds {unknown}")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def end_ms(self) -> int:
        return self.start_ms + self.duration_ms


@dataclass(frozen=True)
class InjectedFault:
    """One fault of the schedule, as the simulator injected it: the ground truth.

    Its subject is the cluster it hits (`cluster_id`, `target`) and, where the fault is about one
    broker or one address, that broker (`broker_id`) and that `host:port` (`endpoint`); `partner`
    is the other cluster involved. It starts at `start_ms` and its last designed event happens at
    `end_ms`. `rules` are the rules it is designed to raise, its own kind first, then the side
    effects its design allows. Which alerts exactly the rules give for the stream is not written
    here: the reference detector (bench/reference/) reads them from the events.
    """

    kind: str
    cluster_id: str
    target: str
    start_ms: int
    end_ms: int
    rules: tuple[str, ...]
    broker_id: int | None = None
    endpoint: str | None = None
    partner: str | None = None
    group: str | None = None  # a correlated fault's label (the domain it hits): faults of one group are one incident

    def covers(self, alert: Mapping[str, Any]) -> bool:
        """Whether this fault accounts for `alert` (an alert line): one of the rules it is designed
        to raise, started while it ran, about its cluster (by id, or by target for the rules about
        a target, whose alerts carry the cluster id the target reported)."""
        return (alert["rule"] in self.rules and self.start_ms <= alert["starts_at"] <= self.end_ms
                and (alert["cluster_id"] == self.cluster_id or alert["target"] == self.target))

    def as_dict(self) -> dict[str, Any]:
        """The label line `fleetwatch simulate --labels` writes."""
        line = {"kind": self.kind, "cluster_id": self.cluster_id, "target": self.target,
                "broker_id": self.broker_id, "endpoint": self.endpoint, "partner": self.partner,
                "start_ms": self.start_ms, "end_ms": self.end_ms, "rules": list(self.rules)}
        return {**line, "group": self.group} if self.group else line
