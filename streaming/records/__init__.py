"""The records: what one stage hands the next, each a typed record its producer and its consumers share.

- `contract`: the telemetry event contract (SPEC section 3), its validation and its typed events, with
  the field checks of `contract_checks` and the events of its later additions: `layout` (a cluster's
  partition layout), `collector` (what a collector says of its own rounds), `quorum` (a quorum reading);
  `recurring` parses it validating and building once what recurs (a heartbeat, a repeated response);
- `topics`: the names of the telemetry bus's topics;
- `alert`: the alert (SPEC section 4), its rules, identity and wire format;
- `job_output`: what detection hands the sink, one typed record per kind of fact.

The face is the modules themselves (`from streaming.records.alert import Alert`), each loaded when named.
"""

from __future__ import annotations

from streaming.plumbing.lazy_names import modules_on_first_use

__all__ = ["alert", "collector", "contract", "contract_checks", "job_output", "layout", "quorum", "recurring",
           "topics"]

__getattr__ = modules_on_first_use(__name__, __all__)
