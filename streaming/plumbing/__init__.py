"""The plumbing: the small tools every floor above uses, none of which knows what fleetwatch watches.

- `clock`: wall-clock time in epoch milliseconds, the unit of every stored timestamp;
- `cycles`: Python's cycle collector kept off what needs no collecting (a stage's acyclic objects, a
  process's long-lived ones);
- `errors`: the one base of fleetwatch's errors, the kinds a command fails of with their exit codes,
  and an error in one line (`first_line`);
- `logs`: structured logs, one JSON object per line;
- `redact`: secrets kept out of logs, the store and error messages;
- `resilience`: store retries with backoff, warnings at a bounded rate;
- `ports`: TCP ports on 127.0.0.1; `receiver`: a real HTTP webhook receiver on it (the demo's, the tests');
- `jars`: Java artifacts from Maven Central, fetched once and checked against `jar_pins`;
- `lazy_names`: package faces whose names load on first use.

The face is the modules themselves (`from streaming.plumbing import clock`,
`from streaming.plumbing.errors import ConfigError`): each is a tool of its own, loaded when named.
"""

from __future__ import annotations

from streaming.plumbing.lazy_names import modules_on_first_use

__all__ = ["clock", "cycles", "errors", "jar_pins", "jars", "lazy_names", "logs", "ports", "receiver", "redact",
           "resilience"]

__getattr__ = modules_on_first_use(__name__, __all__)
