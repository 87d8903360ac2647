"""The states of a row of `deliveries` (`streaming.store.notifier_tables`)."""

from __future__ import annotations

__all__ = ["DEAD", "DELIVERED", "FINAL_OK", "HELD", "PENDING", "SILENCED", "SUPERSEDED"]

PENDING = "pending"        # to send at next_attempt_at
DELIVERED = "delivered"    # a 2xx came back
DEAD = "dead"              # refused for good, or past a retry limit: a dead letter, kept with its reason
HELD = "held"              # a firing a silence holds; decided again at next_attempt_at (the silence's end)
SILENCED = "silenced"      # not sent, for good, because of a silence
SUPERSEDED = "superseded"  # a requeued dead firing whose resolution had already been delivered

# Done as far as the outbox row is concerned (its delivered_at is set once every delivery is one of these).
FINAL_OK = (DELIVERED, SILENCED, HELD, SUPERSEDED)
