"""The collectors' stage: what feeds the telemetry bus with contract-v1 events (SPEC section 3).

- `simulate`: a deterministic fleet of simulated clusters with injected faults, and the alerts
  its stream must raise (the ground truth `bench/accuracy.py` and the tests check against);
- `probe`: polls real Kafka clusters and publishes what they answer; `protocol` is the few
  Kafka requests it speaks.

Both build `streaming.records.contract` records and serialise them with `contract.event_to_dict`. The
bus they publish to is its own stage, `streaming.bus`. Other stages import from here or from
the subpackages' faces (`streaming.collect.simulate`, `.probe`, `.protocol`), not from the
modules inside them.
"""

from streaming.collect import probe, protocol, simulate
from streaming.collect.probe import (
    BusPublisher,
    JsonlWriter,
    ProbeOptions,
    Prober,
    Target,
    format_address,
    parse_address,
    targets_from_config,
)
from streaming.collect.simulate import (
    DEFAULT_START_MS,
    FAULT_KINDS,
    FleetSpec,
    InjectedFault,
    LiveRun,
    Simulation,
    parse_faults,
    produce_live,
    write_events,
    write_labels,
)

__all__ = [
    "DEFAULT_START_MS",
    "FAULT_KINDS",
    "BusPublisher",
    "FleetSpec",
    "InjectedFault",
    "JsonlWriter",
    "LiveRun",
    "ProbeOptions",
    "Prober",
    "Simulation",
    "Target",
    "format_address",
    "parse_address",
    "parse_faults",
    "probe",
    "produce_live",
    "protocol",
    "simulate",
    "targets_from_config",
    "write_events",
    "write_labels",
]
