"""Detection accuracy: simulate a fleet with every fault kind, replay it through the Spark job,
and score the alerts against the oracle, the reference detector of bench/reference/ run over
the same file.

    .venv/bin/python bench/accuracy.py [--clusters 40 --brokers 4 --minutes 40 --faults all]

Prints, per rule: the oracle's alerts, the product's, precision and recall of the product
against the oracle, how many matched alerts end when the oracle's end, and the detection delay
(alert `starts_at` minus the start of the injected fault it is attributed to, event time). A
firing alert matches the oracle's of the same rule, subject fields and `starts_at`. Then, per
fault kind, the faults injected and what the oracle raised for them: each oracle alert is
attributed to the fault that accounts for it (`Simulation.cause`: one of the rules the fault is
designed to raise, about its cluster, while it ran); every fault must raise its own rule and no
alert may be left unattributed. Then a healthy fleet (100 clusters, 10 minutes, no fault) must
raise no alert at all, in the product or the oracle.

The faulty fleet also gets correlated faults (`--correlated rack,release`: one rack failing under
the four clusters of a rack row; a bad release crashing three of the clusters it was rolled to),
labelled with their `group`. Fleet incidents (streaming/detect/incidents.py, default `incidents:`
settings, the simulator's places) are scored over pairs of alerts of different clusters: a pair
the grouping put in one incident is right when both alerts were caused by faults of one group.
Precision and recall of those pairs, and how many injected groups came out as one incident each,
are printed after the rules' table. `--grouping-only` scores the oracle's alerts and skips Spark.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

# bench/ is this script's folder, first on sys.path when it runs.
from reference import SEVERITY, detect

from streaming.collect.simulate import FAULT_KINDS, FleetSpec, InjectedFault, Simulation, parse_faults, write_events
from streaming.config import FleetwatchConfig, IncidentSettings
from streaming.detect import group_incidents
from streaming.job import replay_file
from streaming.records.alert import Alert
from streaming.store import grouping_rules

START_MS = 1_764_000_000_000
Key = tuple[Any, ...]


def _key(alert: dict[str, Any]) -> Key:
    return (alert["rule"], alert["cluster_id"], alert["target"], alert["broker_id"], alert["endpoint"],
            alert["starts_at"])


def oracle(events: Path) -> list[dict[str, Any]]:
    """The alert lines the reference detector gives for the file."""
    with open(events, "rb") as fh:
        alerts, late, skipped = detect(fh)
    assert (late, skipped) == (0, 0), "the simulator writes no late line and nothing but events"
    return alerts


def score(expected: list[dict[str, Any]], alerts: list[dict[str, Any]], sim: Simulation) -> list[dict[str, Any]]:
    """Per rule: precision, recall and delay of the product's firing alerts against the oracle's,
    and how many of the matched ones end as the oracle's do."""
    fired = {_key(a) for a in alerts if a["status"] == "firing"}
    resolved = {_key(a): a["ends_at"] for a in alerts if a["status"] == "resolved"}
    wanted = {_key(a): a for a in expected if a["status"] == "firing"}
    wanted_ends = {_key(a): a["ends_at"] for a in expected if a["status"] == "resolved"}
    rows = []
    for rule in SEVERITY:
        want = {k for k in wanted if k[0] == rule}
        got = {k for k in fired if k[0] == rule}
        hits = want & got
        delays = [wanted[k]["starts_at"] - cause.start_ms for k in hits if (cause := sim.cause(wanted[k]))]
        rows.append({
            "rule": rule, "oracle": len(want), "alerts": len(got), "hits": len(hits),
            "ends_ok": sum(1 for k in hits if resolved.get(k) == wanted_ends.get(k)),
            "precision": len(hits) / len(got) if got else (1.0 if not want else 0.0),
            "recall": len(hits) / len(want) if want else 1.0,
            "delay_ms": statistics.median(delays) if delays else None,
            "missed": sorted(want - got, key=repr)[:3], "extra": sorted(got - want, key=repr)[:3],
        })
    return rows


def attribute(expected: list[dict[str, Any]], sim: Simulation
              ) -> tuple[dict[InjectedFault, Counter[str]], list[dict[str, Any]]]:
    """The oracle's firing alerts by the injected fault that accounts for each (rule counts), and
    the alerts no fault accounts for."""
    raised: dict[InjectedFault, Counter[str]] = {fault: Counter() for fault in sim.faults}
    unattributed = []
    for alert in expected:
        if alert["status"] != "firing":
            continue
        cause = sim.cause(alert)
        if cause is None:
            unattributed.append(alert)
        else:
            raised[cause][alert["rule"]] += 1
    return raised, unattributed


