#!/usr/bin/env bash
# Submit the fleetwatch streaming job to a Spark cluster (standalone or YARN), driver in client mode.
#
#   deploy/spark/submit.sh --master spark://spark-master:7077 --config /etc/fleetwatch/fleetwatch.yaml \
#       [--metrics-port 9108] [--metrics-host 127.0.0.1] [-- EXTRA-SPARK-SUBMIT-OPTIONS...]
#   deploy/spark/submit.sh --master yarn --config ... -- --num-executors 2 --executor-memory 2g
#
# Reads Kafka with Spark's own connector (spark-sql-kafka-0-10 of the installed Spark's version): the
# image's Spark has it baked in; elsewhere `python -m streaming.plumbing.jars connector` fetches it once (Maven,
# strict checksums) into fleetwatch's jar cache, checks every jar against its pinned SHA-256 and
# names them for --jars. Nothing is resolved when the driver starts (no --packages).
# FLEETWATCH_KAFKA_CONNECTOR=0 leaves it out; the job then reads with its own Python reader.
# SIGTERM (systemctl stop, kill) stops the job gracefully: see graceful.sh.
#
# Environment:
#   FLEETWATCH_PYTHON   Python with fleetwatch installed, same path on every node (default: python3 on PATH).
#                       YARN without it on the nodes: ship a packed venv, e.g.
#                       -- --archives fleetwatch-venv.tar.gz#venv --conf spark.pyspark.python=./venv/bin/python
#   SPARK_HOME          default: the installed pyspark package (it ships spark-submit and the jars)
#   FLEETWATCH_KAFKA_CONNECTOR  1 (default): the connector's verified jars; 0: none (the Python reader)
#   FLEETWATCH_JAR_CACHE  where the connector is fetched to (default: var/jars beside the installed package)
#   SPARK_MASTER, FLEETWATCH_CONFIG, FLEETWATCH_METRICS_PORT, FLEETWATCH_METRICS_HOST: defaults for the options
#   FLEETWATCH_METRICS_TOKEN(_FILE) or FLEETWATCH_METRICS_USER/PASSWORD: /metrics asks for them
set -euo pipefail

usage() {
  sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

master="${SPARK_MASTER:-}"
config="${FLEETWATCH_CONFIG:-}"
metrics_port="${FLEETWATCH_METRICS_PORT:-}"
metrics_host="${FLEETWATCH_METRICS_HOST:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --master) master="$2"; shift 2 ;;
    --config) config="$2"; shift 2 ;;
    --metrics-port) metrics_port="$2"; shift 2 ;;
    --metrics-host) metrics_host="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "submit.sh: unknown option $1 (spark-submit options go after --)" >&2; exit 2 ;;
  esac
done
if [ -z "$master" ] || [ -z "$config" ]; then
  echo "submit.sh: --master and --config are required" >&2
  usage >&2
  exit 2
fi
if [ ! -r "$config" ]; then
  echo "submit.sh: cannot read config $config" >&2
  exit 2
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${FLEETWATCH_PYTHON:-$(command -v python3)}"
spark_home="${SPARK_HOME:-$("$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')}"
app="${FLEETWATCH_APP:-$here/fleetwatch_job.py}"

# Refuse a config that would fail on the cluster anyway, with every problem listed.
"$python" -m streaming.ops.check_config "$config" >&2 || exit 2

submit=(
  "$spark_home/bin/spark-submit"
  --master "$master"
  --deploy-mode client
  --name "${FLEETWATCH_APP_NAME:-fleetwatch}"
  --conf "spark.pyspark.python=$python"
  --conf "spark.pyspark.driver.python=$python"
  --conf "spark.executorEnv.PYTHONUNBUFFERED=1"
)
# The driver's JVM options of the config (spark.driver_java_options): spark-submit starts that JVM.
driver_options="$("$python" -c 'import sys; from streaming.config import load_config
print(load_config(sys.argv[1]).spark.driver_java_options)' "$config")"
if [ -n "$driver_options" ]; then
  submit+=(--driver-java-options "$driver_options")
fi
if [ "${FLEETWATCH_KAFKA_CONNECTOR:-1}" != 0 ]; then
  # Empty when Spark ships the connector (the image); a mismatch with the pins is one line and exit 1.
  connector_jars="$("$python" -m streaming.plumbing.jars connector)" || exit 1
  if [ -n "$connector_jars" ]; then
    submit+=(--jars "$connector_jars")  # before "$@": a --jars of the caller's replaces it
  fi
fi
submit+=("$@" "$app" --config "$config")
if [ -n "$metrics_port" ]; then
  submit+=(--metrics-port "$metrics_port")
fi
if [ -n "$metrics_host" ]; then  # the driver's default: 127.0.0.1
  submit+=(--metrics-host "$metrics_host")
fi

export SPARK_HOME="$spark_home" PYSPARK_PYTHON="$python" PYSPARK_DRIVER_PYTHON="$python" PYTHONUNBUFFERED=1
FLEETWATCH_DRIVER_MATCH="$(basename "$app")" exec "$here/graceful.sh" "${submit[@]}"
