"""Fleet incidents: alerts of several clusters that start within a window and share a failure
domain (domains.py) are one incident. Plain Python over plain data, deterministic: the same alerts
and places give the same incidents whatever their order (README.md beside this file, "Fleet
incidents", has the rules in SPEC words).

The rules, in short:
- An alert's domains: its cluster's tags; for a broker alert its broker's rack and addresses (host,
  subnet, DNS zone); for an endpoint alert that address's; for a cluster or target alert what
  every broker of the cluster shares.
- Evidence: a domain is no evidence when every cluster of the fleet is in it, or more than
  `max_domain_share` of them (a region holding most of the fleet says nothing about why two of
  its clusters failed together), or when the fleet has fewer than two clusters in it.
- A run: the alerts of one evidence domain, in (starts_at, alert_id) order, each run starting at
  the first alert not yet in one and taking every alert that starts within `window_ms` of it.
  A run with alerts of at least `min_clusters` clusters, and of at least `min_hit_share` of the
  fleet's clusters in the domain, is a candidate (two clusters of a region of twenty failing in
  the same minute is a coincidence; most of a rack's or a canary release's clusters is not).
- Each alert is in at most one incident: the candidates are taken one at a time, the most specific
  first (the domain fewest clusters of the fleet are in, then the most clusters hit, then
  `DOMAIN_KINDS` order, then the domain's value, then the start); what a taken one holds is out of
  the others, whose runs are formed again.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from streaming.detect.domains import DOMAIN_KINDS, ClusterPlace, Domain, address_domains
from streaming.records.alert import RULES, Alert

__all__ = ["FleetIncident", "GroupingRules", "alert_domains", "cluster_key", "evidence", "group_incidents"]


@dataclass(frozen=True)
class GroupingRules:
    window_ms: int = 60_000
    min_clusters: int = 2
    max_domain_share: float = 0.67
    min_hit_share: float = 0.5
    kinds: tuple[str, ...] = DOMAIN_KINDS


@dataclass(frozen=True)
class FleetIncident:
    incident_id: str
    domain: Domain
    starts_at: int
    ends_at: int | None  # the last member's end once every member has ended, else None
    clusters: tuple[str, ...]
    members: tuple[Alert, ...]  # in (starts_at, alert_id) order

    @property
    def status(self) -> str:
        return "firing" if self.ends_at is None else "resolved"

    def to_dict(self) -> dict[str, object]:
        return {"incident_id": self.incident_id, "domain": {"kind": self.domain.kind, "value": self.domain.value},
                "status": self.status, "starts_at": self.starts_at, "ends_at": self.ends_at,
                "clusters": list(self.clusters), "member_ids": [m.alert_id for m in self.members]}


def cluster_key(alert: Alert, places: Mapping[str, ClusterPlace]) -> str | None:
    """The cluster an alert is about: its cluster id, else the cluster its target names."""
    if alert.cluster_id:
        return alert.cluster_id
    return next((key for key, place in places.items() if alert.target and place.target == alert.target), None)


def alert_domains(alert: Alert, place: ClusterPlace | None) -> frozenset[Domain]:
    kind = RULES[alert.rule].subject_kind if alert.rule in RULES else "cluster"
    found = frozenset() if place is None else place.tag_domains()
    if kind == "broker" and place is not None and alert.broker_id in place.brokers:
        return found | place.brokers[alert.broker_id].domains()
    if kind == "endpoint" and alert.endpoint:
        return found | address_domains(alert.endpoint)
    return found if place is None else place.whole_domains()


def evidence(places: Mapping[str, ClusterPlace], rules: GroupingRules) -> dict[Domain, int]:
    """Each domain that is evidence, with how many clusters of the fleet are in it."""
    held: Counter[Domain] = Counter()
    for place in places.values():
        held.update(place.domains())
    total = len(places)
    return {d: n for d, n in held.items() if d.kind in rules.kinds and 2 <= n < total
            and n <= rules.max_domain_share * total}


def _runs(alerts: list[tuple[Alert, str]], window_ms: int) -> Iterable[list[tuple[Alert, str]]]:
    run: list[tuple[Alert, str]] = []
    for item in alerts:
        if run and item[0].starts_at > run[0][0].starts_at + window_ms:
            yield run
            run = []
        run.append(item)
    if run:
        yield run


def _incident(domain: Domain, run: list[tuple[Alert, str]]) -> FleetIncident:
    members = tuple(a for a, _ in run)
    ends = [m.ends_at for m in members]
    ended = all(m.status == "resolved" and m.ends_at is not None for m in members)
    digest = hashlib.sha256(f"fleet|{domain}|{members[0].alert_id}".encode()).hexdigest()[:32]
    return FleetIncident(digest, domain, members[0].starts_at, max(e for e in ends if e is not None) if ended else None,
                         tuple(sorted({key for _, key in run})), members)


def group_incidents(alerts: Iterable[Alert], places: Mapping[str, ClusterPlace],
                    rules: GroupingRules = GroupingRules()) -> list[FleetIncident]:
    """The fleet incidents among `alerts` (firing and resolved alike; only each alert's latest
    state is read: one per alert_id), by start, then id."""
    strong = evidence(places, rules)
    latest: dict[str, Alert] = {}
    for alert in alerts:
        if alert.alert_id not in latest or alert.status == "resolved":
            latest[alert.alert_id] = alert
    by_domain: dict[Domain, list[tuple[Alert, str]]] = defaultdict(list)
    for alert in sorted(latest.values(), key=lambda a: (a.starts_at, a.alert_id)):
        key = cluster_key(alert, places)
        if key is None:
            continue
        for domain in alert_domains(alert, places.get(key)) & strong.keys():
            by_domain[domain].append((alert, key))
    rank = {kind: i for i, kind in enumerate(DOMAIN_KINDS)}
    taken: set[str] = set()
    found: list[FleetIncident] = []
    while True:
        best: tuple[tuple[object, ...], Domain, list[tuple[Alert, str]]] | None = None
        for domain, items in by_domain.items():
            for run in _runs([i for i in items if i[0].alert_id not in taken], rules.window_ms):
                clusters = len({key for _, key in run})
                if clusters < rules.min_clusters or clusters < rules.min_hit_share * strong[domain]:
                    continue
                order = (strong[domain], -clusters, rank[domain.kind], domain.value, run[0][0].starts_at)
                if best is None or order < best[0]:
                    best = (order, domain, run)
        if best is None:
            return sorted(found, key=lambda i: (i.starts_at, i.incident_id))
        found.append(_incident(best[1], best[2]))
        taken.update(a.alert_id for a, _ in best[2])
