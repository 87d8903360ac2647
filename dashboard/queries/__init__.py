"""Read-only queries behind the dashboard pages, one module per page.

Every page costs a handful of statements whatever the fleet size: counts, worst severities and
ages are aggregated by the database (1,000 clusters x 12 brokers is ~12k broker rows), and
lists are capped. Ages are measured against the fleet clock (the newest `brokers.updated_ms`),
not the wall clock, so a store filled by a replay of last week's file still reads sensibly.

`shared` holds what they all use (the fleet clock, severity ranks, how an alert is attributed to
a cluster); `fleet`, `cluster`, `alerts`, `identity`, `deliveries` and `pipeline` each serve the
page of that name.
"""

__all__: list[str] = []
