#!/usr/bin/env bash
# The new-change path where the store is: select → question → "yes" → apply, a fresh
# record each time, 16 customers at once (crates/tools/examples/apply_load.rs), on SQLite
# with one server, on PostgreSQL with one, and on PostgreSQL with two replicas of one store
# (each change selected on one replica and applied on the other); and beside them the
# path's floor: examples/change_floor.rs, a bare server making the same calls to the
# service and the same two durable commits (one row each) with no guard, driven by the
# same load; and the floor again with actiongate's own store (`--store actiongate`: its
# claims, budget, outcomes and audit entries), so the store's promises are read apart from
# the guard. The SQLite server and both floors run on one worker thread per core (the
# default) and on one (`--workers 1`), since on a machine whose cores the load and the
# service share, a second busy worker costs CPU of its own (preemption, lock hand-offs);
# and the server and the bare floor once more on a core of their own (taskset; the service
# and the load on the others), what they cost when they share no core. Last, the store
# alone (examples/store_alone.rs): a new change's calls of actiongate's store, and the
# floor's two commits, one change after another with no HTTP around them, their CPU split
# into user and kernel time.
# Prints changes per second, latencies, each server's CPU per change (both replicas
# together), the reference service's, the load's and PostgreSQL's (what the machine spends
# on a change, side by side), and writes the table to bench/results/new-changes.md.
#
# Usage: bench/new_changes.sh [--duration SECONDS] [--no-build] [--out FILE]
# ACTIONGATE_BIN and APPLY_LOAD_BIN measure other builds (an earlier commit's, say);
# CHANGE_FLOOR_BIN another floor.
# PostgreSQL: ACTIONGATE_TEST_POSTGRES_URL (a role that may CREATE DATABASE), or the local
# cluster, installed and started when missing (scripts/postgres.sh). Needs: python3, cargo,
# curl, psql. Everything listens on 127.0.0.1 and is stopped on exit; the bench's database
# is dropped.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DURATION=10
SIZES=""
BUILD=1
OUT="bench/results/new-changes.md"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_args "$@"
bench_workdir new-changes
# shellcheck source=scripts/postgres.sh
source "$ROOT/scripts/postgres.sh"
start_postgres
new_change_bins

ADMIN="$ACTIONGATE_TEST_POSTGRES_URL"
DB="ag_bench_$$"
PG_URL="${ADMIN%/*}/$DB"
psql "$ADMIN" -qc "CREATE DATABASE $DB" >/dev/null
trap 'bench_cleanup; psql "$ADMIN" -qc "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT

start_service

