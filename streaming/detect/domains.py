"""Failure domains: what a broker, a cluster or an address shares with others that one fault can
take out at once (a rack, a host, a subnet, a DNS zone, a configured tag such as a region, a zone
or a release). Plain data in, plain data out: the fleet incidents (incidents.py) group alerts by
them; the store, the simulator and the tests build the `ClusterPlace`s.

A domain is a (kind, value) pair, compared as text across the whole fleet: `rack:r07` of one
cluster is `rack:r07` of another (racks, zones and subnets are named fleet-wide in any
datacenter where they can be shared; where a team names racks `a`, `b`, `c` in every cluster,
those are held by the whole fleet and so are no evidence: incidents.py).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from streaming.config import DOMAIN_KINDS

__all__ = [
    "DOMAIN_KINDS",
    "BrokerPlace",
    "ClusterPlace",
    "Domain",
    "address_domains",
    "host_domains",
    "places_of",
]

@dataclass(frozen=True, order=True)
class Domain:
    kind: str
    value: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.value}"


@dataclass(frozen=True)
class BrokerPlace:
    rack: str | None = None
    addresses: tuple[str, ...] = ()  # host:port it advertises

    def domains(self) -> frozenset[Domain]:
        found = {Domain("rack", self.rack)} if self.rack else set()
        for address in self.addresses:
            found |= address_domains(address)
        return frozenset(found)


@dataclass(frozen=True)
class ClusterPlace:
    """What is known of where one cluster runs: its configured tags and its brokers' places."""

    key: str  # cluster id, or the configured name of a cluster never heard of
    target: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    brokers: Mapping[int, BrokerPlace] = field(default_factory=dict)

    def tag_domains(self) -> frozenset[Domain]:
        return frozenset(Domain("tag", f"{k}={v}") for k, v in self.tags.items())

    def domains(self) -> frozenset[Domain]:
        """Every domain the cluster is in, in part (any broker's) or as a whole (its tags)."""
        return self.tag_domains().union(*(b.domains() for b in self.brokers.values()))

    def whole_domains(self) -> frozenset[Domain]:
        """The domains the whole cluster is in: its tags, and what every broker of it shares (a
        cluster-wide alert, no controller or unreachable, is evidence only of those)."""
        shared = [b.domains() for b in self.brokers.values()]
        return self.tag_domains() | (frozenset.intersection(*shared) if shared else frozenset())


def host_domains(host: str) -> frozenset[Domain]:
    """A host, its subnet (an IPv4 /24, an IPv6 /64) and, for a name, its DNS parent zone when that
    has two labels or more (`b1.pay.eu.example.com` is in `pay.eu.example.com`; `b1.pay` in none:
    a single label such as `pay` or `local` names nothing one fault takes out)."""
    host = host.strip().lower().rstrip(".")
    if not host:
        return frozenset()
    found = {Domain("host", host)}
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        labels = host.split(".")
        if len(labels) >= 3:
            found.add(Domain("dns_suffix", ".".join(labels[1:])))
    else:
        prefix = 24 if ip.version == 4 else 64
        found.add(Domain("subnet", str(ipaddress.ip_network(f"{ip}/{prefix}", strict=False))))
    return frozenset(found)


def address_domains(address: str) -> frozenset[Domain]:
    """The domains of a `host:port` (an IPv6 host in brackets)."""
    host = address.rsplit(":", 1)[0] if address.count(":") == 1 or address.startswith("[") else address
    return host_domains(host.strip("[]"))


def places_of(brokers: Iterable[Mapping[str, object]], targets: Mapping[str, str],
              configured: Iterable[tuple[str, str | None, Mapping[str, str]]]) -> dict[str, ClusterPlace]:
    """The fleet's places by key, from the store's rows and the configuration: `brokers` rows
    (`cluster_id`, `broker_id`, `rack`, `endpoints`), `targets` (cluster id -> the target that
    reported it) and the configured clusters (name, expected cluster id, tags). A configured
    cluster is found by its pinned id, else by the target name its cluster id was reported by; one
    never heard of is kept under its name (its tags still count for the fleet)."""
    found: dict[str, dict[int, BrokerPlace]] = {}
    for row in brokers:
        cluster_id = str(row["cluster_id"] or "")
        if cluster_id:
            endpoints = row.get("endpoints") or ()
            found.setdefault(cluster_id, {})[int(row["broker_id"])] = BrokerPlace(
                str(row["rack"]) if row.get("rack") else None, tuple(str(e) for e in endpoints))  # type: ignore[union-attr]
    by_target = {target: cluster_id for cluster_id, target in targets.items() if target}
    tags: dict[str, Mapping[str, str]] = {}
    names: dict[str, str] = {}
    for name, pinned, cluster_tags in configured:
        key = pinned or by_target.get(name) or name
        tags[key], names[key] = cluster_tags, name
    return {key: ClusterPlace(key, names.get(key) or targets.get(key), tags.get(key, {}), found.get(key, {}))
            for key in sorted(set(found) | set(tags) | set(targets))}
