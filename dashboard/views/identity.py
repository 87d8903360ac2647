"""The identity & routing page: the cluster-id registry, misrouted endpoints and collisions."""

from __future__ import annotations

from typing import Any

from dash import html

from dashboard.views.elements import Href, cluster_link, table_or_empty
from dashboard.views.fleet import HEALTHY_LIST_LIMIT, LISTED_LIMIT
from dashboard.views.formatting import format_age, format_ts

__all__ = ["collisions_table", "misrouted_table", "registry_table"]


def _details(row: dict[str, Any]) -> dict[str, Any]:
    # `details` is JSON written from events: any shape may come back.
    details = row.get("details")
    return details if isinstance(details, dict) else {}


def _identity(href: Href, who: Any) -> list[Any]:
    """"cluster <id> node <n>" from a {"cluster_id", "node_id"} detail, the id linked."""
    who = who if isinstance(who, dict) else {}
    cluster_id, node_id = who.get("cluster_id"), who.get("node_id")
    parts: list[Any] = []
    if isinstance(cluster_id, str):
        parts += ["cluster ", cluster_link(href, cluster_id)]
    if node_id is not None:
        parts.append(f" node {node_id}")
    return parts or ["—"]


def _when(row: dict[str, Any], clock_ms: int | None) -> list[html.Td]:
    since = None if clock_ms is None else clock_ms - row["starts_at"]
    ended = (format_ts(row["ends_at"]) if row["ends_at"] is not None
             else f"firing for {format_age(since)}")
    return [html.Td(format_ts(row["starts_at"])), html.Td(ended)]


def _alert_class(kind: str, row: dict[str, Any]) -> str:
    severity = row["severity"] if row["status"] == "firing" else "healthy"
    return f"{kind} {row['status']} sev-{severity}"


def registry_table(href: Href, rows: list[dict[str, Any]], show_all: bool) -> html.Div:
    """Target -> pinned id -> last seen id; a last id that differs from the pinned one is
    highlighted. Targets in order (same id, no error) collapse into a count when many."""
    def row_of(t: dict[str, Any]) -> html.Tr:
        if t["differs"]:
            status, severity = "last seen id differs from the pinned one", "critical"
        elif t["failing"]:
            status, severity = "failing", "warning"
        elif not t["seen"]:
            status, severity = "configured, never answered", "info"
        elif t["pinned_cluster_id"] is None:
            status, severity = "not pinned", "healthy"
        else:
            status, severity = "ok", "healthy"
        pinned, last = t["pinned_cluster_id"], t["last_cluster_id"]
        error = (f"{t['last_error']} ({format_age(t['last_error_age_ms'])} ago)"
                 if t["last_error"] else "—")
        return html.Tr(
            [html.Td(t["target"]),
             html.Td(cluster_link(href, pinned) if pinned is not None else "—"),
             html.Td(cluster_link(href, last) if last is not None else "—",
                     className="differs" if t["differs"] else ""),
             html.Td(status),
             html.Td(format_age(t["last_ok_age_ms"]) + " ago" if t["last_ok_age_ms"] is not None else "—",
                     className="num"),
             html.Td(error)],
            className=f"registry-row sev-{severity}" + (" differs" if t["differs"] else ""),
            **{"data-target": t["target"]})

    head = ["Target", "Pinned cluster id", "Last seen cluster id", "Status", ("Last good answer", "num"),
            "Last error"]
    # Targets in order collapse as the clusters table's healthy clusters do (the same limits).
    calm = [t for t in rows if t["seen"] and not t["differs"] and not t["failing"]]
    notable = [t for t in rows if not (t["seen"] and not t["differs"] and not t["failing"])]
    body = [row_of(t) for t in notable]
    if show_all or len(calm) <= HEALTHY_LIST_LIMIT:
        body += [row_of(t) for t in calm[:LISTED_LIMIT]]
        if len(calm) > LISTED_LIMIT:
            body.append(html.Tr(html.Td(f"and {len(calm) - LISTED_LIMIT:,} more targets in order",
                                        colSpan=len(head)), className="healthy-count"))
    else:
        body.append(html.Tr(html.Td(f"{len(calm):,} targets answer with their pinned (or only) id: tick "
                                    "\"list every target\" to see them", colSpan=len(head)),
                            className="healthy-count"))
    return html.Div(table_or_empty(head, body, "The store knows of no target yet."), id="registry")


def misrouted_table(href: Href, rows: list[dict[str, Any]], clock_ms: int | None) -> html.Div:
    """connection.misrouted alerts: the endpoint, its target, the identity it should have
    reached and what answered (or the error it refused with)."""
    body = []
    for a in rows:
        details = _details(a)
        answered = (_identity(href, details["answered"]) if "answered" in details
                    else [str(details.get("error") or "—")])
        body.append(html.Tr(
            [html.Td(a["status"]), html.Td(a["endpoint"] or "—", className="mono"), html.Td(a["target"] or "—"),
             html.Td(_identity(href, details.get("expected"))), html.Td(answered), *_when(a, clock_ms)],
            className=_alert_class("misrouted-row", a), **{"data-alert": a["alert_id"]}))
    head = ["Status", "Endpoint", "Target", "Expected", "Answered", "Started", "Ended"]
    return html.Div(table_or_empty(head, body, "No endpoint leads to the wrong broker."), id="misrouted")


def collisions_table(href: Href, rows: list[dict[str, Any]], clock_ms: int | None) -> html.Div:
    """endpoint.collision alerts: the address and every cluster/node that advertises it."""
    body = []
    for a in rows:
        advertisers: list[Any] = []
        names = _details(a).get("advertised_by")
        for name in names if isinstance(names, list) else []:
            cluster_id, _, node = str(name).rpartition("/")
            if advertisers:
                advertisers.append(", ")
            advertisers += ([cluster_link(href, cluster_id), f"/{node}"] if cluster_id else [str(name)])
        body.append(html.Tr(
            [html.Td(a["status"]), html.Td(a["endpoint"] or "—", className="mono"),
             html.Td(advertisers or "—", className="advertisers"), *_when(a, clock_ms)],
            className=_alert_class("collision-row", a), **{"data-alert": a["alert_id"]}))
    head = ["Status", "Address", "Advertised by (cluster/node)", "Started", "Ended"]
    return html.Div(table_or_empty(head, body, "No address is advertised by two brokers."), id="collisions")
