"""A single-process reference detector for every detection rule, written for reading, not for speed.

    .venv/bin/python bench/reference_detector.py EVENTS.jsonl --alerts-out ALERTS.jsonl

The command line of `bench/reference/` (see its docstring): it reads a JSONL file of contract-v1
events and writes the alert lines `fleetwatch replay` writes for it. `bench/replay_vs_reference.py`
checks fleetwatch against it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

# bench/ is this script's folder, first on sys.path when it runs.
from reference import detect

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("events", help="contract-v1 events, one JSON object per line")
    parser.add_argument("--alerts-out", required=True, help="where to write the alert lines (JSONL)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        with open(args.events, "rb") as fh:
            alerts, late, skipped = detect(fh)
    except OSError as exc:
        print(f"reference_detector: cannot read {args.events}: {exc.strerror}", file=sys.stderr)
        return 2
    with open(args.alerts_out, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(a) + "\n" for a in alerts)
    print(f"reference: {len(alerts)} alert lines, {late} late, {skipped} skipped, "
          f"{time.monotonic() - started:.2f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
