"""`fleetwatch alerts list|resolve`: find an alert's id, and close a stuck alert by hand.

`resolve ALERT_ID --reason TEXT [--by WHO]` resolves a firing alert now (the operator's clock):
the store records it as any resolution (its row, its history with `details.reason` and
`details.resolved_by`, the outbox), so the notifier delivers it as a resolve to every receiver its
firing went to. The resolution is final: detection resolving or firing the same alert later
changes nothing (streaming/store/database.py). An id the store does not know, or an alert already
resolved, is one line and exit 2.
"""

from __future__ import annotations

import argparse
import getpass
from typing import TYPE_CHECKING

from streaming.config import load_config
from streaming.plumbing.clock import iso_ms, now_ms
from streaming.plumbing.errors import ConfigError
from streaming.plumbing.redact import redact_text

if TYPE_CHECKING:
    from streaming.store import Store

__all__ = ["command", "configure_parser"]

# The most alerts `alerts list` prints unless told otherwise.
DEFAULT_LIST_LIMIT = 100


def configure_parser(p: argparse.ArgumentParser) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", help="config file naming the store (default: the embedded default store)")
    sub = p.add_subparsers(dest="alerts_action", required=True, metavar="ACTION")
    ls = sub.add_parser("list", parents=[common], help="show alerts, newest first, with their ids",
                        description="Show the store's alerts (their current state), the newest started first.")
    ls.add_argument("--firing", action="store_true", help="only the firing ones")
    ls.add_argument("--limit", type=int, default=DEFAULT_LIST_LIMIT, metavar="N",
                    help=f"at most N alerts (default {DEFAULT_LIST_LIMIT})")
    ls.add_argument("--json", action="store_true", help="one alert object (SPEC section 4) per line")
    resolve = sub.add_parser(
        "resolve", parents=[common], help="resolve a stuck alert by hand",
        description="Resolve a firing alert now, for a reason: recorded in the alert's history (who, why) and "
                    "delivered by the notifier as a resolve, like any other. Detection resolving or firing the "
                    "same alert later changes nothing.")
    resolve.add_argument("alert_id", metavar="ALERT_ID", help="the alert's id, from `fleetwatch alerts list`")
    resolve.add_argument("--reason", required=True, help="why it is resolved by hand (details.reason)")
    resolve.add_argument("--by", help="who resolves it (details.resolved_by; default: the current user)")


def _current_user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a bare container)
        return None


def command(args: argparse.Namespace) -> int:
    from streaming.store import Store

    # Bad input is told before the store is opened.
    if args.alerts_action == "list" and args.limit < 1:
        raise ConfigError("--limit must be at least 1")
    if args.alerts_action == "resolve" and not args.reason.strip():
        raise ConfigError("--reason must say why the alert is resolved by hand")
    store = Store(load_config(args.config).store.url)
    try:
        return _resolve(store, args) if args.alerts_action == "resolve" else _list(store, args)
    finally:
        store.close()


def _resolve(store: Store, args: argparse.Namespace) -> int:
    reason = redact_text(args.reason.strip())
    by = (args.by or "").strip() or _current_user()
    alert = store.resolve_by_hand(args.alert_id.strip(), now_ms(), reason=reason, resolved_by=by)
    print(f"alert {alert.alert_id} resolved: {alert.rule} {alert.queue_subject} at {iso_ms(alert.event_ms)} "
          f"by {by or 'an unknown user'} ({reason}); the notifier delivers the resolve")
    return 0


def _list(store: Store, args: argparse.Namespace) -> int:
    found = store.alerts_newest_first(firing_only=args.firing, limit=args.limit)
    if args.json:
        for alert in found:
            print(alert.message())
        return 0
    if not found:
        print("no firing alerts" if args.firing else "no alerts")
        return 0
    rows = [("ID", "STATUS", "SEVERITY", "RULE", "SUBJECT", "STARTS", "ENDS", "SUMMARY")]
    rows += [(a.alert_id, a.status, a.severity, a.rule, a.queue_subject, iso_ms(a.starts_at),
              iso_ms(a.ends_at) if a.ends_at is not None else "", a.summary) for a in found]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=False)) + "  " + r[-1])
    return 0
