"""The `probe:` section: what `fleetwatch probe` may take per
target, the partition layout's cadence and bounds, and the fast quorum reading's cadence."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from streaming.config.bounds import Strict, off_or_at_least

__all__ = ["MIN_QUORUM_INTERVAL_MS", "ProbeConfig"]

# probe.quorum_interval_ms: 0 (off) or at least this (a reading costs a round trip to the controller).
MIN_QUORUM_INTERVAL_MS = 100


class ProbeConfig(Strict):
    """What `fleetwatch probe` may take per target; layout_*: the partition layout's cadence (0: off), bytes, time;
    quorum_interval_ms: the fast quorum reading's (0: off)."""

    # Exchanges of one target in flight at once (the probe's --concurrency, for all, is at least this).
    target_concurrency: int = Field(32, ge=1, le=4096)
    # Endpoints probed per target and round: the bootstrap addresses first, then the latest advertised.
    max_endpoints_per_target: int = Field(256, ge=1, le=65_536)
    # The largest answer read (bytes of one response frame); a bigger one fails that exchange with
    # RESPONSE_TOO_LARGE. 1 MiB: a Metadata answer of ~2,000 brokers with 255-character names.
    max_response_bytes: int = Field(1024 * 1024, ge=64 * 1024, le=64 * 1024 * 1024)
    layout_interval_ms: int = Field(60_000, ge=0, le=86_400_000)
    layout_max_bytes: int = Field(8 * 1024 * 1024, ge=64 * 1024, le=256 * 1024 * 1024)
    layout_timeout_ms: int = Field(10_000, ge=100, le=600_000)
    # The fast quorum reading (issue 44; streaming/collect/probe/quorum.py): each cluster's DescribeQuorum and
    # DescribeCluster every this often, apart from the rounds, for broker.stalled (0: off).
    quorum_interval_ms: Annotated[int, Field(ge=0, le=60_000), off_or_at_least(MIN_QUORUM_INTERVAL_MS)] = 1000
