"""Building blocks of the rule scenarios (tests/detect/, tests/support/rule_cases/): SPEC section 4
written out, event builders, expected alert lines, and `run`, which checks that the micro-batching
and pickling of the engines change no alert.

Every scenario is a small hand-built event list; the expected alert lines are derived by hand
from the rule semantics (deadline = the moment + the SPEC default, written out in each case).
Every scenario also runs cut into micro-batches of 1 and 3 events and must give the same alerts.

The watermark is the largest event time minus 5000 ms, and a timer at T fires only once the
watermark is past T: scenarios whose last alert comes from a timer end with a `later()` event
(of an unrelated cluster) far enough in the future.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from streaming.config import RuleBook, RuleSettings
from streaming.detect import detect
from streaming.records.contract import Event, event_from_dict

# -- SPEC section 4, written out here (not taken from the code) -------------------------------

LATENESS = 5000
SESSION = 9000
STALL_AFTER = 2500  # issue 44
FENCED_GRACE = 30000
PARTITION_WINDOW = 15000
STOPPING = 120000
RESOLVE_AFTER = 60000
FLAP_WINDOW = 300000
CONTROLLER_WINDOW = 15000
CONTROLLER_FLAP_WINDOW = 300000
DISAGREEMENT = 30000
UNREACHABLE = 30000

SPEC_RULES = {
    "broker.heartbeat_lost": ("critical", "broker"),
    "broker.heartbeat_late": ("warning", "broker"),  # issue 31
    "broker.stalled": ("warning", "broker"),  # issue 44
    "broker.fenced": ("warning", "broker"),
    "broker.partitioned": ("critical", "broker"),
    "broker.stuck_stopping": ("warning", "broker"),
    "broker.epoch_regression": ("critical", "broker"),
    "broker.flapping": ("warning", "broker"),
    "broker.illegal_transition": ("info", "broker"),
    "cluster.no_controller": ("critical", "cluster"),
    "cluster.controller_flapping": ("warning", "cluster"),
    "cluster.controller_disagreement": ("warning", "cluster"),
    "cluster.partitions_offline": ("critical", "cluster"),  # issue 30
    "cluster.under_min_isr": ("warning", "cluster"),
    "cluster.id_changed": ("critical", "target"),
    "cluster.id_duplicate": ("critical", "cluster"),
    "cluster.id_invalid": ("warning", "target"),
    "cluster.unreachable": ("critical", "target"),
    "connection.misrouted": ("critical", "endpoint"),
    "endpoint.collision": ("critical", "endpoint"),
    "collector.silent": ("warning", "collector"),  # issue 41
}

HB_LOST = "broker.heartbeat_lost"
HB_LATE = "broker.heartbeat_late"
STALLED = "broker.stalled"
FENCED = "broker.fenced"
PARTITIONED = "broker.partitioned"
STUCK = "broker.stuck_stopping"
EPOCH = "broker.epoch_regression"
FLAPPING = "broker.flapping"
ILLEGAL = "broker.illegal_transition"
NO_CONTROLLER = "cluster.no_controller"
CTL_FLAPPING = "cluster.controller_flapping"
CTL_DISAGREE = "cluster.controller_disagreement"
PARTITIONS_OFFLINE = "cluster.partitions_offline"
UNDER_MIN_ISR = "cluster.under_min_isr"
ID_CHANGED = "cluster.id_changed"
ID_DUPLICATE = "cluster.id_duplicate"
ID_INVALID = "cluster.id_invalid"
UNREACHABLE_RULE = "cluster.unreachable"
MISROUTED = "connection.misrouted"
COLLISION = "endpoint.collision"
SILENT = "collector.silent"

# -- builders ---------------------------------------------------------------------------------

BASE = 1_764_000_000_000
C = "PayPayPayPayPayPayPayA"  # the cluster most scenarios watch
D = "DocDocDocDocDocDocDocA"  # another cluster
FILLER = "FillerFillerFillerFilA"  # a cluster that only moves the watermark
A_ID, B_ID = "SeaSeaSeaSeaSeaSeaSeaA", "NewNewNewNewNewNewNewA"  # target sea's ids
L_ID = "LogLogLogLogLogLogLogA"
M_ID = "MetMetMetMetMetMetMetA"
G_ID = "GoodGoodGoodGoodGoodGA"
E = "EchoEchoEchoEchoEchoEA"  # a third cluster
O_ID, BIL = "OrdOrdOrdOrdOrdOrdOrdA", "BilBilBilBilBilBilBilA"  # target ord's id, and a cluster it misroutes to
B1, B2, B3, B4, B5, B6 = ((C, n) for n in range(1, 7))  # brokers of C, as alert subjects
# -1 is an unknown epoch (the probe's DescribeQuorum heartbeats): no regression after a real
# epoch, and not the highest either, so a real epoch after it is compared with the last real one.
UNKNOWN = -1


def t(seconds: float) -> int:
    """Event time `seconds` after BASE, in ms."""
    return BASE + round(seconds * 1000)


def contract_event(obj: dict[str, Any]) -> Event:
    obj = {"schema": "fleetwatch.event/v1", "source": "test", **obj}
    return event_from_dict(obj)  # every built event also passes the contract


def hb(ts: int, broker: int, epoch: int = 1, kind: str = "heartbeat", fenced: bool | None = None,
       cluster: str = C, endpoints: list[str] | None = None) -> Event:
    obj: dict[str, Any] = {"type": "broker_heartbeat", "ts": ts, "cluster_id": cluster, "broker_id": broker,
                           "kind": kind, "broker_epoch": epoch}
    if fenced is not None:
        obj["fenced"] = fenced
    if endpoints is not None:
        obj["endpoints"] = [{"host": a.split(":")[0], "port": int(a.split(":")[1])} for a in endpoints]
    return contract_event(obj)


def state(ts: int, broker: int, to: str, frm: str | None = None, cluster: str = C) -> Event:
    obj: dict[str, Any] = {"type": "broker_state", "ts": ts, "cluster_id": cluster, "broker_id": broker,
                           "state": to}
    if frm is not None:
        obj["previous_state"] = frm
    return contract_event(obj)


def bk(node: int, address: str, fenced: bool | None = None) -> dict[str, Any]:
    host, port = address.split(":")
    entry: dict[str, Any] = {"node_id": node, "host": host, "port": int(port)}
    if fenced is not None:
        entry["fenced"] = fenced
    return entry


def resp(ts: int, target: str, endpoint: str, cluster_id: str | None,
         expected: tuple[str | None, int | None] | None = None, responder: int | None = None,
         controller: int | None = 1, error: str | None = None,
         brokers: list[dict[str, Any]] | None = None, epoch: int | None = None) -> Event:
    """A metadata_response; `epoch`: its `controller_epoch` (the quorum's LeaderEpoch), absent when None."""
    if error is not None:
        controller = None
    obj = {
        "type": "metadata_response", "ts": ts, "cluster_id": cluster_id, "target": target, "endpoint": endpoint,
        "expected": None if expected is None else {"cluster_id": expected[0], "node_id": expected[1]},
        "responder_node_id": responder, "controller_id": controller, "error": error, "latency_ms": 3,
        "brokers": [] if brokers is None and error is None else brokers,
    }
    if epoch is not None:
        obj["controller_epoch"] = epoch
    return contract_event(obj)


def ctl(s: float, controller: int | None, responder: int = 1, cluster: str = C, epoch: int | None = None) -> Event:
    return resp(t(s), "pay", f"b{responder}:9092", cluster, (cluster, responder), responder=responder,
                controller=controller, epoch=epoch)


def layout(s: float, topics: dict[str, list[tuple[int, int, list[int], list[int]]]],
           min_isr: dict[str, int] | None = None, default_min: int | None = None, complete: bool = True,
           cluster: str = C) -> Event:
    """A partition_layout of `cluster`: topic -> [(partition, leader, replicas, isr)]; `min_isr`: the
    topics' own min.insync.replicas (absent: the brokers' `default_min`)."""
    return contract_event({
        "type": "partition_layout", "ts": t(s), "cluster_id": cluster, "target": "pay", "complete": complete,
        "default_min_insync": default_min,
        "topics": [{"name": name, "min_insync": (min_isr or {}).get(name),
                    "partitions": [[p, leader, replicas, isr] for p, leader, replicas, isr in parts]}
                   for name, parts in topics.items()]})


def rnd(s: float, source: str = "probe", target: str = "pay", cluster: str | None = C,
        registered: list[int] | None = None) -> Event:
    """A `collector_round` of `source` for `target` (cluster `cluster`) at `s` seconds."""
    obj: dict[str, Any] = {"type": "collector_round", "ts": t(s), "cluster_id": cluster, "target": target,
                           "source": source}
    if registered is not None:
        obj["registered"] = registered
    return contract_event(obj)


def reading(s: float, fetches: list[tuple[int, int | None, bool | None]], controller: int = 3000, epoch: int = 1,
            source: str = "probe", target: str = "pay", cluster: str = C) -> Event:
    """A `quorum_reading` of `source` at `s` seconds: [(broker, fetch age in ms or None, fenced or None)]."""
    return contract_event({"type": "quorum_reading", "ts": t(s), "cluster_id": cluster, "target": target,
                           "source": source, "controller_id": controller, "controller_epoch": epoch,
                           "fetches": [list(f) for f in fetches]})


def watching(s: float, targets: list[str], source: str = "probe") -> Event:
    """A `collector_targets` of `source` at `s` seconds."""
    return contract_event({"type": "collector_targets", "ts": t(s), "cluster_id": None, "targets": targets,
                           "source": source})


def later(ts: int) -> Event:
    """An event of an unrelated cluster that sets no timer: it only moves the watermark to ts - 5000."""
    return resp(ts, "filler", "f1:9092", FILLER)


def past(deadline: int) -> int:
    """The earliest event time whose watermark is past `deadline` (W = ts - 5000 > deadline)."""
    return deadline + LATENESS + 1


def every(start: float, stop: float, step: float) -> list[float]:
    """start, start+step, ... <= stop (seconds)."""
    out, k = [], 0
    while start + k * step <= stop + 1e-9:
        out.append(start + k * step)
        k += 1
    return out


def boot(s: float, target: str, cluster_id: str | None, endpoint: str = "s1:9092",
         brokers: list[dict[str, Any]] | None = None, error: str | None = None) -> Event:
    """A bootstrap response of `target` (no expected identity)."""
    return resp(t(s), target, endpoint, cluster_id, None, responder=None, brokers=brokers, error=error)


def fail(s: float, target: str = "pay", error: str = "CONNECTION_REFUSED") -> Event:
    return boot(s, target, None, "b1:9092", error=error)


def probe(s: float, cluster_id: str | None, responder: int | None, error: str | None = None) -> Event:
    """A probe of ord's broker 2 at o2:9092, with that expected identity."""
    return resp(t(s), "ord", "o2:9092", cluster_id, (O_ID, 2), responder=responder, error=error)


def answers(seconds: list[float], broker: int = 2) -> list[Event]:
    """Successful responses of broker `broker` of C (its own view) at these seconds."""
    return [resp(t(s), "pay", f"b{broker}:9092", C, (C, broker), responder=broker) for s in seconds]


def merged(*groups: list[Event]) -> list[Event]:
    return sorted((e for g in groups for e in g), key=lambda e: e.ts)


def enumerate_positions(events: list[Event]) -> list[tuple[tuple[str, int], Event]]:
    return [(("", i), e) for i, e in enumerate(events)]


# -- expected lines ---------------------------------------------------------------------------

Line = tuple[Any, ...]


def subject(rule: str, s: Any) -> tuple[Any, ...]:
    return s if isinstance(s, tuple) else (s,)


def F(rule: str, s: Any, starts_at: int) -> Line:
    return ("firing", rule, *subject(rule, s), starts_at, None)


def R(rule: str, s: Any, starts_at: int, ends_at: int) -> Line:
    return ("resolved", rule, *subject(rule, s), starts_at, ends_at)


def line_of(alert: dict[str, Any]) -> Line:
    kind = SPEC_RULES[alert["rule"]][1]
    fields = {"broker": ("cluster_id", "broker_id"), "cluster": ("cluster_id",), "target": ("target",),
              "endpoint": ("endpoint",), "collector": ("source",)}[kind]
    return (alert["status"], alert["rule"], *(alert[f] for f in fields), alert["starts_at"], alert["ends_at"])


def event_time(line: Line) -> int:
    return line[-1] if line[0] == "resolved" else line[-2]


# (batch size, engines pickled between batches as in the job's state store)
BATCHINGS = ((None, False), (1, False), (3, False), (1, True))


def run(events: list[Event], book: RuleBook | None = None) -> list[dict[str, Any]]:
    """detect() over the events; the same alerts whatever the micro-batch size."""
    assert [e.ts for e in events] == sorted(e.ts for e in events), "scenario events must be in time order"
    results = {(k, p): [a.to_dict() for a in detect(events, book, batch_size=k, pickled=p)] for k, p in BATCHINGS}
    for k, p in BATCHINGS[1:]:
        assert results[k, p] == results[None, False], f"batch_size={k}, pickled={p} changed the alerts"
    return results[None, False]


def lines(events: list[Event], book: RuleBook | None = None) -> list[Line]:
    got = [line_of(a) for a in run(events, book)]
    times = [event_time(g) for g in got]
    assert times == sorted(times), "alert lines are in event-time order"
    return got


def same_lines(got: list[Line], expected: list[Line]) -> None:
    """Equal lines; equal event times may come in any order (only the time order is specified)."""
    def by_time(ls: list[Line]) -> dict[int, Counter]:
        out: dict[int, Counter] = {}
        for x in ls:
            out.setdefault(event_time(x), Counter())[x] += 1
        return out

    assert by_time(got) == by_time(expected), f"\n got:      {got}\n expected: {expected}"



def book_with(**settings: Any) -> RuleBook:
    return RuleBook(RuleSettings(**settings))


# -- scenarios --------------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    events: list[Event]
    expected: list[Line]
    book: RuleBook | None = None
    tags: set[str] = field(default_factory=set)  # fires / quiet / resolves / ...


# rule -> its scenarios
Cases = dict[str, list[Case]]


def add_case(cases: Cases, rule: str, name: str, events: list[Event], expected: list[Line], *tags: str,
             book: RuleBook | None = None) -> None:
    cases.setdefault(rule, []).append(Case(name, events, expected, book, set(tags)))


def case_adder(cases: Cases) -> Any:
    """`case(rule, name, events, expected, *tags, book=None)` adding to `cases`."""
    return partial(add_case, cases)


def table(cases: Cases) -> list[tuple[str, Case]]:
    """(rule, scenario) pairs for pytest.mark.parametrize."""
    return [(rule, c) for rule, cs in cases.items() for c in cs]


def table_ids(rows: list[tuple[str, Case]]) -> list[str]:
    return [f"{rule}: {c.name}" for rule, c in rows]
