"""The workshop: what the tests, the benches and the demo's `--real-kafka` use to stand real parts up
on one machine. It is no part of the product: no product module imports it (the demo's
`--real-kafka` only, on first use), and the wheel leaves it out (pyproject.toml), so it runs from a
source checkout (`paths.ROOT`).

- `kraft`: real Apache Kafka 4.4 KRaft clusters as plain JVM processes, a TCP proxy to cut one
  node off, the probe in the background, the demo's real-cluster showcase;
- `hostile_kafka`: Kafka-protocol servers that misbehave (the probe's isolation);
- `postgres`, `spark_standalone`: a throwaway PostgreSQL server, a Spark standalone cluster;
- `hooks`: the notifier's real HTTP receivers and the notifier as a process;
- `rehearsal`: the production topology on one machine, its faults and its scoring;
- `polling`: waiting for something by asking, with a deadline; `fake_clock`: a clock only its caller moves;
- `passes`: the job's two passes without Spark, over a bus held in memory, read in micro-batches;
- `screenshots`: the README's screenshots of every dashboard page;
- `paths`: the checkout itself.

The face is the modules themselves (`from streaming.workshop.kraft import KRaftCluster`).
"""

from __future__ import annotations

from streaming.plumbing.lazy_names import modules_on_first_use

__all__ = ["fake_clock", "hooks", "hostile_kafka", "kraft", "passes", "paths", "polling", "postgres", "rehearsal",
           "screenshots", "spark_standalone"]

__getattr__ = modules_on_first_use(__name__, __all__)
