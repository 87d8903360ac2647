"""Misrouted connections (KIP-1242) and endpoint collisions: where an endpoint really leads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from streaming.detect.alerts import Emitter, Incidents
from streaming.detect.forgetting import RENEWALS_PER_TTL
from streaming.records.contract import REBOOTSTRAP_REQUIRED, Broker, MetadataResponse

__all__ = ["AddressChange", "AddressHolders", "Advert", "Advertisements", "check_misrouted"]

MISROUTED = "connection.misrouted"
COLLISION = "endpoint.collision"


def check_misrouted(r: MetadataResponse, incidents: Incidents, out: Emitter) -> None:
    """A probe of an endpoint with an expected identity (not a bootstrap)."""
    expected = r.expected
    if expected is None:
        return
    if r.error == REBOOTSTRAP_REQUIRED:
        incidents.fire(out, MISROUTED, r.endpoint, r.ts,
                       f"{r.endpoint} refused the expected identity (REBOOTSTRAP_REQUIRED)",
                       cluster_id=r.cluster_id, target=r.target, endpoint=r.endpoint,
                       details={"expected": {"cluster_id": expected.cluster_id, "node_id": expected.node_id},
                                "error": r.error})
        return
    if not r.ok:
        return  # a transport or other error says nothing about where the endpoint leads
    wrong_cluster = bool(r.cluster_id and expected.cluster_id and r.cluster_id != expected.cluster_id)
    wrong_node = (r.responder_node_id is not None and expected.node_id is not None
                  and r.responder_node_id != expected.node_id)
    if wrong_cluster or wrong_node:
        incidents.fire(out, MISROUTED, r.endpoint, r.ts,
                       f"{r.endpoint} reaches cluster {r.cluster_id} node {r.responder_node_id}, "
                       f"expected cluster {expected.cluster_id} node {expected.node_id}",
                       cluster_id=r.cluster_id, target=r.target, endpoint=r.endpoint,
                       details={"expected": {"cluster_id": expected.cluster_id, "node_id": expected.node_id},
                                "answered": {"cluster_id": r.cluster_id, "node_id": r.responder_node_id}})
    else:
        incidents.resolve(out, MISROUTED, r.endpoint, r.ts)


@dataclass(frozen=True, slots=True)
class AddressChange:
    """What a cluster's shard hands on to the shard of one address it advertises (or advertised):
    the pair (`cluster_id`, `node_id`) holds `address` until `until` (its lease), or, with `until`
    None, advertises it no more. `target`: of the response that advertised it (None for a
    registration). `position`, `seq`: of the event it comes from, and its place among that
    event's changes."""

    address: str
    ts: int
    cluster_id: str
    node_id: int
    until: int | None
    target: str | None
    position: tuple[Any, ...]
    seq: int


class Advert(NamedTuple):
    """What one pair (`cluster_id`, `node_id`) of a cluster advertises: the host:port set it was
    last seen advertising, when its lease was last renewed, and whether it was seen in a broker
    list (`listed`) or in a registration (README "Identity and routing rules")."""

    addresses: frozenset[str]
    renewed_ms: int
    listed: bool


