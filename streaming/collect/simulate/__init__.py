"""A deterministic fleet simulator: contract-v1 events with injected faults, and ground truth.

The simulator plays a fleet of Kafka clusters as their collectors would see it: broker agents
report registrations, heartbeats and lifecycle transitions; a prober sends one bootstrap
Metadata request and one request per advertised endpoint to every cluster every few seconds.
Faults (SPEC section 1) are injected one at a time per cluster, and `Simulation.labels()` lists
every alert the rules of streaming/detect/README.md must raise for the stream, with the fault
that caused it.

How the labels are known:
- the timing of broker faults is designed, so their broker alerts are written down by the
  fault itself (e.g. `broker.heartbeat_lost` starts at the last heartbeat + session timeout);
- rules whose outcome depends on how probe rounds fall (controller, identity and routing rules,
  `broker.flapping`) are followed by small trackers that watch the responses and transitions
  the simulator emits, so side effects of a fault are labelled too;
- faults are designed so the few side effects that remain are deliberate (a stuck broker that
  is killed and restarted also flaps) and no fault straddles the end of the stream.

Everything is a pure function of `FleetSpec`: the same spec gives the same bytes.

The rooms, from the ground up: spec (what to simulate), identities (cluster ids and hosts),
labels (the rules' re-implementation that labels the ground truth), cluster (one cluster's
agents, controller and prober), faults (the 16 fault scripts), schedule (which cluster gets
which fault when), fleet (`Simulation`: the clusters merged into one stream), output (files and
live production) and cli (`fleetwatch simulate`).
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
