"""The identity and routing rules of one target (README "Identity and routing rules")."""

from __future__ import annotations

from typing import Any

from .defaults import UNREACHABLE, VALID_ID
from .incidents import Alerts, Incidents, advance, seconds

__all__ = ["Target"]


class Target:
    """A target's identity rules and the misroutes of the endpoints probed for it (a target shard).

    README: the misroute of an endpoint is kept per target (two targets probing one endpoint
    keep two incidents), as the engine keeps it in the target's shard."""

    def __init__(self, name: str, alerts: Alerts) -> None:
        self.name = name
        self.inc = Incidents(alerts)
        self.pinned: str | None = None
        self.reported_id = False
        self.failing_since: int | None = None
        self.last_error: str | None = None
        self.sources: set[str] = set()  # the collectors whose responses it had, and that still watch it

    def subjects(self) -> list[Target]:
        return [self]

    def deadlines(self) -> list[int]:
        if self.failing_since is not None and not self.inc.firing("cluster.unreachable", self.name):
            return [self.failing_since + UNREACHABLE]
        return []

    def on_time(self, now: int) -> None:
        if self.failing_since is not None and now == self.failing_since + UNREACHABLE:
            self.inc.fire("cluster.unreachable", self.name, now, f"every probe failed for {seconds(UNREACHABLE)}",
                          target=self.name, failing_since_ms=self.failing_since,
                          last_error=self.last_error)

    def advance(self, now: int) -> None:
        advance(self.deadlines, self.on_time, now, self.inc.alerts)

    def dropped_by(self, source: str) -> bool:
        """`source` no longer watches it: True when no collector that answered for it does (README
        "Collectors": a target whose responses all came from that source is removed; one that another
        collector answered for too is removed once that one drops it as well)."""
        self.sources.discard(source)
        return not self.sources

    def remove(self, ts: int, reason: str) -> None:
        """What fell due before fires, then every open alert of the shard resolves with the reason."""
        self.advance(ts)
        self.inc.resolve_all(ts, reason=reason)

    def on_response(self, r: dict[str, Any]) -> None:
        self.advance(r["ts"])
        self.sources.add(r["source"])
        ts, name, ok, cluster_id, expected = r["ts"], self.name, r.get("error") is None, r["cluster_id"], r["expected"]
        if not ok:
            self.last_error = r["error"]
            # README: "first error response after a successful one"; the engine also counts from
            # an error with no success before it.
            if self.failing_since is None:
                self.failing_since = ts
        else:
            self.failing_since = None
            self.inc.resolve("cluster.unreachable", name, ts)
        # An endpoint that answered for another cluster says nothing about this target's identity.
        misrouted = bool(expected and expected.get("cluster_id") and cluster_id
                         and cluster_id != expected["cluster_id"])
        if not misrouted and cluster_id:
            if VALID_ID.match(cluster_id):
                self.reported_id = True
                self.inc.resolve("cluster.id_invalid", name, ts)
            else:
                self.inc.fire("cluster.id_invalid", name, ts, "the reported cluster id is not valid (KIP-78)",
                              cluster_id=cluster_id, target=name, endpoint=r["endpoint"],
                              reported=cluster_id)
        elif not misrouted and ok and self.reported_id:
            self.inc.fire("cluster.id_invalid", name, ts, "a cluster id was reported before and now none is",
                          target=name, endpoint=r["endpoint"], reported=None)
        if ok and expected is None and cluster_id:  # a bootstrap answer: it speaks for the target's identity
            if self.pinned is None:
                self.pinned = cluster_id
            if cluster_id == self.pinned:
                self.inc.resolve("cluster.id_changed", name, ts)
            else:
                self.inc.fire("cluster.id_changed", name, ts, f"bootstrap reports cluster id {cluster_id}, "
                              f"pinned {self.pinned}", cluster_id=cluster_id, target=name,
                              endpoint=r["endpoint"], pinned_cluster_id=self.pinned, reported=cluster_id)
        if expected is not None:
            self.check_misrouted(r, ok)

    def check_misrouted(self, r: dict[str, Any], ok: bool) -> None:
        endpoint, expected = r["endpoint"], r["expected"]
        want = {"cluster_id": expected.get("cluster_id"), "node_id": expected.get("node_id")}
        if r.get("error") == "REBOOTSTRAP_REQUIRED":
            self.inc.fire("connection.misrouted", endpoint, r["ts"], f"{endpoint} refused the expected identity "
                          "(REBOOTSTRAP_REQUIRED)", cluster_id=r["cluster_id"], target=self.name,
                          endpoint=endpoint, expected=want, error=r["error"])
            return
        if not ok:
            return  # a transport error says nothing about where the endpoint leads
        got = {"cluster_id": r["cluster_id"], "node_id": r.get("responder_node_id")}
        wrong_cluster = bool(got["cluster_id"] and want["cluster_id"] and got["cluster_id"] != want["cluster_id"])
        wrong_node = got["node_id"] is not None and want["node_id"] is not None and got["node_id"] != want["node_id"]
        if wrong_cluster or wrong_node:
            self.inc.fire("connection.misrouted", endpoint, r["ts"],
                          f"{endpoint} reaches cluster {got['cluster_id']} node {got['node_id']}, "
                          f"expected cluster {want['cluster_id']} node {want['node_id']}",
                          cluster_id=r["cluster_id"], target=self.name, endpoint=endpoint,
                          expected=want, answered=got)
        else:
            self.inc.resolve("connection.misrouted", endpoint, r["ts"])
