"""A small fleet in a real SQLite store for the dashboard tests (no tests here): three clusters,
one of them named by a hostile string, with brokers, transitions, controllers, quarantine and
progress rows and two alerts (`fill_fleet`); and a fleet with routing trouble (`fill_identity_fleet`).
Imported by tests/web/ and its conftest.py, which builds both stores once per module."""

from __future__ import annotations

from typing import Any

from streaming.records.alert import Alert
from streaming.store import Store

__all__ = ["BIL", "EVIL", "HOSTILE", "IDENTITY_TAGS", "LOG", "NEW", "ORD", "ORDERS", "PAY", "SEA", "T0", "alert",
           "broker", "fill_fleet", "fill_identity_fleet"]

T0 = 1_763_800_000_000
PAY = "MkU3OEVBNTcwNTJENDM2Qg"
ORDERS = "T3JkZXJzQ2x1c3RlcjAwMQ"
EVIL = "RXZpbENsdXN0ZXIwMDAwMQ"
HOSTILE = "<img src=x onerror=alert(1)>"


def alert(alert_id: str, rule: str, severity: str, cluster_id: str | None, target: str | None, *,
          broker_id: int | None = None, status: str = "firing", ends_at: int | None = None,
          summary: str = "", endpoint: str | None = None, details: dict[str, Any] | None = None,
          names: dict[str, Any] | None = None) -> dict[str, Any]:
    """An alert object as in SPEC section 4; `names`: its issue-43 fields (none: as an older job wrote it)."""
    return {"schema": "fleetwatch.alert/v1", "alert_id": alert_id, "rule": rule, "status": status,
            "severity": severity, "cluster_id": cluster_id, "target": target, "broker_id": broker_id,
            "endpoint": endpoint, "starts_at": T0 - 30_000, "ends_at": ends_at, "summary": summary,
            "details": details or {}, **(names or {})}


def broker(cluster_id: str, broker_id: int, state: str, heartbeat_ms: int) -> dict[str, Any]:
    return {"cluster_id": cluster_id, "broker_id": broker_id, "state": state, "fenced": state == "FENCED",
            "broker_epoch": 40 + broker_id, "last_heartbeat_ms": heartbeat_ms, "last_answer_ms": T0,
            "rack": "a", "endpoints": [f"b{broker_id}.{cluster_id[:4].lower()}:9092"], "updated_ms": T0}


def fill_fleet(store: Store) -> None:
    names = {PAY: "payments-eu1", ORDERS: "orders-us2", EVIL: HOSTILE}
    store.write({
        "clusters": [{"cluster_id": cid, "target": name, "controller_id": 2 if cid == PAY else 1,
                      "last_response_ms": T0 - 1000,
                      "updated_ms": T0} for cid, name in names.items()],
        "targets": [{"target": name, "pinned_cluster_id": cid, "last_cluster_id": cid, "last_ok_ms": T0,
                     "updated_ms": T0} for cid, name in names.items()],
        "brokers": [broker(PAY, 1, "ONLINE", T0 - 2100), broker(PAY, 2, "ONLINE", T0 - 1500),
                    broker(PAY, 3, "FENCED", T0 - 15_000),
                    broker(ORDERS, 1, "ONLINE", T0 - 800), broker(ORDERS, 2, "ONLINE", T0 - 900),
                    broker(EVIL, 1, "ONLINE", T0 - 500)],
        "broker_transitions": [
            {"cluster_id": PAY, "broker_id": b, "ts": T0 - 60_000, "state": "ONLINE",
             "previous_state": "FENCED", "reason": "caught up"} for b in (1, 2, 3)
        ] + [{"cluster_id": PAY, "broker_id": 3, "ts": T0 - 20_000, "state": "FENCED",
              "previous_state": "ONLINE", "reason": HOSTILE}],
        "quarantine": [{"origin": f"fleetwatch.metadata/0/{i}", "reason": reason, "raw": HOSTILE,
                        "recorded_at": T0} for i, reason in enumerate(["not_json", "not_json",
                                                                         "missing_field:ts"])],
        # PAY: controller 1, none for 25 s, then 2; the newest change is first on the page.
        "controller_history": [{"cluster_id": PAY, "ts": T0 - 90_000, "controller_id": 1},
                               {"cluster_id": PAY, "ts": T0 - 60_000, "controller_id": None},
                               {"cluster_id": PAY, "ts": T0 - 35_000, "controller_id": 2}],
        "pipeline_progress": [{"query": "fleetwatch", "batch_id": i, "recorded_at": T0 + i * 1000,
                               "input_rows": 1200, "input_rows_per_s": 1100.5,
                               "processed_rows_per_s": 9800.0, "batch_duration_ms": 640,
                               "watermark_ms": T0 - 5000, "state_rows": 36, "state_memory_bytes": 2**21}
                              for i in range(3)],
    })
    store.record_alerts(map(Alert.from_dict, [
        # Named as detection names it (issue 43); the resolved one below is as an older job wrote it.
        alert("a-lost", "broker.heartbeat_lost", "critical", PAY, "payments-eu1", broker_id=3,
              summary="payments-eu1: broker 3 (b3.mku3:9092, rack a) has sent no heartbeat for 15 s",
              names={"cluster_name": "payments-eu1", "tags": {"env": "prod", "region": "eu-west-1"},
                     "broker_host": "b3.mku3:9092", "rack": "a"}),
        alert("a-fenced", "broker.fenced", "warning", ORDERS, "orders-us2", broker_id=2,
              status="resolved", ends_at=T0 - 10_000, summary="broker 2 fenced for 31 s"),
    ]))