# Starts a replica: NAME [DATABASE_URL [EXTRA SERVE FLAGS...]]; sets PORT and PID.
replica() {
  PORT=$(free_port)
  local flags=()
  [[ -n "${2:-}" ]] && flags=(--database-url "$2")
  [[ $# -gt 2 ]] && flags+=("${@:3}")
  (cd "$WORK" && exec setsid "${SERVER_PIN[@]}" "$BIN" serve --host 127.0.0.1 --port "$PORT" --subscriptions-url "http://127.0.0.1:$SP" \
    --data-dir "$WORK/$1" --rate-capacity 1000000 "${flags[@]}") >"$WORK/$1.log" 2>&1 &
  PIDS+=($!); PID=$!
  wait_http "http://127.0.0.1:$PORT/health"
}
# CPU ticks of every PostgreSQL process (its backends live as long as the pools).
pg_ticks() {
  local total=0 pid t
  for pid in $(pgrep -u postgres 2>/dev/null || true); do
    t=$(cpu_ticks "$pid" 2>/dev/null || echo 0); total=$((total + ${t:-0}))
  done
  echo "$total"
}

ROWS=()
FIRST=100000
# Where the server and the others (the service, the load) may run: anywhere, unless a row
# pins them apart.
SERVER_PIN=()
OTHERS_PIN=()
# run LABEL SERVERS PIDS: one apply_load run; appends a row.
run() {
  local p0 p1 line per_s p50 p99 cpu service load count pg
  p0=$(pg_ticks)
  line=$("${OTHERS_PIN[@]}" "$APPLY_LOAD" --server "$2" --service "http://127.0.0.1:$SP" --duration "$DURATION" \
    --concurrency 16 --records 60000 --first-record "$FIRST" --cpu-pid "$3" --service-pid "$SERVICE_PID" | grep '^apply_load pair ')
  p1=$(pg_ticks)
  FIRST=$((FIRST + 100000))
  log "$1: $line"
  count=$(sed -E 's/.*count=([0-9]+).*/\1/' <<<"$line")
  per_s=$(sed -E 's/.*per_s=([0-9.]+).*/\1/' <<<"$line")
  p50=$(sed -E 's/.*p50_ms=([0-9.]+).*/\1/' <<<"$line")
  p99=$(sed -E 's/.*p99_ms=([0-9.]+).*/\1/' <<<"$line")
  cpu=$(sed -E 's/.* cpu_us=([0-9]+).*/\1/' <<<"$line")
  service=$(sed -E 's/.*service_cpu_us=([0-9]+).*/\1/' <<<"$line")
  load=$(sed -E 's/.*load_cpu_us=([0-9]+).*/\1/' <<<"$line")
  pg="–"
  [[ "$1" == *PostgreSQL* ]] && pg=$(python3 -c "import sys; print('{:,.0f}'.format((int(sys.argv[1]) / int(sys.argv[2])) * 1e6 / max(1, int(sys.argv[3]))))" "$((p1 - p0))" "$(getconf CLK_TCK)" "$count")
  ROWS+=("$(python3 -c "import sys; print('| {} | {:,.0f} | {} | {} | {:,} | {:,} | {:,} | {} |'.format(sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]), sys.argv[8]))" "$1" "$per_s" "$p50" "$p99" "$cpu" "$service" "$load" "$pg")")
}

# floor NAME [--workers N]: the path's floor on a port of its own; sets PORT and PID.
floor() {
  PORT=$(free_port)
  setsid "${SERVER_PIN[@]}" "$FLOOR" --service "http://127.0.0.1:$SP" --data-dir "$WORK/$1" --port "$PORT" "${@:2}" >"$WORK/$1.log" 2>&1 &
  PIDS+=($!); PID=$!
  wait_http "http://127.0.0.1:$PORT/health"
}
replica sqlite
run "SQLite, one server" "http://127.0.0.1:$PORT" "$PID"
floor floor
run "the path's floor on SQLite (\`change_floor\`: the same calls and commits, no guard)" \
  "http://127.0.0.1:$PORT" "$PID"
floor floor-store --store actiongate
run "the path's floor with actiongate's store (\`change_floor --store actiongate\`: the same store calls, commits and audit entries, no guard)" \
  "http://127.0.0.1:$PORT" "$PID"
replica sqlite-one-worker "" --workers 1
run "SQLite, one server on one worker thread (\`--workers 1\`)" "http://127.0.0.1:$PORT" "$PID"
floor floor-one-worker --workers 1
run "the path's floor on SQLite, one worker thread" "http://127.0.0.1:$PORT" "$PID"
floor floor-store-one-worker --workers 1 --store actiongate
run "the path's floor with actiongate's store, one worker thread" "http://127.0.0.1:$PORT" "$PID"
# The same two on a core of their own, the service and the load on the others: what the
# server costs when it does not share its core.
CPUS=$(nproc)
if ((CPUS >= 2)); then
  SERVER_PIN=(taskset -c 0)
  OTHERS_PIN=(taskset -c "1-$((CPUS - 1))")
  taskset -a -cp "1-$((CPUS - 1))" "$SERVICE_PID" >/dev/null
  replica sqlite-pinned
  run "SQLite, one server on a core of its own (the service and the load on the others)" "http://127.0.0.1:$PORT" "$PID"
  floor floor-pinned
  run "the path's floor on a core of its own" "http://127.0.0.1:$PORT" "$PID"
  taskset -a -cp "0-$((CPUS - 1))" "$SERVICE_PID" >/dev/null
  SERVER_PIN=()
  OTHERS_PIN=()
