#!/usr/bin/env bash
# The test suite N times in a row with a CPU-bound process running beside it: the check that no
# test depends on timing or scheduling. Prints each run's wall time and exit status, stops at
# the first failure, and fails if a run took longer than LIMIT seconds (default 420: the suite
# stays within 7 minutes under this load).
#
# Usage: scripts/suite_under_load.sh [RUNS] [LIMIT]   (make test-under-load RUNS=10)
set -uo pipefail
cd "$(dirname "$0")/.."

runs=${1:-10}
limit=${2:-420}
log_dir=$(mktemp -d "${TMPDIR:-/tmp}/caseshelf-under-load-XXXXXX")

# The neighbour: one busy loop, as a second job on the machine would be.
python3 -c "while True: pass" &
busy=$!
trap 'kill "$busy" 2>/dev/null' EXIT

status=0
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  # each run's log ends with its slowest tests: where a slow run spent its time
  PYTEST_ADDOPTS="--durations=25 ${PYTEST_ADDOPTS:-}" make test >"$log_dir/run-$i.log" 2>&1
  rc=$?
  took=$(($(date +%s) - start))
  summary=$(grep -E "[0-9]+ (passed|failed)" "$log_dir/run-$i.log" | tail -n 1)
  echo "run $i/$runs: exit $rc, ${took} s: $summary"
  if [ "$rc" -ne 0 ]; then
    echo "run $i failed; its output is in $log_dir/run-$i.log" >&2
    status=1
    break
  fi
  if [ "$took" -gt "$limit" ]; then
    echo "run $i took ${took} s, over the ${limit} s limit ($log_dir/run-$i.log)" >&2
    status=1
  fi
done
exit "$status"
