"""The notifier lease's row (`notifier_tables.notifier_lease`): taken, renewed, taken over and
released, each in one transaction (streaming/notify/lease.py says why one notifier holds it, and
how its holder counts the time it may send).

The row runs on the database's clock only: `expires_at` is set from the database's own now, and a
takeover compares it with that same now. A takeover is a compare-and-set on the holder seen (and,
unless that holder is dead, on the expiry judged again by the database); it adds one to
`generation`, the fencing token that `DeliveryQueue.record_outcome` checks (`LeaseFence`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import delete, func, literal_column, select, update

from streaming.store.database import Store
from streaming.store.notifier_tables import notifier_lease

__all__ = ["LeaseClaim", "LeaseHolder", "LeaseTry", "release_lease", "try_lease"]


@dataclass(frozen=True)
class LeaseClaim:
    """Who asks for the lease `name`: an instance (`owner`, a random token) and the process it runs
    in, so that another instance of the same process space can tell whether it is dead."""

    name: str
    owner: str
    host: str
    pid: int


@dataclass(frozen=True)
class LeaseHolder:
    """The lease row as the claim found it, with the database's now (epoch ms) when it was read."""

    owner: str
    host: str
    pid: int
    expires_at: int
    db_now: int


@dataclass(frozen=True)
class LeaseTry:
    """What a claim did: `got` (taken, renewed or taken over), the `generation` it then holds, the
    holder it found, and whether that holder was judged dead."""

    got: bool
    generation: int | None
    found: LeaseHolder
    holder_dead: bool = False


def _database_now_ms(store: Store):
    """The database's clock in epoch ms, as an SQL expression evaluated by the database."""
    if store.engine.dialect.name == "postgresql":
        return literal_column("CAST(FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000) AS BIGINT)")
    return literal_column("CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)")


def try_lease(store: Store, claim: LeaseClaim, ttl_ms: int, holder_is_dead: Callable[[str, int], bool]) -> LeaseTry:
    """Take the lease, renew it (the claim's owner holds it), or take it over from a holder that
    expired or that `holder_is_dead(host, pid)` says is dead, in one transaction: `expires_at` is
    the database's now plus `ttl_ms`."""
    t = notifier_lease
    now = _database_now_ms(store)
    mine = {"owner": claim.owner, "host": claim.host, "pid": claim.pid, "acquired_at": now,
            "expires_at": now + ttl_ms}
    with store.engine.begin() as conn:
        conn.execute(store._insert(t).values(name=claim.name, generation=1, **mine)
                     .on_conflict_do_nothing(index_elements=["name"]))
        row = conn.execute(select(t, now.label("db_now")).where(t.c.name == claim.name)).one()
        found = LeaseHolder(row.owner, row.host, row.pid, row.expires_at, row.db_now)
        if row.owner == claim.owner:
            got = conn.execute(update(t).where(t.c.name == claim.name, t.c.owner == claim.owner)
                               .values(expires_at=now + ttl_ms)).rowcount == 1
            return LeaseTry(got, row.generation if got else None, found)
        dead = holder_is_dead(row.host, row.pid)
        got = False
        if dead or row.expires_at <= row.db_now:
            # Compare-and-set on the holder seen, the expiry judged again by the database.
            taken = [t.c.name == claim.name, t.c.owner == row.owner]
            if not dead:
                taken.append(t.c.expires_at <= now)
            got = conn.execute(update(t).where(*taken).values(
                **mine, generation=func.coalesce(t.c.generation, 0) + 1)).rowcount == 1
        generation = conn.scalar(select(t.c.generation).where(t.c.name == claim.name)) if got else None
    return LeaseTry(got, generation, found, dead)


def release_lease(store: Store, name: str, owner: str) -> None:
    """Give the lease `name` up, if `owner` still holds it."""
    with store.engine.begin() as conn:
        conn.execute(delete(notifier_lease).where(notifier_lease.c.name == name, notifier_lease.c.owner == owner))
