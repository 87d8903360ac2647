"""The job's foreachBatch sink: output rows -> store (and the alerts topic).

Every write is idempotent, so a micro-batch that Spark re-runs after a crash changes nothing.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame

from streaming.sinks.store import Store

__all__ = ["BatchWriter"]

log = logging.getLogger(__name__)

_ALERT_FIELDS = ("schema", "alert_id", "rule", "status", "severity", "cluster_id", "target", "broker_id",
                 "endpoint", "starts_at", "ends_at", "summary", "details")


def _latest(items: list[dict[str, Any]], key: Callable[[dict[str, Any]], Any]) -> list[dict[str, Any]]:
    """One row per key: the most recent by event time, so an upsert batch has no duplicates."""
    best: dict[Any, dict[str, Any]] = {}
    for item in items:
        k = key(item)
        if k not in best or (item.get("updated_ms") or 0) >= (best[k].get("updated_ms") or 0):
            best[k] = item
    return list(best.values())


class BatchWriter:
    """Callable for `foreachBatch`.

    `on_alerts` receives each batch's alerts in event-time order, each with its `sort_key`
    (for merging batches); the store gets them as SPEC section 4 objects. Without a store,
    only the callbacks and the counters see the output (a replay that writes a file only).
    """

    def __init__(self, store: Store | None, *,
                 on_alerts: Callable[[list[dict[str, Any]]], None] | None = None) -> None:
        self.store = store
        self.on_alerts = on_alerts
        self.quarantined: Counter[str] = Counter()

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        # toPandas moves the batch as Arrow (collect() would pickle a Row per output row).
        frame = batch.toPandas()
        by_kind: dict[str, list[dict[str, Any]]] = {}
        for kind, key, payload in zip(frame["kind"], frame["key"], frame["payload"], strict=True):
            by_kind.setdefault(kind, []).append({"key": key, "payload": payload})
        alerts = sorted((json.loads(r["payload"]) for r in by_kind.get("alert", [])),
                        key=lambda a: a["sort_key"])
        alert_objects = [{k: a[k] for k in _ALERT_FIELDS} for a in alerts]
        now = int(time.time() * 1000)
        quarantine = [
            {"origin": r["key"], "reason": json.loads(r["payload"])["reason"],
             "raw": json.loads(r["payload"])["raw"], "recorded_at": now}
            for r in by_kind.get("quarantine", [])
        ] + [
            {"origin": r["key"], "reason": "late_event", "raw": r["payload"], "recorded_at": now}
            for r in by_kind.get("late", [])
        ]

        def snapshots(kind: str) -> list[dict[str, Any]]:
            return [json.loads(r["payload"]) for r in by_kind.get(kind, [])]

        self.quarantined.update(q["reason"] for q in quarantine)
        if alerts and self.on_alerts is not None:
            self.on_alerts(alerts)
        if self.store is None:
            return
        self.store.write({
            "brokers": _latest(snapshots("broker"), lambda b: (b["cluster_id"], b["broker_id"])),
            "clusters": _latest(snapshots("cluster"), lambda c: c["cluster_id"]),
            "targets": _latest(snapshots("target"), lambda t: t["target"]),
            "broker_transitions": {(t["cluster_id"], t["broker_id"], t["ts"], t["state"]): t
                                   for t in snapshots("transition")}.values(),
            "controller_history": {(c["cluster_id"], c["ts"]): c for c in snapshots("controller")}.values(),
            "quarantine": quarantine,
        })
        if alert_objects:
            self.store.record_alerts(alert_objects)
        log.info("batch written", extra={"batch_id": batch_id, "rows": len(frame), "alerts": len(alert_objects),
                                         "quarantined": len(quarantine)})
