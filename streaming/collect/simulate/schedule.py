"""The schedule: which cluster gets which fault, and when."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from streaming.collect.simulate.cluster import HB_JITTER_MS, PlannedFault, layout_reading_after
from streaming.collect.simulate.faults import NEEDS_PARTNER, READ_AFTER_MS, TIMELINE, injected
from streaming.collect.simulate.identities import BAD_RELEASE, ClusterIdentity, make_identity, rack_row
from streaming.collect.simulate.spec import RULES, FleetSpec, InjectedFault

__all__ = ["not_applicable", "schedule"]


def not_applicable(kind: str, spec: FleetSpec) -> str | None:
    """Why the fleet's shape cannot show a fault of this kind, or None when it can."""
    if kind == "cluster.controller_disagreement" and spec.brokers < 2:
        return "needs 2 brokers per cluster"
    if kind == "endpoint.collision" and spec.brokers < 2 and spec.clusters < 2:
        return "needs 2 brokers or 2 clusters"
    if kind == "cluster.partitions_offline" and spec.brokers < 3:
        return "needs 3 brokers per cluster (two down, one left to answer)"
    return None


def schedule(spec: FleetSpec, identities: Sequence[ClusterIdentity], skipped: Sequence[str]
             ) -> tuple[tuple[InjectedFault, ...], dict[int, list[PlannedFault]]]:
    """The injected faults in start order, and each cluster's plan (by cluster index).

    Fault n goes to cluster n mod clusters at first_fault + n * fault_every, or as soon as
    that cluster (and the partner it needs) is free; a fault that cannot finish before the
    end of the stream is not started.
    """
    plan: dict[int, list[PlannedFault]] = {i: [] for i in range(spec.clusters)}
    free = [spec.start_ms] * spec.clusters
    faults = _correlated(spec, identities, plan, free)
    kinds = [k for k in spec.faults if k not in skipped]
    if not kinds:
        return tuple(sorted(faults, key=lambda f: (f.start_ms, f.target))), plan
    start, end, probe = spec.start_ms, spec.end_ms, spec.probe_interval_ms
    # Every start and end of an alert the fault is designed to raise must be passed by the final
    # watermark, which trails the last event (at most a heartbeat interval before the end) by the
    # allowed lateness.
    margin = probe + spec.heartbeat_interval_ms + HB_JITTER_MS + RULES.allowed_lateness_ms + 1000
    seen: Counter[str] = Counter()
    n = 0
    while (slot := start + spec.first_fault_ms + n * spec.fault_every_ms) < end:
        kind = kinds[n % len(kinds)]
        home = n % spec.clusters
        n += 1
        partner_index = (home + 1) % spec.clusters if kind in NEEDS_PARTNER and spec.clusters > 1 else None
        at = max(slot, free[home], free[partner_index] if partner_index is not None else start)
        if kind == "cluster.partitions_offline":
            # A layout reading must see the brokers down: the probe reads one a minute.
            at = layout_reading_after(spec, home, at + READ_AFTER_MS) - READ_AFTER_MS
        core = TIMELINE[kind][0]
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
        free[home] = _busy_until(kind, at, probe)
        faults.append(injected(kind, identities[home], spec.brokers, partner, at,
                               after_a_clone=any(p.kind == "cluster.id_duplicate" for p in plan[home])))
        plan[home].append(PlannedFault(kind, at, seen[kind], partner))
        seen[kind] += 1
    return tuple(sorted(faults, key=lambda f: (f.start_ms, f.target))), plan


def _busy_until(kind: str, at: int, probe: int) -> int:
    """Until when a fault of `kind` started at `at` keeps its cluster busy: until the probe round
    after its end, and until its last broker-state or controller change has left the flap windows,
    so that one fault's transitions never add up with the next one's on that cluster."""
    core, last_change = TIMELINE[kind]
    busy = at + core + probe
    if last_change is not None:
        busy = max(busy, at + last_change + probe + max(RULES.flap_window_ms, RULES.controller_flap_window_ms))
    return busy


# Correlated faults: when they start (after the first regular fault slot) and how far apart the
# members' crashes are (a rack's power goes at once, give or take; a rollout is a few clusters a minute).
_CORRELATED_AT_MS = {"rack": 90_000, "release": 330_000}
_CORRELATED_STAGGER_MS = {"rack": 300, "release": 15_000}
_QUIET_AFTER_MS = 60_000  # the default incidents.window_ms


def _correlated(spec: FleetSpec, identities: Sequence[ClusterIdentity], plan: dict[int, list[PlannedFault]],
                free: list[int]) -> list[InjectedFault]:
    """The correlated faults (`spec.correlated`), planned before the regular ones, whose clusters
    they keep busy: a broker crash (`broker.heartbeat_lost` of the last broker) in every cluster of
    rack row 0, whose last brokers share a rack; and in three clusters of the bad release
    (each in another rack row). Each fault of one carries the same `group` label.

    A bad release crashes each broker it reaches once, a rollout step after the previous cluster.
    The rollout waits until every cluster it is to reach is quiet, as rollout tooling does (it rolls
    no cluster that is still recovering), and as every fault here waits for its cluster
    (`_busy_until`): a cluster of the bad release whose broker the rack failure had crashed less
    than the flap window before would otherwise have its four state changes add up to a
    `broker.flapping` that neither fault is, and one release member crashing later than the rest
    would fall out of the rollout's incident window."""
    kind = "broker.heartbeat_lost"
    members = {"rack": [i for i in range(spec.clusters) if rack_row(i, spec.clusters) == 0],
               "release": [i for i, info in enumerate(identities) if info.release == BAD_RELEASE][:3]}
    out: list[InjectedFault] = []
    for name in spec.correlated:
        chosen, stagger = members[name], _CORRELATED_STAGGER_MS[name]
        at0 = max([spec.start_ms + _CORRELATED_AT_MS[name]] + [free[i] - k * stagger for k, i in enumerate(chosen)])
        if len(chosen) < 2 or at0 + len(chosen) * stagger + 60_000 > spec.end_ms:
            continue
        info0 = identities[chosen[0]]
        group = f"rack:{info0.rack(spec.brokers)}" if name == "rack" else f"release:{BAD_RELEASE}"
        for k, index in enumerate(chosen):
            at = at0 + k * stagger
            fault = injected(kind, identities[index], spec.brokers, None, at, after_a_clone=False)
            out.append(replace(fault, group=group))
            plan[index].append(PlannedFault(kind, at, len(plan[index]), None))
            # Quiet for the incidents' window after it too, so no regular fault's alert joins its run.
            free[index] = max(_busy_until(kind, at, spec.probe_interval_ms),
                              at + TIMELINE[kind][0] + spec.probe_interval_ms + _QUIET_AFTER_MS)
    return out