fi
replica pg-a "$PG_URL"; A_PORT=$PORT A_PID=$PID
run "PostgreSQL, one server" "http://127.0.0.1:$A_PORT" "$A_PID"
replica pg-b "$PG_URL"; B_PORT=$PORT B_PID=$PID
run "PostgreSQL, two replicas (select on one, apply on the other)" \
  "http://127.0.0.1:$A_PORT,http://127.0.0.1:$B_PORT" "$A_PID,$B_PID"

# The store alone: its calls for a new change, one after another on one thread, no HTTP,
# no service (examples/store_alone.rs); and the floor's two commits the same way.
STORE_LINES=()
# store_alone STORE LABEL: one run; appends a row.
store_alone() {
  local line
  line=$("$STORE_ALONE" --data-dir "$WORK/alone-$1" --store "$1" | grep '^store_alone ')
  log "$line"
  STORE_LINES+=("$(python3 -c "import sys, re; f = dict(re.findall(r'(\w+)=([\w.]+)', sys.argv[1])); print('| {} | {:,} | {} | {} | {} | {} |'.format(sys.argv[2], int(f['changes']), f['cpu_us'], f['user_us'], f['kernel_us'], f['checkpoint_us']))" "$line" "$2")")
}
store_alone actiongate "actiongate's store: the reads, the claim and the budget, the outcome, two audit entries"
store_alone bare "the floor's two commits, one row each"

mkdir -p "$(dirname "$OUT")"
{
  echo "# A new change each time: SQLite, PostgreSQL, and two replicas of one PostgreSQL store"
  echo
  echo "Produced by \`bash bench/new_changes.sh\`: one \`actiongate subscription-service\`, \`apply_load --concurrency 16\` for ${DURATION} s a row (select → question → \"yes\" → apply, a fresh record each time, every apply \`applied\`, the service's record holding exactly one change each), CPU from /proc. The floor's row is \`examples/change_floor.rs\`: per change the same three calls to the service (select's read, apply's read, the command with If-Match and an Idempotency-Key) and the same two durable commits on SQLite, one row each (WAL, synchronous NORMAL: the claim committed before the command, the outcome before the answer), each request's JSON checked, and nothing of the guard. With \`--store actiongate\` the floor keeps actiongate's own store instead (the read before the claim, the claim and the budget's token in one transaction, the outcome, select's and apply's audit entries): the floor of the store's promises, still without the guard. Servers on one worker thread per core unless the row says one. Everything, the load included, on this machine's $(nproc) cores, shared, except in the rows on a core of their own (\`taskset\`: the server on the first core, the service and the load on the others). With 16 customers each waiting for its answer, the mean time of a change is 16 ÷ changes/s (Little's law), so the latencies follow the throughput."
  echo
  echo "| store | changes/s | p50 ms | p99 ms | server CPU µs per change (actiongate, or the floor) | service CPU µs | load CPU µs | PostgreSQL CPU µs |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
  printf '%s\n' "${ROWS[@]}"
  echo
  echo "The store alone (\`examples/store_alone.rs\`): a new change's calls of the store, one change after another on one thread, with no HTTP, no service and no guard; CPU of the whole process per change from /proc, the kernel's part (SQLite's writes of its log, the checkpoints' \`fsync\`), and the part on the checkpoint thread (the floor's database checkpoints inside its commits, as SQLite does by default):"
  echo
  echo "| store | changes | CPU µs per change | user µs | kernel µs | of it, the checkpoint thread µs |"
  echo "|---|---:|---:|---:|---:|---:|"
  printf '%s\n' "${STORE_LINES[@]}"
} >"$OUT"
cat "$OUT"
log "table written to $OUT"
