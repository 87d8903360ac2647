"""The static identity of the simulated clusters: ids, target names, broker hosts."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from functools import cached_property

from streaming.records.contract import Broker, Expected

__all__ = ["BAD_RELEASE", "DOMAIN", "PORT", "RACKS", "RACK_ROW", "ClusterIdentity", "cluster_id_of", "make_identity",
           "rack_row", "release_of", "shared_racks"]

PORT = 9092
DOMAIN = "fleet.local"
RACKS = ("a", "b", "c")


@dataclass(frozen=True)
class ClusterIdentity:
    """The static identity of one cluster: id, target name, brokers and usual controller."""

    cluster_id: str
    target: str
    hosts: tuple[str, ...]
    controller: int
    racks: tuple[str, ...] = RACKS  # broker n is in racks[(n - 1) % len(racks)]
    release: str | None = None  # the Kafka release it runs, a configured tag (fleet incidents)

    def rack(self, node: int) -> str:
        return self.racks[(node - 1) % len(self.racks)]

    def address(self, node: int) -> str:
        return f"{self.hosts[node - 1]}:{PORT}"

    @cached_property
    def brokers(self) -> tuple[Broker, ...]:
        """Every broker as a Metadata answer lists it (made once: every answer lists them)."""
        return tuple(Broker(n, host, PORT, self.rack(n)) for n, host in enumerate(self.hosts, 1))

    @cached_property
    def expectations(self) -> tuple[Expected, ...]:
        """What the prober expects behind each broker's endpoint, by node - 1."""
        return tuple(Expected(self.cluster_id, n) for n in range(1, len(self.hosts) + 1))


def cluster_id_of(seed: int, name: str) -> str:
    """A KIP-78 style id: 16 bytes in URL-safe base64 without padding (22 characters)."""
    digest = hashlib.sha256(f"fleetwatch-sim:{seed}:{name}".encode()).digest()[:16]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def make_identity(seed: int, target: str, brokers: int, racks: tuple[str, ...] = RACKS,
                  release: str | None = None) -> ClusterIdentity:
    hosts = tuple(f"{target}-b{n}.{DOMAIN}" for n in range(1, brokers + 1))
    return ClusterIdentity(cluster_id_of(seed, target), target, hosts, controller=1, racks=racks, release=release)


# Clusters per rack row when racks are shared (FleetSpec.correlated): broker n of the clusters of
# one row is in the row's rack n, so a rack holds one broker of each of these clusters.
RACK_ROW = 4


def rack_row(index: int, clusters: int) -> int:
    """The row of cluster `index`: every (clusters // RACK_ROW)-th cluster is in one row, so the
    regular schedule (fault n on cluster n, a minute apart) never hits two clusters of a row at once."""
    return index % max(1, clusters // RACK_ROW)


def shared_racks(index: int, clusters: int, brokers: int) -> tuple[str, ...]:
    """Fleet-wide rack names of cluster `index`'s brokers: `r<row>-<n>`, shared with the other
    clusters of its row (a datacenter's racks, each holding brokers of a few clusters)."""
    return tuple(f"r{rack_row(index, clusters):03d}-{n}" for n in range(1, brokers + 1))


# The release a few clusters were upgraded to (one in nine, in other rack rows than each other when
# the fleet has ten rows): the correlated "release" fault hits it.
BAD_RELEASE = "4.4.1"


def release_of(index: int) -> str:
    return BAD_RELEASE if index % 9 == 4 else "4.3.1" if index % 2 else "4.4.0"
