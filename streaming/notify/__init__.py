"""Alert delivery (`fleetwatch notify`, `fleetwatch silence`): from the store's outbox to the receivers.

See `delivery` for how nothing is lost and order per subject is kept (`planning` plans,
`sending` sends and backs off), `receivers` for the receiver types, `routes` for
`alerting.routes`, `policy` for silences' and retries' verdicts. Silences and the notifier's
tables and queries are in `streaming.store`; `streaming.plumbing.redact` keeps secrets out of logs and
the store.
"""

from streaming.notify import cli
from streaming.notify.delivery import Notifier, NotifierBusy, NotifyOptions
from streaming.notify.receivers import INCIDENT_SCHEMA, OutgoingAlert, sign, verify_signature

__all__ = ["INCIDENT_SCHEMA", "Notifier", "NotifierBusy", "NotifyOptions", "OutgoingAlert", "cli", "sign",
           "verify_signature"]
