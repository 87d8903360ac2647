"""Application file for spark-submit and the Spark Operator: the fleetwatch streaming job.

    spark-submit --master spark://host:7077 deploy/spark/fleetwatch_job.py --config /etc/fleetwatch/fleetwatch.yaml

The `fleetwatch` package must be installed in the Python that runs this file (the driver) and in
the one the executors use (`spark.pyspark.python`). See deploy/spark/submit.sh.
"""

import sys

from streaming.ops.submit import main

if __name__ == "__main__":
    sys.exit(main())
