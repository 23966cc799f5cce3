#!/usr/bin/env bash
# Where actiongate's CPU goes on a new change: the SQLite row of bench/new_changes.sh (one
# service, one actiongate on SQLite, apply_load with 16 customers) with `perf record` on
# actiongate for a few seconds in the middle of the run, the samples put in buckets by
# bench/perf_buckets.py, each with its share of the CPU per change measured in the run;
# then the same for the path's floor (examples/change_floor.rs, the floor row of
# bench/new_changes.sh: the same calls and durable writes, no guard), so each part is read
# beside what it costs with nothing of actiongate around it; and last for the floor with
# actiongate's store (`--store actiongate`), whose store bucket runs actiongate's own
# statements.
#
# Usage: bench/profile_new_changes.sh [--duration SECONDS] [--no-build]
# Needs perf (Debian's linux-perf, installed when missing), python3, cargo, curl.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DURATION=16
SIZES=""
BUILD=1
OUT=""
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_args "$@"
bench_workdir profile-new-changes
command -v perf >/dev/null || { apt-get update >/dev/null && apt-get install -y linux-perf >/dev/null; }
new_change_bins

start_service
PORT=$(free_port)
(cd "$WORK" && exec setsid "$BIN" serve --host 127.0.0.1 --port "$PORT" --subscriptions-url "http://127.0.0.1:$SP" \
  --data-dir "$WORK/sqlite" --rate-capacity 1000000) >"$WORK/actiongate.log" 2>&1 &
PIDS+=($!); PID=$!
wait_http "http://127.0.0.1:$PORT/health"

FLOOR_PORT=$(free_port)
setsid "$FLOOR" --service "http://127.0.0.1:$SP" --data-dir "$WORK/floor" --port "$FLOOR_PORT" >"$WORK/floor.log" 2>&1 &
PIDS+=($!); FLOOR_PID=$!
wait_http "http://127.0.0.1:$FLOOR_PORT/health"

# profile NAME PORT PID DATA_DIR FIRST_RECORD: the load on one server, perf on it meanwhile.
profile() {
  "$APPLY_LOAD" --server "http://127.0.0.1:$2" --service "http://127.0.0.1:$SP" --duration "$DURATION" \
    --concurrency 16 --records 60000 --first-record "$5" --cpu-pid "$3" --service-pid "$SERVICE_PID" >"$WORK/load-$1.txt" &
  local load=$! line cpu
  # The records are made before the clock starts: wait until the load's changes begin.
  for _ in $(seq 600); do
    [[ -n "$(find "$4" -name '*.db-wal' -size +64k 2>/dev/null)" ]] && break
    sleep 0.1
  done
  sleep 2
  perf record -e cpu-clock -F 1000 --call-graph dwarf,16384 -p "$3" -o "$WORK/perf-$1.data" -- sleep 4 >/dev/null 2>&1
  wait "$load"
  line=$(grep '^apply_load pair ' "$WORK/load-$1.txt")
  log "$1: $line"
  cpu=$(sed -E 's/.* cpu_us=([0-9]+).*/\1/' <<<"$line")
  perf script -i "$WORK/perf-$1.data" 2>/dev/null >"$WORK/perf-$1.txt"
  echo "$1:"
  python3 bench/perf_buckets.py "$WORK/perf-$1.txt" "$cpu"
}
profile actiongate "$PORT" "$PID" "$WORK/sqlite" 0
profile floor "$FLOOR_PORT" "$FLOOR_PID" "$WORK/floor" 100000

# The floor with actiongate's own store (change_floor --store actiongate): the same store
# statements as actiongate's, with nothing of the guard around them.
STORE_PORT=$(free_port)
setsid "$FLOOR" --service "http://127.0.0.1:$SP" --data-dir "$WORK/floor-store" --port "$STORE_PORT" \
  --store actiongate >"$WORK/floor-store.log" 2>&1 &
PIDS+=($!); STORE_PID=$!
wait_http "http://127.0.0.1:$STORE_PORT/health"
profile floor-store "$STORE_PORT" "$STORE_PID" "$WORK/floor-store" 200000
