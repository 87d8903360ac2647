"""`python -m streaming.kraft archive [BUNDLE]`: make the class archive Kafka's JVMs start with (`make jars`)."""

from __future__ import annotations

import argparse
import sys

from streaming.kraft.archive import DEFAULT_BUNDLE, build


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m streaming.kraft",
                                     description="Real Kafka's helpers (run by make).")
    sub = parser.add_subparsers(dest="command", required=True)
    archive = sub.add_parser("archive", help="make the class archive Kafka's JVMs start with, unless made")
    archive.add_argument("bundle", nargs="?", default=DEFAULT_BUNDLE,
                         help=f"the Kafka jar bundle (default {DEFAULT_BUNDLE})")
    args = parser.parse_args(argv)
    try:
        print(build(args.bundle))
    except Exception as exc:  # an optimisation: say why in one line, never fail make
        print(f"could not make Kafka's class archive ({type(exc).__name__}: {exc}); its JVMs start without it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
