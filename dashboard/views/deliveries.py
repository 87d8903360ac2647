"""The deliveries page: deliveries by state and the latest deliveries, receivers by name only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from dash import dcc, html

from dashboard.views.elements import Href, count_card, table_or_empty
from dashboard.views.formatting import format_age, format_number, format_ts
from streaming.plumbing.redact import redact_text

__all__ = ["DELIVERY_STATES", "deliveries_table", "delivery_summary"]


# A delivery's state as shown: (label, row severity). A pending one is "queued" until its first
# attempt, then "retrying".
_DELIVERY_SHOWN = {"delivered": ("delivered", "healthy"), "dead": ("dead letter", "critical"),
                   "silenced": ("silenced", "quiet")}
DELIVERY_STATES = {"pending": "pending", "delivered": "delivered", "dead": "dead letter", "silenced": "silenced"}


def _delivery_shown(row: Mapping[str, Any], now_ms: int) -> tuple[str, str]:
    state = row["state"]
    if state in _DELIVERY_SHOWN:
        return _DELIVERY_SHOWN[state]
    if state != "pending":
        return str(state), "info"
    if not row["attempts"]:
        return "queued", "info"
    due = row["next_attempt_at"]
    return ("retrying" + (f", next in {format_age(due - now_ms)}" if due is not None and due > now_ms else ""),
            "warning")


def delivery_summary(counts: Mapping[str, Any]) -> html.Div:
    """Deliveries by state, and what waits in the outbox for the notifier (`queries.deliveries.delivery_counts`)."""
    cards = [count_card(counts["delivered"], "delivered", "healthy" if counts["delivered"] else ""),
             count_card(counts["retrying"], "retrying", "warning" if counts["retrying"] else ""),
             count_card(counts["queued"], "queued", "info" if counts["queued"] else ""),
             count_card(counts["dead"], "dead letters", "critical" if counts["dead"] else ""),
             count_card(counts["silenced"], "silenced"),
             count_card(counts["unplanned"], "in the outbox, not picked up by the notifier yet",
                   "warning" if counts["unplanned"] else "")]
    return html.Div(cards, className="strip", id="deliveries-summary")


def deliveries_table(href: Href, rows: Sequence[Mapping[str, Any]], now_ms: int, limit: int) -> html.Div:
    """Deliveries, latest activity first: receiver (its name only: a receiver's URL may hold a
    token), the alert (rule linking to it, subject), the notification (firing or resolved), state,
    attempts, last attempt and last error."""
    body = []
    for d in rows:
        label, severity = _delivery_shown(d, now_ms)
        alert = dcc.Link(d["rule"] or d["alert_id"], href=href("/alerts?alert=" + quote(d["alert_id"], safe="")),
                         className="alert-link mono", title=d["summary"] or d["alert_id"])
        body.append(html.Tr(
            [html.Td(d["receiver"]), html.Td(alert), html.Td(d["subject"] or "—", className="mono"),
             html.Td(d["status"] or "—"), html.Td(label), html.Td(format_number(d["attempts"]), className="num"),
             html.Td(format_ts(d["last_attempt_at"])),
             # The notifier scrubs errors before it stores them; scrub again, the page is no place for a secret.
             html.Td(redact_text(d["last_error"]) if d["last_error"] else "—", className="error")],
            className=f"delivery-row sev-{severity}", **{"data-receiver": d["receiver"], "data-alert": d["alert_id"]}))
    head = ["Receiver", "Alert", "Subject", "Notification", "State", ("Attempts", "num"), "Last attempt",
            "Last error"]
    note = ([html.P(f"Showing the latest {limit}; narrow the filters to see others.", className="muted")]
            if len(rows) >= limit else [])
    empty = "No delivery recorded: the notifier (fleetwatch notify) has delivered nothing from this store yet."
    return html.Div([table_or_empty(head, body, empty), *note], id="deliveries-list")
