"""The `rules:` section (SPEC section 4): every rule threshold with its default, and the overrides a
cluster may set (`clusters[].rules`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from streaming.config.bounds import MAX_DURATION_MS, MAX_FLAP_THRESHOLD, MAX_STATE_TTL_MS, Strict, off_or_at_least
from streaming.records.contract import DEFAULT_MAX_CLOCK_SKEW_MS, DEFAULT_MAX_SOURCE_LEAD_MS

__all__ = ["MIN_STALL_AFTER_MS", "RuleOverrides", "RuleSettings"]


# broker.stalled (issue 44): how old a broker's last fetch from the KRaft leader is, in one reading, when it
# warns. A healthy broker fetches at least every 500 ms (the leader's fetch wait): under 1000 ms a healthy
# broker would warn; 0 turns the rule off.
MIN_STALL_AFTER_MS = 1000


StallAfter = Annotated[int, Field(ge=0, le=MAX_DURATION_MS),
                      off_or_at_least(MIN_STALL_AFTER_MS, "a healthy broker fetches every 500 ms")]


class RuleSettings(Strict):
    """Every rule threshold of SPEC section 4, with its default."""

    allowed_lateness_ms: int = Field(5000, ge=0, le=MAX_DURATION_MS)
    # How far ahead of the wall clock an event time may be (SPEC section 3): later ones are
    # quarantined (ts_out_of_range), so one bad clock cannot move the watermark. The job's, not a cluster's.
    max_clock_skew_ms: int = Field(DEFAULT_MAX_CLOCK_SKEW_MS, ge=0, le=MAX_DURATION_MS)
    # How far ahead of the job's clock (the micro-batch's timestamp) an accepted event time may be (issue 26; SPEC
    # section 3, amended 2026-11-26): later ones are quarantined (ts_ahead_of_clock). An accepted
    # lead moves the watermark that far ahead and eats as much of allowed_lateness_ms, so it stays
    # well under it (streaming/detect/README.md, "Input bounds"). The job's, not a cluster's.
    max_source_lead_ms: int = Field(DEFAULT_MAX_SOURCE_LEAD_MS, ge=0, le=MAX_DURATION_MS)
    session_timeout_ms: int = Field(9000, gt=0, le=MAX_DURATION_MS)
    # broker.heartbeat_late (issue 31): a warning once a broker's heartbeat is this share of
    # session_timeout_ms old, before the controller fences it. Off (None) unless set: the SPEC's
    # worked examples and the simulator's ground truth predate it.
    heartbeat_late_ratio: float | None = Field(None, ge=0.1, le=0.95, allow_inf_nan=False)
    # broker.stalled (issue 44): a warning at a quorum reading that shows a broker's last fetch from the
    # active controller this old (`MIN_STALL_AFTER_MS` up; 0: off). Kafka fences it 7-9 s after it stops.
    stall_after_ms: StallAfter = 2500
    # Kafka's broker.heartbeat.interval.ms: an answer this long after the last heartbeat shows a
    # broker that serves clients but missed a heartbeat (broker.partitioned, streaming/detect/README.md).
    heartbeat_interval_ms: int = Field(2000, gt=0, le=MAX_DURATION_MS)
    fenced_grace_ms: int = Field(30000, ge=0, le=MAX_DURATION_MS)
    partition_window_ms: int = Field(15000, gt=0, le=MAX_DURATION_MS)
    stopping_timeout_ms: int = Field(120000, gt=0, le=MAX_DURATION_MS)
    resolve_after_ms: int = Field(60000, gt=0, le=MAX_DURATION_MS)
    flap_threshold: int = Field(4, ge=2, le=MAX_FLAP_THRESHOLD)
    flap_window_ms: int = Field(300000, gt=0, le=MAX_DURATION_MS)
    controller_window_ms: int = Field(15000, gt=0, le=MAX_DURATION_MS)
    controller_flap_threshold: int = Field(3, ge=2, le=MAX_FLAP_THRESHOLD)
    controller_flap_window_ms: int = Field(300000, gt=0, le=MAX_DURATION_MS)
    disagreement_ms: int = Field(30000, gt=0, le=MAX_DURATION_MS)
    unreachable_ms: int = Field(30000, gt=0, le=MAX_DURATION_MS)
    forget_after_ms: int = Field(600000, gt=0, le=MAX_DURATION_MS)
    # How long detection keeps what it is no longer told about (streaming/detect/forgetting.py).
    state_ttl_ms: int = Field(86_400_000, gt=0, le=MAX_STATE_TTL_MS)

    @property
    def heartbeat_late_ms(self) -> int | None:
        """How old a heartbeat is when broker.heartbeat_late fires (None: the rule is off)."""
        return None if self.heartbeat_late_ratio is None else int(self.heartbeat_late_ratio * self.session_timeout_ms)


class RuleOverrides(Strict):
    """Per-cluster overrides: any field of RuleSettings but the watermark's lateness, the clock
    skew, the source lead and the state TTL (all four are the job's, not a cluster's)."""

    session_timeout_ms: int | None = Field(None, gt=0, le=MAX_DURATION_MS)
    heartbeat_late_ratio: float | None = Field(None, ge=0.1, le=0.95, allow_inf_nan=False)
    stall_after_ms: StallAfter | None = None
    heartbeat_interval_ms: int | None = Field(None, gt=0, le=MAX_DURATION_MS)
    fenced_grace_ms: int | None = Field(None, ge=0, le=MAX_DURATION_MS)
    partition_window_ms: int | None = Field(None, gt=0, le=MAX_DURATION_MS)
    stopping_timeout_ms: int | None = Field(None, gt=0, le=MAX_DURATION_MS)
    resolve_after_ms: int | None = Field(None, gt=0, le=MAX_DURATION_MS)
    flap_threshold: int | None = Field(None, ge=2, le=MAX_FLAP_THRESHOLD)
    flap_window_ms: int | None = Field(None, gt=0, le=MAX_DURATION_MS)
    controller_window_ms: int | None = Field(None, gt=0, le=MAX_DURATION_MS)
    controller_flap_threshold: int | None = Field(None, ge=2, le=MAX_FLAP_THRESHOLD)
    controller_flap_window_ms: int | None = Field(None, gt=0, le=MAX_DURATION_MS)
    disagreement_ms: int | None = Field(None, gt=0, le=MAX_DURATION_MS)
    unreachable_ms: int | None = Field(None, gt=0, le=MAX_DURATION_MS)
    forget_after_ms: int | None = Field(None, gt=0, le=MAX_DURATION_MS)
