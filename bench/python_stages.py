"""The job's Python stages alone, without Spark: CPU per 100k events of a simulated fleet, by stage, and
a digest of every output row, per checkout (issue 45: what the Python workers spend per event).

    .venv/bin/python bench/python_stages.py [--clusters 1000] [--brokers 12] [--seconds 30]
                                            [--batch-ms 2000] [--rounds 3] [--checkouts DIR,DIR...]

The fleet's telemetry (`fleetwatch simulate`; a fault every 2 s once 30 s have passed, so the default
30 s are the fleet's steady state, nearly all of it heartbeats, responses and quorum readings that say
again what they said before) is cut into micro-batches of `--batch-ms` of event time and run through
the job's own code as streaming/workshop/passes.py runs it (this checkout's, over each measured
checkout's job): the parse stage per bus partition (4 per topic), detection's first pass per state
bucket (16, its state kept pickled between batches as Spark's store keeps it), the second pass, and the
sink as the job's driver runs it (`BatchWriter`: each batch's rows read back and written to a SQLite
store).
Each checkout (a git worktree of another commit, e.g. `git worktree add /tmp/base HEAD~1`, run with
this checkout's virtualenv) runs in a process of its own, `--rounds` times in turn, so that the
machine's drift falls on all alike; the first checkout is the baseline of the ratios. The digests of
the output rows must be equal across checkouts of the same detection: they say whether a change moved
anything the job writes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_PASSES = ROOT / "streaming" / "workshop" / "passes.py"

# Runs in the measured checkout's process: `sys.argv[1]` the events file, `sys.argv[2]` the batch length,
# `sys.argv[3]` this checkout's streaming/workshop/passes.py (older checkouts have none of their own).
_STAGES = r'''
import functools, hashlib, importlib.util, json, sys, tempfile, time
import pandas
import streaming.pipeline, streaming.source
from streaming.records.contract import topic_of
if "parse_chunk" not in streaming.pipeline.__all__:  # a checkout from before its faces named what passes.py takes
    from streaming.pipeline.parse import ParseSettings, parse_chunk
    from streaming.pipeline.state import DetectorProcessor
    from streaming.source.kafka_offsets import allocate
    streaming.pipeline.ParseSettings, streaming.pipeline.parse_chunk = ParseSettings, parse_chunk
    streaming.pipeline.DetectorProcessor, streaming.source.allocate = DetectorProcessor, allocate
spec = importlib.util.spec_from_file_location("fleetwatch_passes", sys.argv[3])
passes = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(passes)
Bus, InMemoryJob = passes.Bus, passes.InMemoryJob
import streaming.detect.second_pass as second_pass
import streaming.pipeline.state as state
from streaming.sinks import BatchWriter
from streaming.store import Store

spent = {}
def timed(owner, name, stage):
    function = getattr(owner, name)
    @functools.wraps(function)
    def measured(*args, **kwargs):
        start = time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            spent[stage] = spent.get(stage, 0.0) + time.process_time() - start
    setattr(owner, name, measured)

timed(passes, "parse_chunk", "parse")
timed(state, "unpack", "unpack")
timed(state, "run_bucket", "first pass (engines, state)")
timed(state, "output_rows", "output rows")
timed(second_pass.SecondPass, "run", "second pass")
timed(BatchWriter, "__call__", "sink (rows read back, store)")

class Batch:  # what the job's writer takes of Spark's micro-batch: its output rows, as pandas
    def __init__(self, rows):
        self.rows = rows
    def toPandas(self):
        return pandas.DataFrame(self.rows, columns=["kind", "key", "ts", "payload"])

lines = open(sys.argv[1]).read().splitlines()
events = [json.loads(line) for line in lines]
bus = Bus(partitions={topic: 4 for topic in Bus().partitions})
job = InMemoryJob(buckets=16)
writer = BatchWriter(Store(f"sqlite:///{tempfile.mkdtemp(prefix='fleetwatch-stages-')}/store.db"))
batch_ms, i, total, batch_id = int(sys.argv[2]), 0, 0.0, 0
while i < len(lines):
    end, j = events[i]["ts"] + batch_ms, i
    while j < len(lines) and events[j]["ts"] < end:
        bus.append(topic_of(events[j]["type"]), events[j], lines[j])
        j += 1
    start, written = time.process_time(), len(job.output)
    job.read(bus, None, end)
    writer(Batch(job.output[written:]), batch_id)
    total += time.process_time() - start
    i, batch_id = j, batch_id + 1
digest = hashlib.sha256(repr(sorted(map(repr, job.output))).encode()).hexdigest()[:16]
print(json.dumps({"events": len(lines), "cpu_s": total, "stages": spent, "rows": len(job.output), "digest": digest}))
'''


def _run(checkout: Path, events: Path, batch_ms: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run([sys.executable, "-c", _STAGES, str(events), str(batch_ms), str(_PASSES)], env=env,
                          capture_output=True, text=True, cwd=checkout)
    if done.returncode != 0:
        sys.exit(f"python_stages: the stages of {checkout} failed: {done.stderr.strip().splitlines()[-1]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=1000, help="clusters in the fleet (default 1000)")
    parser.add_argument("--brokers", type=int, default=12, help="brokers per cluster (default 12)")
    parser.add_argument("--seconds", type=int, default=30, help="event time of the fleet (default 30)")
    parser.add_argument("--batch-ms", type=int, default=2000, help="event time per micro-batch (default 2000)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each checkout, in turn (default 3)")
    parser.add_argument("--checkouts", default=str(ROOT),
                        help="comma-separated checkouts of fleetwatch; the first is the baseline")
    args = parser.parse_args()
    checkouts = [Path(c).resolve() for c in args.checkouts.split(",")]
    missing = [str(c) for c in checkouts if not (c / "streaming" / "pipeline" / "state.py").is_file()]
    if missing:
        sys.exit(f"python_stages: not a fleetwatch checkout of the parsed pipeline: {', '.join(missing)}")
    with tempfile.TemporaryDirectory(prefix="fleetwatch-stages-") as tmp:
        events = Path(tmp) / "events.jsonl"
        print(f"simulating {args.clusters} x {args.brokers} for {args.seconds} s ...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "streaming.cli", "simulate", "--clusters", str(args.clusters),
                        "--brokers", str(args.brokers), "--duration", str(args.seconds), "--fault-every", "2",
                        "--out", str(events)], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        runs: dict[Path, list[dict]] = {c: [] for c in checkouts}
        for round_ in range(args.rounds):
            for checkout in checkouts:
                runs[checkout].append(_run(checkout, events, args.batch_ms))
                last = runs[checkout][-1]
                print(f"round {round_ + 1}/{args.rounds} {checkout}: {last['cpu_s']:.1f} CPU s", file=sys.stderr,
                      flush=True)
    base = None
    for checkout, results in runs.items():
        per_100k = statistics.median(r["cpu_s"] for r in results) / results[0]["events"] * 100_000
        base = per_100k if base is None else base
        stages = {stage: statistics.median(r["stages"].get(stage, 0.0) for r in results) / results[0]["events"] * 1e5
                  for stage in results[0]["stages"]}
        digests = sorted({r["digest"] for r in results})
        print(f"{checkout}: {per_100k:.2f} CPU s per 100k events (median of {len(results)}; "
              f"{per_100k / base:.2f} x the first), {results[0]['rows']} output rows, digest {', '.join(digests)}")
        print("  " + ", ".join(f"{stage} {cpu:.2f}" for stage, cpu in sorted(stages.items(), key=lambda kv: -kv[1])))


if __name__ == "__main__":
    main()
