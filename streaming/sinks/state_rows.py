"""The fleet's state rows (the brokers, clusters and targets tables) as detection hands them to the sink.

One record for both sides: the pipeline's stateful stage makes a `StateRow` of each snapshot and
ships it as an output row (`StateRow.output`: kind, key, ts, payload); the sink reads the row back
(`StateRow.from_output`) and keeps the latest of each key (`latest_by_table`). It lives with the
sink, below the pipeline, so that both import it without an import running up.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, NamedTuple

__all__ = ["STATE_TABLES", "StateRow", "latest_by_table"]

# Output row kind -> (store table, the columns that identify a row in it).
STATE_TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "broker": ("brokers", ("cluster_id", "broker_id")),
    "cluster": ("clusters", ("cluster_id",)),
    "target": ("targets", ("target",)),
}


class StateRow(NamedTuple):
    """One snapshot of a broker, cluster or target: `kind` (a key of STATE_TABLES), `key` (its
    identity in its table, as compact JSON) and `row` (the table's row)."""

    kind: str
    key: str
    row: dict[str, Any]

    @classmethod
    def of(cls, kind: str, row: dict[str, Any]) -> StateRow:
        _, columns = STATE_TABLES[kind]
        return cls(kind, json.dumps([row[c] for c in columns], separators=(",", ":")), row)

    @classmethod
    def from_output(cls, kind: str, key: str, payload: str) -> StateRow:
        return cls(kind, key, json.loads(payload))

    def output(self) -> tuple[str, str, int | None, str]:
        """The job's output row (kind, key, ts, payload); a plain tuple, which marshal takes."""
        return (self.kind, self.key, self.row.get("updated_ms") or None,
                json.dumps(self.row, separators=(",", ":")))

    @property
    def updated_ms(self) -> int:
        return self.row.get("updated_ms") or 0


def latest_by_table(rows: Iterable[StateRow]) -> dict[str, list[dict[str, Any]]]:
    """Store table -> its rows, one per key: the most recent (a later one on a tie), so that an
    upsert batch has no duplicates. Every state table is there, empty when no row is for it."""
    best: dict[tuple[str, str], StateRow] = {}
    for row in rows:
        have = best.get((row.kind, row.key))
        if have is None or row.updated_ms >= have.updated_ms:
            best[(row.kind, row.key)] = row
    tables: dict[str, list[dict[str, Any]]] = {table: [] for table, _ in STATE_TABLES.values()}
    for row in best.values():
        tables[STATE_TABLES[row.kind][0]].append(row.row)
    return tables
