"""The quarantine's bounds (issue 42): what one message may store, the reasons its rows are counted
by, and the table's size cap. One bad producer must not fill the store's disk.

- `fit_raw(raw)`: a message's text as stored, at most `RAW_MAX_BYTES` bytes of UTF-8 (cut at a
  character), and its whole size, which the row keeps (`raw_bytes`: a row whose `raw_bytes` is over
  `RAW_MAX_BYTES` holds the beginning of its message only).
- `reason_group(reason)`: a reason without its list indices (`wrong_type:brokers[3].port` is
  `wrong_type:brokers[].port`): the contract's codes and field paths, a closed set whatever a
  producer sends. The job stores at most `retention.quarantine_rows_per_reason` rows of a group per
  micro-batch and counts the rest on the last row it stores (`not_stored`); the dashboard shows
  quarantine by group.
- `keep_newest_quarantine(conn, max_rows, added)`: the oldest rows beyond
  `retention.quarantine_max_rows` go, in the transaction that added rows.
"""

from __future__ import annotations

import re

from sqlalchemy import delete, select

from streaming.store.job_tables import quarantine

__all__ = ["RAW_MAX_BYTES", "fit_raw", "keep_newest_quarantine", "reason_group"]

RAW_MAX_BYTES = 4096
# Rows beyond the cap deleted per write besides as many as it added: a store filled before the cap
# existed comes down to it over a few batches, each in a short transaction.
_BACKLOG_PER_WRITE = 1000
_INDEX = re.compile(r"\[\d+\]")


def fit_raw(raw: str | None) -> tuple[str | None, int | None]:
    """(the stored text, the message's size in bytes of UTF-8) of a message's text."""
    if raw is None:
        return None, None
    encoded = raw.encode("utf-8", errors="surrogatepass")
    if len(encoded) <= RAW_MAX_BYTES:
        return raw, len(encoded)
    return encoded[:RAW_MAX_BYTES].decode("utf-8", errors="ignore"), len(encoded)


def reason_group(reason: str) -> str:
    """The reason with its list indices left out (see the module's docstring)."""
    return _INDEX.sub("[]", reason)


def keep_newest_quarantine(conn, max_rows: int, added: int) -> int:
    """Delete the oldest quarantine rows (by id: the order they were stored in) beyond `max_rows`,
    at most `added` + `_BACKLOG_PER_WRITE` of them; returns how many went."""
    q = quarantine
    newest_gone = conn.scalar(select(q.c.id).order_by(q.c.id.desc()).offset(max_rows).limit(1))
    if newest_gone is None:
        return 0
    oldest = select(q.c.id).where(q.c.id <= newest_gone).order_by(q.c.id).limit(added + _BACKLOG_PER_WRITE)
    return conn.execute(delete(q).where(q.c.id.in_(oldest.scalar_subquery()))).rowcount
