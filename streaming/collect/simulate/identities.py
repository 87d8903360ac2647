"""The static identity of the simulated clusters: ids, target names, broker hosts."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Any

__all__ = ["DOMAIN", "PORT", "RACKS", "ClusterIdentity", "cluster_id_of", "make_identity"]

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

    def address(self, node: int) -> str:
        return f"{self.hosts[node - 1]}:{PORT}"

    def entry(self, node: int) -> dict[str, Any]:
        return {"node_id": node, "host": self.hosts[node - 1], "port": PORT,
                "rack": RACKS[(node - 1) % len(RACKS)]}

    def broker_list(self) -> list[dict[str, Any]]:
        return [self.entry(n) for n in range(1, len(self.hosts) + 1)]


def cluster_id_of(seed: int, name: str) -> str:
    """A KIP-78 style id: 16 bytes in URL-safe base64 without padding (22 characters)."""
    digest = hashlib.sha256(f"fleetwatch-sim:{seed}:{name}".encode()).digest()[:16]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def make_identity(seed: int, target: str, brokers: int) -> ClusterIdentity:
    hosts = tuple(f"{target}-b{n}.{DOMAIN}" for n in range(1, brokers + 1))
    return ClusterIdentity(cluster_id_of(seed, target), target, hosts, controller=1)
