"""A deterministic fleet simulator: contract-v1 events with injected faults, and ground truth.

The simulator plays a fleet of Kafka clusters as their collectors would see it: broker agents
report registrations, heartbeats and lifecycle transitions; a prober sends one bootstrap
Metadata request and one request per advertised endpoint to every cluster every few seconds,
and reads each cluster's partition layout once a minute.
Faults (SPEC section 1) are injected one at a time per cluster.

The ground truth is what was injected, nothing more: `Simulation.faults` (and `labels()`, the
same as label lines) gives each fault's kind, subject, start, end and the rules it is designed
to raise; `Simulation.cause(alert)` says which fault accounts for an alert. Which alerts
exactly the rules give for the stream is read from the events by one oracle outside the
product, the reference detector of bench/reference/ (bench/accuracy.py, tests/reference/).
Faults are designed so the few side effects they have are deliberate (a stuck broker that is
killed and restarted also flaps) and no fault straddles the end of the stream.

Everything is a pure function of `FleetSpec`: the same spec gives the same bytes.

The rooms, from the ground up: spec (what to simulate, and `InjectedFault`), identities
(cluster ids and hosts), placement (its topics' leaders and ISRs), cluster (one cluster's agents,
controller and prober), faults (the 17 fault scripts and what each is designed to raise),
schedule (which cluster gets which fault when), fleet (`Simulation`: the clusters merged into one
stream), output (files and live production) and cli (`fleetwatch simulate`).
"""

from streaming.collect.simulate.cli import command, configure_parser
from streaming.collect.simulate.fleet import Simulation
from streaming.collect.simulate.output import LiveRun, produce_live, write_events, write_labels
from streaming.collect.simulate.spec import DEFAULT_START_MS, FAULT_KINDS, FleetSpec, InjectedFault, parse_faults

__all__ = [
    "DEFAULT_START_MS",
    "FAULT_KINDS",
    "FleetSpec",
    "InjectedFault",
    "LiveRun",
    "Simulation",
    "command",
    "configure_parser",
    "parse_faults",
    "produce_live",
    "write_events",
    "write_labels",
]
