"""How big one cluster's detection state grows when its node ids churn (issue 27).

Feeds one cluster's shard (`ShardEngine("cluster:<id>")`) with bootstrap responses, one per
micro-batch as the job does, and prints after each scenario the bytes of its pickled state
(`dump_engine`, what the job writes to the state store for that shard every batch), how many
brokers and advertised pairs it holds, and how long the last dump took.

Scenarios (each response lists 1,000 brokers at h0..h999:9092, a response every 10 s):
- steady: the same 1,000 node ids in every response (the floor: what is currently true);
- churn: response r lists node ids r*1000 .. r*1000+999, so each response replaces every node id
  (the issue's reproduction); after 10 responses 10,000 node ids have churned, after 50, 50,000.

Usage: PYTHONPATH=. python bench/state_growth.py [--responses 10 50]
Only streaming.detect's public engine is used, so the same script measures an older checkout
(PYTHONPATH=<that checkout>) for a before/after comparison.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from streaming.config import RuleBook
from streaming.detect import ShardEngine, dump_engine
from streaming.records.contract import Event, event_from_dict

CLUSTER = "ChurnChurnChurnChurnCA"
START_MS = 1_764_000_000_000
PER_RESPONSE = 1000
STEP_MS = 10_000


def response(index: int, node_ids: range) -> Event:
    return event_from_dict({
        "schema": "fleetwatch.event/v1", "type": "metadata_response", "ts": START_MS + index * STEP_MS,
        "source": "bench", "cluster_id": CLUSTER, "target": "churn", "endpoint": "h0:9092", "expected": None,
        "responder_node_id": None, "controller_id": 1, "error": None, "latency_ms": 3,
        "brokers": [{"node_id": n, "host": f"h{n % PER_RESPONSE}", "port": 9092} for n in node_ids],
    })


def steady(index: int) -> range:
    return range(PER_RESPONSE)


def churn(index: int) -> range:
    return range(index * PER_RESPONSE, (index + 1) * PER_RESPONSE)


def measure(node_ids: Callable[[int], range], responses: int) -> dict[str, float]:
    book = RuleBook()
    engine = ShardEngine("cluster:" + CLUSTER)
    watermark = -(2**62)
    dump_ms = 0.0
    size = 0
    for index in range(responses):
        event = response(index, node_ids(index))
        engine.process([(("", index), event)], watermark, book)
        started = time.perf_counter()
        size = len(dump_engine(engine))
        dump_ms = (time.perf_counter() - started) * 1000
        watermark = event.ts - book.defaults.allowed_lateness_ms
    return {"bytes": size, "brokers": len(engine.brokers), "pairs": len(engine.advertisements.by_node),
            "dump_ms": dump_ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--responses", type=int, nargs="+", default=[10, 50],
                        help="how many responses of each scenario (each churns 1,000 node ids)")
    args = parser.parse_args()
    print(f"{'scenario':<8} {'responses':>9} {'churned ids':>11} {'state bytes':>12} {'brokers':>8} "
          f"{'pairs':>7} {'last dump ms':>12}")
    for name, node_ids in (("steady", steady), ("churn", churn)):
        for responses in args.responses:
            m = measure(node_ids, responses)
            churned = responses * PER_RESPONSE if name == "churn" else PER_RESPONSE
            print(f"{name:<8} {responses:>9} {churned:>11,} {m['bytes']:>12,} {m['brokers']:>8,} "
                  f"{m['pairs']:>7,} {m['dump_ms']:>12.1f}")


if __name__ == "__main__":
    main()
