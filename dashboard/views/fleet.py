"""The fleet overview: the summary strip, the clusters table and the fleet map."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from dash import html

from dashboard.queries.shared import SEVERITIES, STATES
from dashboard.views.elements import Href, cluster_label, cluster_path, count_card, dash_element, table_or_empty
from dashboard.views.formatting import format_age

__all__ = [
    "HEALTHY_LIST_LIMIT",
    "LABELLED_TILES_LIMIT",
    "LISTED_LIMIT",
    "MAP_STATES",
    "fleet_map",
    "fleet_table",
    "summary_strip",
    "tag_text",
    "tile_state",
]

# More healthy clusters than this collapse into one count line unless asked for.
HEALTHY_LIST_LIMIT = 20
# Asked for, at most this many healthy rows (a refresh of 1,000 rows every 2 s is ~1.4 MB).
LISTED_LIMIT = 200
# Up to this many clusters, fleet map tiles carry their name; more are plain squares.
LABELLED_TILES_LIMIT = 120

_STATE_LABEL = {"ONLINE": "online", "FENCED": "fenced", "STOPPING": "stopping", "OFFLINE": "offline",
                "UNKNOWN": "no state"}


def summary_strip(summary: dict[str, Any]) -> html.Div:
    """Clusters, brokers by state and firing alerts by severity."""
    brokers: dict[str, int] = summary["brokers"]
    firing: dict[str, int] = summary["firing"]
    cards = [count_card(summary["clusters"], "clusters"), count_card(sum(brokers.values()), "brokers")]
    cards += [count_card(brokers[s], _STATE_LABEL[s]) for s in (*STATES, "UNKNOWN") if brokers.get(s)]
    cards += [count_card(firing.get(s, 0), f"{s} firing", s if firing.get(s) else "healthy")
              for s in SEVERITIES]
    return html.Div(cards, className="strip", id="summary")


def tag_text(tags: Mapping[str, str] | None) -> str:
    """A target's tags as one line: "env=prod region=eu-west-1"."""
    return " ".join(f"{k}={v}" for k, v in sorted((tags or {}).items()))


def _cluster_row(href: Href, row: dict[str, Any], tags: Mapping[str, Mapping[str, str]] | None) -> dict[str, Any]:
    severity = row["severity"] or "healthy"
    cluster_id, name = row["cluster_id"], row.get("name")
    # Its name first (issue 43), linking to its page; the id second, to copy.
    link = [dash_element("Link", name or cluster_label(cluster_id), namespace="dash_core_components",
                         href=href(cluster_path(cluster_id)),
                         className="cluster-link cluster-name" if name else "cluster-link mono")]
    if name:
        link.append(dash_element("Span", cluster_label(cluster_id), className="cluster-id mono", title="cluster id"))
    counts = [dash_element("Td", row[k] or "", className="num") for k in ("online", "fenced", "stopping",
                                                                       "offline", "unknown")]
    tag_cell = [] if tags is None else [dash_element("Td", tag_text(tags.get(row["target"] or "")), className="tags")]
    return dash_element("Tr", [
        dash_element("Td", link, className="cluster"), dash_element("Td", row["target"] or "—"), *tag_cell,
        dash_element("Td", row["brokers"], className="num"), *counts,
        dash_element("Td", row["firing"] or "", className="num"), dash_element("Td", row["severity"] or "healthy"),
        dash_element("Td", format_age(row["stalest_heartbeat_age_ms"]), className="num")],
        className=f"cluster-row sev-{severity}", **{"data-cluster": cluster_id})


def fleet_table(href: Href, rows: list[dict[str, Any]], show_healthy: bool,
                tags: Mapping[str, Mapping[str, str]] | None = None) -> html.Div:
    """Clusters with firing alerts one per row; healthy ones collapse into a count when many.

    With `tags` (target name -> tags), a column shows each cluster's target's tags.
    """
    head = ["Cluster", "Target", *([] if tags is None else ["Tags"]), ("Brokers", "num"), ("Online", "num"),
            ("Fenced", "num"), ("Stopping", "num"), ("Offline", "num"), ("No state", "num"), ("Firing", "num"),
            "Worst", ("Stalest heartbeat", "num")]
    troubled = [r for r in rows if r["severity"]]
    healthy = [r for r in rows if not r["severity"]]
    body = [_cluster_row(href, r, tags) for r in troubled]
    if show_healthy or len(healthy) <= HEALTHY_LIST_LIMIT:
        body += [_cluster_row(href, r, tags) for r in healthy[:LISTED_LIMIT]]
        if len(healthy) > LISTED_LIMIT:
            body.append(html.Tr(html.Td(f"and {len(healthy) - LISTED_LIMIT:,} more healthy clusters: search or "
                                        "filter by tag to narrow the list", colSpan=len(head)),
                                className="healthy-count", id="healthy-count"))
    else:
        body.append(html.Tr(html.Td(f"{len(healthy):,} healthy clusters (no firing alert): tick "
                                    "\"list healthy clusters\" or search to see them", colSpan=len(head)),
                            className="healthy-count", id="healthy-count"))
    return table_or_empty(head, body, "No cluster matches." if rows else "The store holds no cluster yet.")


