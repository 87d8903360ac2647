"""`python -m streaming.workshop.kraft archive [BUNDLE]`: make the class archive Kafka's JVMs start with
(`make jars`)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from streaming.workshop.kraft.archive import DEFAULT_BUNDLE, archive_path
from streaming.workshop.kraft.cluster import KRaftCluster


def build(bundle: str = DEFAULT_BUNDLE) -> str:
    """Make the bundle's archive unless it exists; one line saying what happened."""
    target = archive_path(bundle)
    if target is None:
        return "no java found: Kafka's JVMs start without a class archive"
    if target.is_file():
        return f"{target}: already made"
    for old in target.parent.glob("classes-*.jsa"):
        old.unlink()  # made with another Java
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fleetwatch-kafka-classes-") as work:
        cluster = KRaftCluster(work, brokers=1, bundle=bundle, dump_classes_to=partial)
        try:
            cluster.start()
            cluster.stop_node(1)  # SIGTERM: a normal exit, which writes the archive
        finally:
            cluster.stop_all()
    if not partial.is_file():
        return "could not make Kafka's class archive (the node wrote none); its JVMs start without it"
    os.replace(partial, target)
    return f"{target}: made in {time.monotonic() - started:.0f} s ({target.stat().st_size // 2**20} MB)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m streaming.workshop.kraft",
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
