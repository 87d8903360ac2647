"""`fleetwatch notify` and `fleetwatch silence add|list|expire`.

`streaming/cli.py` wires them with `configure_parser`/`command` and
`configure_silence_parser`/`silence_command`; `python -m streaming.notify` runs them standalone.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time

from streaming.config import ConfigError, load_config, longest_attempt_ms
from streaming.plumbing.clock import now_ms

__all__ = ["command", "configure_parser", "configure_silence_parser", "silence_command"]


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True,
                   help="config file: the store, alerting.receivers/routes and alerting.delivery (dead-letter limits, "
                        "retention)")
    p.add_argument("--once", action="store_true", help="one pass over what is due, then exit")
    p.add_argument("--group-wait-ms", type=int, default=10_000, metavar="MS",
                   help="storm control: how long Slack/Alertmanager deliveries wait to be grouped per cluster "
                        "(default 10000; 0 sends at once)")
    p.add_argument("--interval-ms", type=int, default=1000, metavar="MS",
                   help="how often to look for new and due notifications (default 1000)")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="the whole of one delivery attempt: connect, send, status and the answer's first 16 KiB "
                        "(from 1 s to what alerting.delivery.lease_ms allows, 15 s for its default 30 s; "
                        "default alerting.delivery.attempt_timeout_ms, 10 s)")
    p.add_argument("--retry-base-ms", type=int, default=1000, metavar="MS",
                   help="first retry delay; doubles per attempt, with jitter (default 1000)")
    p.add_argument("--retry-max-ms", type=int, default=300_000, metavar="MS",
                   help="longest retry delay (default 300000)")
    p.add_argument("--concurrency", type=int, default=4, help="requests in flight per receiver (default 4)")
    p.add_argument("--requeue-dead", action="store_true",
                   help="send the dead letters again (after fixing a receiver), in order, then go on as usual; "
                        "a dead firing whose resolution was already delivered is not sent (it is superseded)")


def command(args: argparse.Namespace) -> int:
    from streaming.notify.delivery import Notifier, NotifyOptions, describe_counts
    from streaming.store import Store

    for flag, value, low in (("--group-wait-ms", args.group_wait_ms, 0), ("--interval-ms", args.interval_ms, 1),
                             ("--retry-base-ms", args.retry_base_ms, 1), ("--retry-max-ms", args.retry_max_ms, 1),
                             ("--concurrency", args.concurrency, 1)):
        if value < low:
            raise ConfigError(f"{flag} must be at least {low}")
    config = load_config(args.config)
    longest_s = longest_attempt_ms(config.alerting.delivery.lease_ms) / 1000
    if args.timeout is not None and not 1 <= args.timeout <= longest_s:
        raise ConfigError(f"--timeout must be between 1 and {longest_s:g} s (an attempt ends within the notifier's "
                          f"{config.alerting.delivery.lease_ms} ms lease)")
    if not config.alerting.receivers:
        raise ConfigError(f"{args.config}: alerting.receivers is empty: there is nowhere to deliver to")
    options = NotifyOptions(group_wait_ms=args.group_wait_ms, interval_ms=args.interval_ms, timeout_s=args.timeout,
                            retry_base_ms=args.retry_base_ms, retry_max_ms=max(args.retry_max_ms, args.retry_base_ms),
                            concurrency=args.concurrency)
    store = Store(config.store.url)
    notifier = None
    stop = threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    try:
        notifier = Notifier(config, store, options)
        counts = notifier.run(stop, once=args.once, requeue_dead=args.requeue_dead)
    finally:  # NotifierBusy goes on to the CLI: one line, exit 6
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if notifier is not None:
            notifier.close()
        store.close()
    if args.once:
        keys = ("requeued", "superseded") if args.requeue_dead else ()
        print(f"notify: {describe_counts(counts, ('delivered', 'failed', 'dead', 'silenced', *keys))}")
    return 1 if args.once and counts.get("errors") else 0


# -- silences ---------------------------------------------------------------------------------

def configure_silence_parser(p: argparse.ArgumentParser) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", help="config file naming the store (default: the embedded default store)")
    sub = p.add_subparsers(dest="silence_action", required=True, metavar="ACTION")
    add = sub.add_parser("add", parents=[common], help="silence matching alerts for a while",
                         description="Silence the alerts that match every given matcher (e.g. a planned rolling "
                                     "restart): they are recorded as silenced, not delivered.")
    add.add_argument("--cluster", help="cluster id or configured cluster (target) name")
    add.add_argument("--rule", help="rule name or pattern, e.g. broker.fenced or 'broker.*'")
    add.add_argument("--broker", type=int, help="broker id (with --cluster)")
    add.add_argument("--target", help="configured target name")
    add.add_argument("--endpoint", help="host:port")
    add.add_argument("--for", dest="duration", required=True, help="how long: 30m, 2h, 1h30m, 1d")
    add.add_argument("--reason", required=True, help="why (shown in `silence list`)")
    add.add_argument("--author", help="who (default: the current user)")
    ls = sub.add_parser("list", parents=[common], help="show active silences",
                        description="Show the active and pending silences (--all: also ended and expired ones).")
    ls.add_argument("--all", action="store_true", help="also ended and expired silences")
    ls.add_argument("--json", action="store_true", help="one JSON object per line")
    expire = sub.add_parser("expire", parents=[common], help="end a silence now",
                            description="End a silence now (a unique prefix of the id is enough).")
    expire.add_argument("id", help="silence id, from `silence list`")


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def silence_command(args: argparse.Namespace) -> int:
    from streaming.plumbing.redact import redact_text
    from streaming.store import Store, add_silence, expire_silence, list_silences, parse_duration

    config = load_config(args.config)
    store = Store(config.store.url)
    try:
        if args.silence_action == "add":
            silence = add_silence(store, cluster=args.cluster, rule=args.rule, broker_id=args.broker,
                                  target=args.target, endpoint=args.endpoint, duration_ms=parse_duration(args.duration),
                                  reason=args.reason, created_by=args.author)
            print(f"silence {silence.id} added: {silence.matchers()} until {_iso(silence.ends_at)} ({silence.reason})")
            return 0
        if args.silence_action == "expire":
            silence = expire_silence(store, args.id)
            print(f"silence {silence.id} expired: {silence.matchers()}")
            return 0
        now = now_ms()
        found = list_silences(store, include_ended=args.all)
        if args.json:
            for s in found:
                print(json.dumps({**s.__dict__, "reason": redact_text(s.reason), "state": s.state(now)}))
            return 0
        if not found:
            print("no active silences" if not args.all else "no silences")
            return 0
        rows = [("ID", "STATE", "MATCHERS", "STARTS", "ENDS", "BY", "REASON")]
        rows += [(s.id, s.state(now), s.matchers(), _iso(s.starts_at), _iso(s.ends_at), s.created_by or "",
                  redact_text(s.reason)) for s in found]
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
        for r in rows:
            print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=False)) + "  " + r[-1])
        return 0
    finally:
        store.close()
