"""The links every notification carries (issue 43): the alert's rule's runbook and the alert's page
on the dashboard, from `alerting.runbook_base_url` and `alerting.dashboard_url`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from streaming.config import DEFAULT_DASHBOARD_URL, AlertingConfig
from streaming.records.alert import Alert

__all__ = ["Links"]


@dataclass(frozen=True)
class Links:
    """Where a receiver's reader goes next: `runbook(rule)`, `alert_page(id)`, `incident_page(id)`."""

    dashboard_url: str = DEFAULT_DASHBOARD_URL
    runbook_base: str = DEFAULT_DASHBOARD_URL + "/runbooks"

    @classmethod
    def of(cls, alerting: AlertingConfig) -> Links:
        """`alerting`'s links; without a `runbook_base_url`, the dashboard's own runbook pages."""
        dashboard = alerting.dashboard_url.rstrip("/")
        return cls(dashboard, (alerting.runbook_base_url or dashboard + "/runbooks").rstrip("/"))

    def runbook(self, rule: str) -> str:
        return f"{self.runbook_base}/{quote(rule, safe='')}"

    def alert_page(self, alert_id: str) -> str:
        return f"{self.dashboard_url.rstrip('/')}/alerts?alert={quote(alert_id, safe='')}"

    def incident_page(self, incident_id: str) -> str:
        return f"{self.dashboard_url.rstrip('/')}/incidents?incident={quote(incident_id, safe='')}"

    def of_alert(self, alert: Alert) -> dict[str, Any]:
        """The two fields a webhook body adds to the alert object."""
        return {"runbook_url": self.runbook(alert.rule), "dashboard_url": self.alert_page(alert.alert_id)}