ORD, BIL = "OrdOrdOrdOrdOrdOrdOrdA", "BilBilBilBilBilBilBilA"
SEA, NEW, LOG = "SeaSeaSeaSeaSeaSeaSeaA", "NewNewNewNewNewNewNewA", "LogLogLogLogLogLogLogA"
# Target name -> tags, as `fleetwatch dashboard --config` passes them; "payments" never answered.
IDENTITY_TAGS = {"orders": {"env": "prod", "region": "eu"}, "billing": {"env": "prod", "region": "us"},
                 "search": {"env": "staging", "region": "eu"}, "payments": {"env": "prod", "region": "eu"}}


def fill_identity_fleet(store: Store) -> None:
    """A fleet with routing trouble: ord-2 reaches billing, an address advertised twice (once by a
    hostile cluster id), and search's bootstrap answering with another cluster id."""
    store.write({
        "clusters": [{"cluster_id": cid, "target": name, "controller_id": 1, "last_response_ms": T0,
                      "updated_ms": T0} for cid, name in ((ORD, "orders"), (BIL, "billing"), (SEA, "search"))],
        "brokers": [broker(cid, 1, "ONLINE", T0 - 500) for cid in (ORD, BIL, SEA)],
        # Every row with every key: one executemany takes its columns from the first row.
        "targets": [{"target": t, "pinned_cluster_id": pinned, "last_cluster_id": last, "last_ok_ms": ok,
                     "last_error": error, "last_error_ms": error_ms, "updated_ms": T0}
                    for t, pinned, last, ok, error, error_ms in (
                        ("orders", ORD, ORD, T0, None, None),
                        ("billing", BIL, BIL, T0 - 60_000, "timed out", T0 - 2000),
                        ("search", SEA, NEW, T0, None, None))],
    })
    store.record_alerts(map(Alert.from_dict, [
        alert("m-ord2", "connection.misrouted", "critical", BIL, "orders", endpoint="ord-2:9092",
              summary="ord-2:9092 reaches cluster Bil node 1",
              details={"expected": {"cluster_id": ORD, "node_id": 2}, "answered": {"cluster_id": BIL, "node_id": 1}}),
        alert("m-ord3", "connection.misrouted", "critical", ORD, "orders", endpoint="ord-3:9092",
              status="resolved", ends_at=T0 - 5000,
              details={"expected": {"cluster_id": ORD, "node_id": 3}, "error": "REBOOTSTRAP_REQUIRED"}),
        alert("c-shared", "endpoint.collision", "critical", ORD, None, endpoint="shared-1:9092",
              details={"advertised_by": [f"{ORD}/1", f"{HOSTILE}/7"]}),
        alert("i-search", "cluster.id_changed", "critical", NEW, "search", endpoint="sea-1:9092",
              summary=f"bootstrap of search reports cluster id {NEW}, pinned {SEA}"),
    ]))
