"""Alert delivery (`fleetwatch notify`, `fleetwatch silence`): from the store's outbox to the receivers.

See `delivery` for how nothing is lost and order per subject is kept, `receivers` for the
receiver types, `routes` for `alerting.routes`, `silences` for silences and `redact` for
keeping secrets out of logs and the store.
"""
