#!/usr/bin/env bash
# Run a spark-submit command line and turn SIGTERM/SIGINT into a graceful stop of the job.
#
#   graceful.sh "$SPARK_HOME/bin/spark-submit" ... fleetwatch_job.py --config FILE
#
# Under spark-submit the Python driver is a child of the SparkSubmit JVM. A SIGTERM that reaches
# the JVM starts its shutdown hooks, which stop the SparkContext under the running micro-batch.
# So the JVM runs in its own process group (a terminal's Ctrl-C does not reach it) and the
# signal goes to the Python driver only: `fleetwatch run` lets the current micro-batch finish,
# stops the query and the session, and the JVM exits with the driver's exit code.
# (Until the Python driver has started, the signal goes to the JVM.)
set -uo pipefail
set -m  # background jobs get their own process group

if [ $# -eq 0 ]; then
  echo "usage: graceful.sh SPARK-SUBMIT-COMMAND..." >&2
  exit 2
fi
DRIVER_MATCH="${FLEETWATCH_DRIVER_MATCH:-fleetwatch_job.py}"

"$@" &
submit_pid=$!

forward() {
  local sig=$1 driver
  driver=$(pgrep -P "$submit_pid" -f "$DRIVER_MATCH" 2>/dev/null || true)
  if [ -n "$driver" ]; then
    echo "graceful.sh: SIG$sig -> Python driver $driver (the running micro-batch finishes)" >&2
    # shellcheck disable=SC2086  # one pid per word
    kill -s "$sig" $driver 2>/dev/null || true
  else
    kill -s "$sig" "$submit_pid" 2>/dev/null || true
  fi
}
trap 'forward TERM' TERM
trap 'forward INT' INT

status=0
while :; do
  wait "$submit_pid"
  status=$?
  kill -0 "$submit_pid" 2>/dev/null || break  # wait returned for a trapped signal: keep waiting
done
exit "$status"
