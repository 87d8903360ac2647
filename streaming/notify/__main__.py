"""`python -m streaming.notify notify --config F` / `python -m streaming.notify silence …`: the
same commands as `fleetwatch notify` and `fleetwatch silence`, without the rest of the CLI."""

import argparse
import sys
from collections.abc import Sequence

from streaming.notify import cli
from streaming.plumbing.errors import run_command


def main(argv: Sequence[str] | None = None) -> int:
    from streaming.plumbing.logs import setup_logging

    parser = argparse.ArgumentParser(prog="fleetwatch",  # usage and errors read as `fleetwatch notify|silence`
                                     description="deliver alerts to the receivers, and manage silences")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text, configure, command in (
            ("notify", "deliver alerts from the store's outbox to the receivers", cli.configure_parser, cli.command),
            ("silence", "add, list and expire silences", cli.configure_silence_parser, cli.silence_command)):
        p = sub.add_parser(name, help=help_text, description=help_text)
        configure(p)
        p.set_defaults(func=command)
    args = parser.parse_args(argv)
    setup_logging()
    return run_command(args.command, lambda: args.func(args))  # as `fleetwatch notify|silence` says it


sys.exit(main())
