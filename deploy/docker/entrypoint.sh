#!/usr/bin/env bash
# Container entrypoint (under tini). Three modes:
#   driver ARGS...    the Spark driver on Kubernetes (what the Spark Operator / spark-submit start):
#                     spark-submit in client mode inside the pod; SIGTERM goes to the Python driver,
#                     so the running micro-batch finishes (deploy/spark/graceful.sh)
#   executor          a Spark executor on Kubernetes (KubernetesExecutorBackend)
#   anything else     run as given: fleetwatch probe|notify|check-config ..., gunicorn ...
set -euo pipefail

# OpenShift-style random UIDs have no passwd entry; the JVM and Hadoop want one.
if ! getent passwd "$(id -u)" >/dev/null 2>&1 && [ -w /etc/passwd ]; then
  echo "fleetwatch:x:$(id -u):0:fleetwatch:/var/lib/fleetwatch:/usr/sbin/nologin" >> /etc/passwd
fi

spark_classpath="${SPARK_CLASSPATH:-}:${SPARK_HOME}/jars/*"
if [ -n "${SPARK_EXTRA_CLASSPATH:-}" ]; then
  spark_classpath="$spark_classpath:$SPARK_EXTRA_CLASSPATH"
fi
if [ -n "${HADOOP_CONF_DIR:-}" ]; then
  spark_classpath="$HADOOP_CONF_DIR:$spark_classpath"
fi
spark_classpath="${SPARK_CONF_DIR:-$SPARK_HOME/conf}:$spark_classpath"

case "${1:-}" in
  driver)
    shift
    exec /opt/fleetwatch/spark/graceful.sh "$SPARK_HOME/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS:-0.0.0.0}" \
      --deploy-mode client \
      "$@"
    ;;
  executor)
    shift
    # Java options the Kubernetes backend passes as SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ...
    java_opts=()
    while IFS= read -r opt; do
      java_opts+=("$opt")
    done < <(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | sed 's/^[^=]*=//')
    exec "$JAVA_HOME/bin/java" "${java_opts[@]}" \
      -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" \
      -cp "$spark_classpath:${SPARK_DIST_CLASSPATH:-}" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "$SPARK_DRIVER_URL" \
      --executor-id "$SPARK_EXECUTOR_ID" \
      --cores "$SPARK_EXECUTOR_CORES" \
      --app-id "$SPARK_APPLICATION_ID" \
      --hostname "$SPARK_EXECUTOR_POD_IP" \
      --resourceProfileId "$SPARK_RESOURCE_PROFILE_ID" \
      --podName "$SPARK_EXECUTOR_POD_NAME" \
      "$@"
    ;;
  *)
    exec "$@"
    ;;
esac