@dataclass
class Advertisements:
    """What one cluster advertises now (node id -> its `Advert`), kept by the cluster's shard,
    which hears every event that changes it; the changes go to the addresses' shards.

    A pair's advertisement ends when the source it came from says it ended (a broker list of the
    cluster that omits a listed pair; a broker_state OFFLINE, the broker no longer registered) or
    when its lease lapses: so it holds only what the cluster currently advertises."""

    by_node: dict[int, Advert] = field(default_factory=dict)
    # The broker list of the cluster's last response, and until when repeating it renews no lease:
    # nearly every response repeats it, and then it changes nothing. A cache: not pickled.
    _listed: tuple[Broker, ...] | None = field(default=None, repr=False, compare=False)
    _renew_after: int = field(default=0, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        return {"by_node": self.by_node}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # (A layout of format 3 also carries `lease`: state_format.py upgrades it.)
        self.__dict__.update(state, _listed=None, _renew_after=0)

    def listed(self, cluster_id: str, brokers: tuple[Broker, ...], at: int, ttl_ms: int,
               target: str | None, position: tuple[Any, ...]) -> list[AddressChange]:
        """A response of the cluster (probing `target`) lists `brokers`, each at its one address:
        every pair it lists advertises that address, and a listed pair it omits advertises nothing."""
        if brokers == self._listed and at <= self._renew_after:
            return []
        ids = {b.node_id for b in brokers}
        omitted = [node for node, advert in self.by_node.items() if advert.listed and node not in ids]
        changes = self._advertise(cluster_id, [(b.node_id, frozenset((b.address,))) for b in brokers], omitted,
                                  at, ttl_ms, target, position, listed=True)
        self._listed = brokers
        self._renew_after = min(self.by_node[b.node_id].renewed_ms for b in brokers) + ttl_ms // RENEWALS_PER_TTL
        return changes

    def registered(self, cluster_id: str, node_id: int, addresses: frozenset[str], at: int, ttl_ms: int,
                   position: tuple[Any, ...]) -> list[AddressChange]:
        """A broker registered with the endpoints `addresses`."""
        self._listed = None
        return self._advertise(cluster_id, [(node_id, addresses)], [], at, ttl_ms, None, position, listed=False)

    def unregistered(self, cluster_id: str, node_ids: list[int], at: int, ttl_ms: int,
                     position: tuple[Any, ...]) -> list[AddressChange]:
        """The brokers are no longer registered (broker_state OFFLINE, or a collector's whole set of
        registrations omits them), or the cluster is no longer watched (every node id): they
        advertise nothing."""
        self._listed = None
        return self._advertise(cluster_id, [], node_ids, at, ttl_ms, None, position, listed=False)

    def heard(self, cluster_id: str, node_id: int, at: int, ttl_ms: int,
              position: tuple[Any, ...]) -> list[AddressChange]:
        """A heartbeat or a broker_state (other than OFFLINE) of the broker: it is still registered,
        with what it advertises; its lease is renewed when due."""
        advert = self.by_node.get(node_id)
        if advert is None or not _renew_due(advert, at, ttl_ms):
            return []
        if _lapsed(advert, at, ttl_ms):
            del self.by_node[node_id]  # only a broker list or a registration advertises anew
            return []
        return self._advertise(cluster_id, [(node_id, advert.addresses)], [], at, ttl_ms, None, position,
                               listed=advert.listed)

    def taken_from(self, node_id: int, addresses: list[str], now: int, ttl_ms: int) -> bool:
        """Whether another node id of the cluster advertises now an address of `addresses` (where
        `node_id` was last seen) that `node_id` itself no longer advertises: it was replaced there."""
        own = self.by_node.get(node_id)
        left = set(addresses) - (own.addresses if own is not None and not _lapsed(own, now, ttl_ms) else set())
        return bool(left) and any(node != node_id and not _lapsed(advert, now, ttl_ms)
                                  and not advert.addresses.isdisjoint(left) for node, advert in self.by_node.items())

    def forget_lapsed(self, now: int, ttl_ms: int) -> None:
        """Drop the pairs whose lease lapsed before `now`: every address has forgotten them, and
        a pair seen again starts over, whether it was dropped or not."""
        lapsed = [node for node, advert in self.by_node.items() if _lapsed(advert, now, ttl_ms)]
        for node in lapsed:
            del self.by_node[node]
        if lapsed:
            self._listed = None

    def _advertise(self, cluster_id: str, entries: list[tuple[int, frozenset[str]]], withdrawn: list[int],
                   at: int, ttl_ms: int, target: str | None, position: tuple[Any, ...],
                   listed: bool) -> list[AddressChange]:
        """`entries` advertise what they say, `withdrawn` pairs nothing. Every address a pair stops
        advertising is handed on before any it starts advertising: one event is one moment, and a
        pair that takes the address another one leaves at that moment collides with nobody."""
        ends: list[tuple[str, int]] = []
        holds: list[tuple[str, int, int]] = []
        for node_id in withdrawn:
            advert = self.by_node.pop(node_id, None)
            if advert is not None and not _lapsed(advert, at, ttl_ms):
                ends += [(address, node_id) for address in sorted(advert.addresses)]
        for node_id, new in entries:
            advert = self.by_node.get(node_id)
            if advert is not None and _lapsed(advert, at, ttl_ms):
                advert = None  # its lease ended: every address has forgotten it; it starts over
            old = advert.addresses if advert is not None else frozenset()
            renewed = at if advert is None or _renew_due(advert, at, ttl_ms) else advert.renewed_ms
            self.by_node[node_id] = Advert(new, renewed, listed)
            ends += [(address, node_id) for address in sorted(old - new)]
            resent = new if advert is None or renewed != advert.renewed_ms else new - old
            holds += [(address, node_id, renewed + ttl_ms) for address in sorted(resent)]
        changes = [AddressChange(address, at, cluster_id, node_id, None, target, position, seq)
                   for seq, (address, node_id) in enumerate(ends)]
        return changes + [AddressChange(address, at, cluster_id, node_id, until, target, position, seq)
                          for seq, (address, node_id, until) in enumerate(holds, start=len(changes))]


def _lapsed(advert: Advert, now: int, ttl_ms: int) -> bool:
    return now - advert.renewed_ms > ttl_ms


def _renew_due(advert: Advert, now: int, ttl_ms: int) -> bool:
    # A lease is renewed at the first confirmation more than TTL / RENEWALS_PER_TTL after its last
    # renewal (forgetting.py): one hand-off per address and sixteenth of the TTL.
    return now - advert.renewed_ms > ttl_ms // RENEWALS_PER_TTL


@dataclass
class AddressHolders:
    """The pairs advertising one address (the state of its `addr:` shard): (cluster id, node id)
    -> the end of its lease. A pair whose lease ended advertises the address no more."""

    address: str
    holders: dict[tuple[str, int], int] = field(default_factory=dict)

    def deadline(self, incidents: Incidents) -> int | None:
        """While the collision is open: the lease end that leaves one pair or none."""
        if not incidents.is_firing(COLLISION, self.address):
            return None
        return sorted(self.holders.values())[-2]

    def on_time(self, now: int, incidents: Incidents, out: Emitter) -> None:
        self._drop_ended(now + 1)
        if len(self.holders) < 2:
            incidents.resolve(out, COLLISION, self.address, now)

    def apply(self, change: AddressChange, incidents: Incidents, out: Emitter) -> None:
        """A hand-off at `change.ts`, once every deadline before it was applied."""
        self._drop_ended(change.ts)  # none of them makes or ends a collision (see `deadline`)
        pair = (change.cluster_id, change.node_id)
        if change.until is None:
            if self.holders.pop(pair, None) is not None and len(self.holders) < 2:
                incidents.resolve(out, COLLISION, self.address, change.ts)
            return
        new = pair not in self.holders
        self.holders[pair] = change.until
        if new and len(self.holders) >= 2:
            names = sorted(f"{c}/{n}" for c, n in self.holders)
            incidents.fire(out, COLLISION, self.address, change.ts,
                           f"{self.address} is advertised by {', '.join(names)}",
                           cluster_id=change.cluster_id, target=change.target, endpoint=self.address,
                           details={"advertised_by": names})

    def _drop_ended(self, now: int) -> None:
        """Forget the pairs whose lease ended before `now`."""
        for pair in [pair for pair, until in self.holders.items() if until < now]:
            del self.holders[pair]