def grouping_score(alerts: list[dict[str, Any]], sim: Simulation) -> dict[str, Any]:
    """Fleet incidents of `alerts` against the correlated faults' groups, over pairs of alerts of
    different clusters (see the module's docstring)."""
    incidents = group_incidents(map(Alert.from_dict, alerts), sim.places(), grouping_rules(IncidentSettings()))
    firing = [a for a in alerts if a["status"] == "firing"]
    group_of = {a["alert_id"]: cause.group for a in firing if (cause := sim.cause(a)) is not None}
    cluster_of = {a["alert_id"]: a["cluster_id"] or a["target"] for a in firing}

    def pairs(sets: list[list[str]]) -> set[frozenset[str]]:
        return {frozenset((x, y)) for ids in sets for i, x in enumerate(ids) for y in ids[i + 1:]
                if cluster_of.get(x) != cluster_of.get(y)}

    by_group: dict[str, list[str]] = defaultdict(list)
    for alert_id, group in group_of.items():
        if group:
            by_group[group].append(alert_id)
    truth = pairs(list(by_group.values()))
    found = pairs([[m.alert_id for m in i.members] for i in incidents])
    whole = sum(1 for ids in by_group.values() if any(set(ids) <= {m.alert_id for m in i.members} for i in incidents))
    return {"groups": len(by_group), "incidents": len(incidents), "whole": whole, "pairs": len(truth),
            "found": len(found), "precision": len(found & truth) / len(found) if found else float(not truth),
            "recall": len(found & truth) / len(truth) if truth else 1.0,
            "wrong": [sorted(str(d) for d in (i.domain, *i.clusters)) for i in incidents
                      if not pairs([[m.alert_id for m in i.members]]) <= truth][:3]}


def _print_grouping(score: dict[str, Any]) -> None:
    print(f"\n{'fleet incidents':34} {'groups':>6} {'found':>6} {'prec':>6} {'recall':>6} {'whole':>7}")
    print(f"{'alert pairs of different clusters':34} {score['groups']:>6} {score['incidents']:>6} "
          f"{score['precision']:>6.2f} {score['recall']:>6.2f} {score['whole']:>7}")
    print(f"  ({score['pairs']} pairs injected together, {score['found']} grouped)")
    for wrong in score["wrong"]:
        print(f"    grouped apart from any injected group: {wrong}")


def _print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'rule':34} {'oracle':>6} {'alerts':>6} {'prec':>6} {'recall':>6} {'ends ok':>7} {'delay (ms)':>10}")
    for r in rows:
        delay = "-" if r["delay_ms"] is None else f"{r['delay_ms']:.0f}"
        print(f"{r['rule']:34} {r['oracle']:>6} {r['alerts']:>6} {r['precision']:>6.2f} {r['recall']:>6.2f} "
              f"{r['ends_ok']:>7} {delay:>10}")
        for name in ("missed", "extra"):
            for item in r[name]:
                print(f"    {name}: {item}")


