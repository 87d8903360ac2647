"""The second pass's state in the store (`second_pass_state`): what the live job's driver carries
from one micro-batch to the next (streaming/detect/second_pass.py), kept with each batch's writes
so that it resumes exactly as Spark's checkpoint does.

A bucket's row of batch N is written in N's transaction; a batch reads, per bucket, the newest row
of a batch before it. The two newest rows of a bucket are kept: if the job dies after N's write and
before Spark committed N, Spark runs N again, which reads the row before N's. Rows of another
checkpoint of the query (a reset detection state) are deleted with the first write of the new one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from sqlalchemy import and_, delete, func, insert, select

from streaming.store.job_tables import second_pass_state as table

__all__ = ["SecondPassWrite", "read_buckets", "write_buckets"]


class SecondPassWrite(NamedTuple):
    """The buckets a micro-batch changed (pickled engines; None: no shard left), to write with it."""

    query: str
    checkpoint_id: str
    batch_id: int
    buckets: Mapping[int, bytes | None]


def read_buckets(conn, query: str, checkpoint_id: str, before_batch: int) -> dict[int, bytes]:
    """Each bucket's engines as the newest batch before `before_batch` left them (none: no shard)."""
    newest = (select(table.c.bucket, func.max(table.c.batch_id).label("batch_id"))
              .where(table.c.query == query, table.c.checkpoint_id == checkpoint_id,
                     table.c.batch_id < before_batch)
              .group_by(table.c.bucket).subquery())
    rows = conn.execute(select(table.c.bucket, table.c.engines).join(newest, and_(
        table.c.bucket == newest.c.bucket, table.c.batch_id == newest.c.batch_id))
        .where(table.c.query == query, table.c.checkpoint_id == checkpoint_id)).all()
    return {int(bucket): bytes(engines) for bucket, engines in rows if engines is not None}


def write_buckets(conn, change: SecondPassWrite) -> None:
    """Write a batch's buckets (again, when Spark runs the batch again) and drop the rows no batch reads."""
    if not change.buckets:
        return
    mine = and_(table.c.query == change.query, table.c.checkpoint_id == change.checkpoint_id)
    conn.execute(delete(table).where(table.c.query == change.query, table.c.checkpoint_id != change.checkpoint_id))
    for bucket, engines in change.buckets.items():
        this = and_(mine, table.c.bucket == bucket)
        conn.execute(delete(table).where(this, table.c.batch_id >= change.batch_id))
        conn.execute(insert(table).values(query=change.query, checkpoint_id=change.checkpoint_id, bucket=bucket,
                                          batch_id=change.batch_id, engines=engines))
        previous = conn.execute(select(func.max(table.c.batch_id)).where(
            this, table.c.batch_id < change.batch_id)).scalar()
        if previous is not None:
            conn.execute(delete(table).where(this, table.c.batch_id < previous))
