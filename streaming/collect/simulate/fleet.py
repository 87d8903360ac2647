"""The simulated fleet: every cluster's timeline merged into one stream, and the faults injected."""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterator, Mapping
from functools import partial
from typing import Any

from streaming.collect.simulate.cluster import ClusterSim
from streaming.collect.simulate.faults import begin
from streaming.collect.simulate.identities import RACKS, ClusterIdentity, make_identity, release_of, shared_racks
from streaming.collect.simulate.schedule import not_applicable, schedule
from streaming.collect.simulate.spec import FleetSpec, InjectedFault
from streaming.detect import BrokerPlace, ClusterPlace

__all__ = ["Simulation"]


class Simulation:
    """A simulated fleet: `events()` is the stream, `faults` the faults injected into it, in start
    order (`labels()` writes them as lines).

    `skipped` names the requested kinds that the fleet's shape cannot show, with the reason.
    Targets are named c0000, c0001, ...; the stream can be iterated any number of times and is
    the same each time.
    """

    def __init__(self, spec: FleetSpec) -> None:
        self.spec = spec
        width = max(4, len(str(spec.clusters - 1)))
        correlated = bool(spec.correlated)
        self._identities = [make_identity(spec.seed, f"c{i:0{width}d}", spec.brokers,
                                          shared_racks(i, spec.clusters, spec.brokers) if correlated else RACKS,
                                          release_of(i) if correlated else None) for i in range(spec.clusters)]
        self.skipped: dict[str, str] = {k: r for k in spec.faults if (r := not_applicable(k, spec))}
        self.faults: tuple[InjectedFault, ...]
        self.faults, self._plan = schedule(spec, self._identities, tuple(self.skipped))

    def emission(self) -> Iterator[tuple[int, str, dict[str, Any]]]:
        """(time the event is sent, topic, event), in sending order."""
        sims = [self._cluster(i, info) for i, info in enumerate(self._identities)]
        merged = heapq.merge(*(sim.run(self.spec.end_ms) for sim in sims))
        if self.spec.jitter_ms:
            yield from self._jittered(merged)
        else:
            yield from ((ts, topic, ev) for ts, _, _, topic, ev in merged)

    def _cluster(self, index: int, info: ClusterIdentity) -> ClusterSim:
        sim = ClusterSim(self.spec, index, info)
        for planned in self._plan[index]:
            sim.at(planned.start, partial(begin, sim, planned))
        return sim

    def _jittered(self, merged: Iterator[tuple[int, int, int, str, dict[str, Any]]]
                  ) -> Iterator[tuple[int, str, dict[str, Any]]]:
        """Delay each event by a deterministic 0..jitter_ms-1 ms and send in delayed order.

        An event is held until no event still to come can be due before it; so an event is
        never overtaken by one more than jitter_ms - 1 ms younger: the disorder stays within
        the allowed lateness and no event is late.
        """
        rng = random.Random(f"fleetwatch-sim:{self.spec.seed}:jitter")
        held: list[tuple[int, int, int, int, str, dict[str, Any]]] = []
        for ts, index, seq, topic, ev in merged:
            while held and held[0][0] < ts:
                due, *_, held_topic, held_ev = heapq.heappop(held)
                yield due, held_topic, held_ev
            heapq.heappush(held, (ts + rng.randrange(self.spec.jitter_ms), ts, index, seq, topic, ev))
        while held:
            due, *_, held_topic, held_ev = heapq.heappop(held)
            yield due, held_topic, held_ev

    def events(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(topic, event) in emission order; nondecreasing ts unless `jitter_ms` is set."""
        for _, topic, ev in self.emission():
            yield topic, ev

    def places(self) -> dict[str, ClusterPlace]:
        """Where each cluster runs, as the fleet incidents read it (streaming/detect/domains.py): its
        brokers' racks and addresses, and its release as a tag (the configuration's `clusters[].tags`)."""
        return {info.cluster_id: ClusterPlace(
            info.cluster_id, info.target, {"release": info.release} if info.release else {},
            {n: BrokerPlace(info.rack(n), (info.address(n),)) for n in range(1, len(info.hosts) + 1)})
            for info in self._identities}

    def labels(self) -> list[dict[str, Any]]:
        """The ground truth, from what was injected: one line per fault (`InjectedFault.as_dict`),
        in start order."""
        return [fault.as_dict() for fault in self.faults]

    def cause(self, alert: Mapping[str, Any]) -> InjectedFault | None:
        """The injected fault that accounts for `alert` (an alert line), or None: an alert no fault
        was designed to raise."""
        return next((fault for fault in reversed(self.faults) if fault.covers(alert)), None)