def _print_attribution(raised: dict[InjectedFault, Counter[str]], unattributed: list[dict[str, Any]]) -> int:
    """Print what the oracle raised per fault kind; returns how many faults did not raise their own rule."""
    by_kind: dict[str, list[InjectedFault]] = defaultdict(list)
    for fault in raised:
        by_kind[fault.kind].append(fault)
    print(f"\n{'fault kind':34} {'faults':>6} {'raised':>6}  oracle alerts attributed")
    silent = 0
    for kind in FAULT_KINDS:
        faults = by_kind.get(kind, [])
        if not faults:
            continue
        own = sum(1 for f in faults if raised[f][kind])
        silent += len(faults) - own
        rules = sum((raised[f] for f in faults), Counter())
        print(f"{kind:34} {len(faults):>6} {own:>6}  " + ", ".join(f"{r} {n}" for r, n in sorted(rules.items())))
    print(f"unattributed oracle alerts: {len(unattributed)}")
    for alert in unattributed[:3]:
        print(f"    unattributed: {_key(alert)}")
    return silent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clusters", type=int, default=40, help="clusters in the faulty fleet (default 40)")
    p.add_argument("--brokers", type=int, default=4, help="brokers per cluster (default 4)")
    p.add_argument("--minutes", type=int, default=40, help="event-time length of the faulty fleet (default 40)")
    p.add_argument("--faults", default="all", help="fault kinds (default all)")
    p.add_argument("--jitter-ms", type=int, default=0, help="disorder within the allowed lateness")
    p.add_argument("--correlated", default="rack,release", help="correlated faults: rack,release or none")
    p.add_argument("--grouping-only", action="store_true", help="score the oracle's fleet incidents; no Spark")
    p.add_argument("--healthy-clusters", type=int, default=100, help="clusters of the healthy fleet (default 100)")
    p.add_argument("--healthy-minutes", type=int, default=10, help="length of the healthy fleet (default 10)")
    args = p.parse_args(argv)
    config = FleetwatchConfig.model_validate({"spark": {"master": "local[*]", "shuffle_partitions": 4}})
    work = Path(tempfile.mkdtemp(prefix="fleetwatch-accuracy-"))

    faults = parse_faults(args.faults)
    sim = Simulation(FleetSpec(clusters=args.clusters, brokers=args.brokers, faults=faults, start_ms=START_MS,
                               duration_ms=args.minutes * 60_000, seed=1, jitter_ms=args.jitter_ms,
                               correlated=tuple(c for c in args.correlated.split(",") if c and c != "none")))
    events = work / "faulty.jsonl"
    n = sum(write_events(sim, events).values())
    started = time.monotonic()
    expected = oracle(events)
    print(f"faulty fleet: {args.clusters} clusters x {args.brokers} brokers, {args.minutes} min, {n} events, "
          f"{len(sim.faults)} faults injected ({len({f.kind for f in sim.faults})} kinds); oracle: "
          f"{len(expected)} alert lines in {time.monotonic() - started:.1f} s", file=sys.stderr)
    if sim.skipped:
        print(f"  not injected: {sim.skipped}", file=sys.stderr)
    if args.grouping_only:
        grouping = grouping_score(expected, sim)
        _print_grouping(grouping)
        return 0 if grouping["precision"] == grouping["recall"] == 1.0 else 1
    started = time.monotonic()
    summary = replay_file(events, work / "faulty.alerts.jsonl", config)
    print(f"  replay: {time.monotonic() - started:.1f} s", file=sys.stderr)
    rows = score(expected, summary.alerts, sim)
    _print_table(rows)
    grouping = grouping_score(summary.alerts, sim)
    _print_grouping(grouping)
    raised, unattributed = attribute(expected, sim)
    silent = _print_attribution(raised, unattributed)
    missing_kinds = set(FAULT_KINDS) - {f.kind for f in sim.faults} if args.faults == "all" else set()

    healthy = Simulation(FleetSpec(clusters=args.healthy_clusters, brokers=args.brokers, faults=(),
                                   start_ms=START_MS, duration_ms=args.healthy_minutes * 60_000, seed=2))
    healthy_events = work / "healthy.jsonl"
    hn = sum(write_events(healthy, healthy_events).values())
    healthy_summary = replay_file(healthy_events, work / "healthy.alerts.jsonl", config)
    healthy_alerts = Counter(a["rule"] for a in healthy_summary.alerts)
    healthy_oracle = Counter(a["rule"] for a in oracle(healthy_events))
    print(f"\nhealthy fleet: {args.healthy_clusters} clusters x {args.brokers} brokers, "
          f"{args.healthy_minutes} min, {hn} events -> {sum(healthy_alerts.values())} alerts "
          f"{dict(healthy_alerts)}, oracle {sum(healthy_oracle.values())} {dict(healthy_oracle)}")

    perfect = all(r["precision"] == 1.0 and r["recall"] == 1.0 and r["ends_ok"] == r["hits"] for r in rows)
    attributed = not silent and not unattributed
    ok = perfect and attributed and not healthy_alerts and not healthy_oracle and not missing_kinds
    if missing_kinds:
        print(f"fault kinds not injected: {sorted(missing_kinds)}")
    print("RESULT:", "every rule precision 1.0 recall 1.0 against the oracle, every fault raised its rule, "
          "every oracle alert attributed, healthy fleet silent" if ok else "NOT PERFECT")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
