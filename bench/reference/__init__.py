"""A single-process reference detector for every detection rule, written for reading, not for speed;
`bench/reference_detector.py` is its command line.

From a JSONL file of contract-v1 events it gives the alert lines `fleetwatch replay` writes
for it, in the same order, with the same ids, summaries and details. It follows
streaming/detect/README.md, with the default rule settings (no config file, no per-cluster
overrides), and imports nothing from the project: the standard library only, one event at a
time, in event-time order, with plain dictionaries for the state. `bench/replay_vs_reference.py`
checks fleetwatch against it.

How time works here (README, "Everything here is event time"):
- The watermark `W` is the largest event time read so far minus the allowed lateness. A line
  whose `ts < W` when it is read is late: it is counted and changes nothing.
- The other events are applied in `(ts, line)` order.
- A subject's deadline `T` fires once an event about that subject arrives at a time after `T`
  (the event proves the time passed), or at the end, once the final watermark is past `T`.
  Firing a timer earlier, when the watermark passes it, gives the same alerts: every later
  event about its subject is later than `T` too. So this detector fires timers only at its
  subjects' own events and at the end.
- Which events are "about" a subject is the engine's grouping (README "Forgetting"): a broker's
  own events, the responses of its cluster that list it, answer as it, or report a new active
  controller; every response of a cluster for its controller; every response of a target. The
  lease end that ends a collision or a duplicate (README "Forgetting") fires at any event that
  advertises, confirms an advertisement or bootstraps after it: it changes nothing but its own
  address or id. A collector's round of a cluster is about every broker of it (it lets their
  heartbeat deadlines up to it fall due) and about the collector; a collector's `collector_targets`
  is about every cluster and target it may remove, and about the collector (README "Collectors:
  rounds, gaps, leaving").

Where the README leaves a choice open, the engine's behaviour on the tests decided (for a
collector's rounds and targets, issue 41, the README's words alone); the notes marked "README:" in
its modules say which.

Lines that are not contract-v1 events are skipped and counted (the job quarantines them); the
check is a light one (this is a bench tool: `streaming/records/contract.py` is the real check).
"""

from .defaults import SEVERITY
from .detector import detect, read_events

__all__ = ["SEVERITY", "detect", "read_events"]