# A fleet map tile's state, worst first: its worst firing alert's severity; else "degraded" when
# not every broker is ONLINE (or none is known) though no alert fires; else "healthy".
MAP_STATES = ("critical", "warning", "info", "degraded", "healthy")
_MAP_STATE_LABEL = {"critical": "critical", "warning": "warning", "info": "info",
                    "degraded": "not every broker online, no alert", "healthy": "healthy"}
_NOT_ONLINE = (("fenced", "fenced"), ("stopping", "stopping"), ("offline", "offline"), ("unknown", "with no state"))


def tile_state(row: Mapping[str, Any]) -> str:
    """The state of a cluster's tile on the fleet map (MAP_STATES), from its overview row."""
    if row["severity"]:
        return row["severity"]
    return "healthy" if row["brokers"] and row["online"] == row["brokers"] else "degraded"


def _brokers(n: int) -> str:
    return f"{n} broker{'s' if n != 1 else ''}"


def _problem(row: Mapping[str, Any], worst: Mapping[str, Any] | None) -> str:
    """A cluster's worst problem in one line, for its tile's tooltip."""
    more = row["firing"] - 1
    if worst is not None:
        line = f"{worst['severity']}: {worst['rule']}: {worst['summary']}"
        return line + (f" (and {more} more firing)" if more > 0 else "")
    if row["severity"]:  # its alert fired between the two reads
        return f"{row['severity']}: {row['firing']} firing"
    if not row["brokers"]:
        return "no broker seen yet"
    off = [f"{_brokers(row[key])} {label}" for key, label in _NOT_ONLINE if row[key]]
    if off:
        return "no alert firing; " + ", ".join(off)
    return f"healthy: all {_brokers(row['brokers'])} online"


def _tile(href: Href, row: Mapping[str, Any], state: str, problem: str, labelled: bool) -> dict[str, Any]:
    """One tile: a link to the cluster's page, its name and worst problem as its tooltip."""
    named = row.get("name") or row["target"]
    cluster_id, name = row["cluster_id"], named or cluster_label(row["cluster_id"])
    title = f"{name}\n{cluster_id}\n{problem}" if named else f"{name}\n{problem}"
    return dash_element("A", name if labelled else None, href=href(cluster_path(cluster_id)),
                    className=f"tile sev-{state}", title=title)


def _state_counts(states: Sequence[str]) -> dict[str, int]:
    return {s: states.count(s) for s in MAP_STATES}


def _group_head(group_by: str, value: str | None, states: Sequence[str]) -> html.Div:
    name = ("all clusters" if not group_by
            else f"{group_by}={value}" if value is not None else f"no {group_by} tag")
    trouble = [f"{n:,} {s}" for s, n in _state_counts(states).items() if n and s not in ("healthy", "degraded")]
    size = f"{len(states):,} cluster{'s' if len(states) != 1 else ''}"
    return html.Div([html.Span(name, className="group-name"),
                     html.Span(" · ".join([size, *trouble]), className="muted")],
                    className="group-head")


def fleet_map(href: Href, rows: Sequence[Mapping[str, Any]], worst: Mapping[str, Mapping[str, Any]],
              tags: Mapping[str, Mapping[str, str]], group_by: str) -> tuple[html.Div, str]:
    """One tile per cluster, coloured by its worst state (`tile_state`), linking to its page; and
    a digest of the map (same digest, same map).

    Grouped by the value of the `group_by` tag of the cluster's target (groups by value, the
    clusters without that tag last), all in one group when `group_by` is empty. Within a group
    tiles keep their place (by name), whatever their state: the eye finds a cluster where it was.
    `worst` maps a cluster id to its worst firing alert (`queries.fleet.worst_alerts`).
    """
    if not rows:
        return html.Div([]), ""
    labelled = len(rows) <= LABELLED_TILES_LIMIT
    groups: dict[str | None, list[Mapping[str, Any]]] = {}
    for row in rows:
        value = (tags.get(row["target"] or "") or {}).get(group_by) if group_by else None
        groups.setdefault(value, []).append(row)
    order = sorted(v for v in groups if v is not None) + ([None] if None in groups else [])
    sections, every_state, every_tile = [], [], []
    for value in order:
        members = sorted(groups[value],
                         key=lambda r: (r.get("name") or r["target"] or r["cluster_id"], r["cluster_id"]))
        states = [tile_state(r) for r in members]
        every_state += states
        tiles = [_tile(href, r, state, _problem(r, worst.get(r["cluster_id"])), labelled)
                 for r, state in zip(members, states, strict=True)]
        every_tile.append((value, tiles))
        sections.append(html.Div([_group_head(group_by, value, states),
                                  html.Div(tiles, className="tiles labelled" if labelled else "tiles")],
                                 className="map-group", **{"data-group": value or ""}))
    legend = html.Div([html.Span([html.Span(className=f"swatch sev-{s}"), f"{n:,} {_MAP_STATE_LABEL[s]}"],
                                 className="legend-item")
                       for s, n in _state_counts(every_state).items()], className="map-legend")
    # The tiles decide everything else on the map (headers and legend count their states).
    digest = hashlib.blake2b(orjson.dumps([group_by, every_tile]), digest_size=16).hexdigest()
    return html.Div([legend, *sections]), digest
