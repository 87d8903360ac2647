"""The schedule: which cluster gets which fault, and when."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from streaming.collect.simulate.cluster import HB_JITTER_MS, PlannedFault
from streaming.collect.simulate.faults import NEEDS_PARTNER, TIMELINE, injected
from streaming.collect.simulate.identities import ClusterIdentity, make_identity
from streaming.collect.simulate.spec import RULES, FleetSpec, InjectedFault

__all__ = ["not_applicable", "schedule"]


def not_applicable(kind: str, spec: FleetSpec) -> str | None:
    """Why the fleet's shape cannot show a fault of this kind, or None when it can."""
    if kind == "cluster.controller_disagreement" and spec.brokers < 2:
        return "needs 2 brokers per cluster"
    if kind == "endpoint.collision" and spec.brokers < 2 and spec.clusters < 2:
        return "needs 2 brokers or 2 clusters"
    return None


def schedule(spec: FleetSpec, identities: Sequence[ClusterIdentity], skipped: Sequence[str]
             ) -> tuple[tuple[InjectedFault, ...], dict[int, list[PlannedFault]]]:
    """The injected faults in start order, and each cluster's plan (by cluster index).

    Fault n goes to cluster n mod clusters at first_fault + n * fault_every, or as soon as
    that cluster (and the partner it needs) is free; a fault that cannot finish before the
    end of the stream is not started.
    """
    plan: dict[int, list[PlannedFault]] = {i: [] for i in range(spec.clusters)}
    kinds = [k for k in spec.faults if k not in skipped]
    if not kinds:
        return (), plan
    start, end, probe = spec.start_ms, spec.end_ms, spec.probe_interval_ms
    # Every start and end of an alert the fault is designed to raise must be passed by the final
    # watermark, which trails the last event (at most a heartbeat interval before the end) by the
    # allowed lateness.
    margin = probe + spec.heartbeat_interval_ms + HB_JITTER_MS + RULES.allowed_lateness_ms + 1000
    free = [start] * spec.clusters
    seen: Counter[str] = Counter()
    faults: list[InjectedFault] = []
    n = 0
    while (slot := start + spec.first_fault_ms + n * spec.fault_every_ms) < end:
        kind = kinds[n % len(kinds)]
        home = n % spec.clusters
        n += 1
        partner_index = (home + 1) % spec.clusters if kind in NEEDS_PARTNER and spec.clusters > 1 else None
        at = max(slot, free[home], free[partner_index] if partner_index is not None else start)
        core, last_change = TIMELINE[kind]
        if at + core + margin > end:
            continue
        if partner_index is not None:
            partner = identities[partner_index]
            free[partner_index] = max(free[partner_index], at + core + probe)
        elif kind in NEEDS_PARTNER and kind != "endpoint.collision":
            # A one-cluster fleet: the other cluster is one the prober does not watch.
            partner = make_identity(spec.seed, f"ext-{identities[home].target}", spec.brokers)
        else:
            partner = None
        busy = at + core + probe
        if last_change is not None:
            busy = max(busy, at + last_change + probe + max(RULES.flap_window_ms,
                                                            RULES.controller_flap_window_ms))
        free[home] = busy
        faults.append(injected(kind, identities[home], spec.brokers, partner, at,
                               after_a_clone=any(p.kind == "cluster.id_duplicate" for p in plan[home])))
        plan[home].append(PlannedFault(kind, at, seen[kind], partner))
        seen[kind] += 1
    return tuple(sorted(faults, key=lambda f: (f.start_ms, f.target))), plan
