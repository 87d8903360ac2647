"""A micro-batch as the job's writer sees it (no tests here): `BatchWriter` asks Spark's DataFrame
for one thing, its rows as pandas, so the store's tests hand it those rows without a Spark session."""

from __future__ import annotations

import pandas as pd

__all__ = ["MicroBatch"]


class MicroBatch:
    """The writer's micro-batch: output rows (kind, key, ts, payload), as `toPandas()` gives them."""

    def __init__(self, rows: list[tuple]) -> None:
        self.frame = pd.DataFrame(rows, columns=["kind", "key", "ts", "payload"])

    def toPandas(self) -> pd.DataFrame:
        return self.frame
