"""Operating fleetwatch in production: `/metrics` for Prometheus, `check-config`, the spark-submit driver."""
