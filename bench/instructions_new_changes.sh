#!/usr/bin/env bash
# Instructions per new change, counted rather than timed: the SQLite row of
# bench/new_changes.sh (one service, apply_load's select → question → "yes" → apply, a
# fresh record each time) with actiongate, then the path's floor (examples/change_floor.rs),
# bare and with actiongate's store (--store actiongate), each on one worker thread under
# valgrind's callgrind, counting only while the load runs.
# A count does not move with the machine's other work, as CPU time does (±10–25 % on these
# shared cores), so a change of a few per cent shows; it leaves out the kernel (sockets,
# the log's writes) and weighs every instruction alike, so it is read beside
# bench/new_changes.sh's CPU, not instead of it. Prints each server's instructions per
# change and, for actiongate, the parts of a change (inclusive: a part holds what it calls).
#
# Usage: bench/instructions_new_changes.sh [--duration SECONDS] [--out FILE] [--no-build]
# Needs valgrind (Debian's, installed when missing), cargo, curl, python3.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DURATION=10
SIZES=""
BUILD=1
OUT="bench/results/new-change-instructions.md"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_args "$@"
bench_workdir instructions
command -v valgrind >/dev/null || { apt-get update >/dev/null && apt-get install -y valgrind >/dev/null; }
new_change_bins

start_service

# 1234567 → 1,234,567.
thousands() { sed -E ':a;s/([0-9])([0-9]{3})($|,)/\1,\2\3/;ta' <<<"$1"; }

FIRST=100000
# count NAME COMMAND...: the server under callgrind, instrumented only while the load runs
# (after a warm-up of a second); sets IR (instructions per change) and COUNT.
count() {
  local name=$1 port pid line total
  shift
  port=$(free_port)
  (cd "$WORK" && exec setsid valgrind --tool=callgrind --instr-atstart=no \
    --callgrind-out-file="$WORK/$name.out" "$@" --port "$port") >"$WORK/$name.log" 2>&1 &
  PIDS+=($!); pid=$!
  for _ in $(seq 600); do curl -fs "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.2; done
  "$APPLY_LOAD" --server "http://127.0.0.1:$port" --service "http://127.0.0.1:$SP" --duration 1 \
    --concurrency 4 --records 300 --first-record "$FIRST" >/dev/null 2>&1
  callgrind_control -i on "$pid" >/dev/null
  "$APPLY_LOAD" --server "http://127.0.0.1:$port" --service "http://127.0.0.1:$SP" --duration "$DURATION" \
    --concurrency 4 --records 3000 --first-record $((FIRST + 1000)) >"$WORK/load-$name.txt" 2>&1
  callgrind_control -i off "$pid" >/dev/null
  FIRST=$((FIRST + 10000))
  line=$(grep '^apply_load pair ' "$WORK/load-$name.txt")
  # SIGINT ends the server as Ctrl-C does, and callgrind writes its counts then.
  kill -INT -- "-$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  COUNT=$(sed -E 's/.*count=([0-9]+).*/\1/' <<<"$line")
  total=$(callgrind_annotate "$WORK/$name.out" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
  IR=$((total / COUNT))
  log "$name: $COUNT changes, $IR instructions each"
}

count actiongate "$BIN" serve --host 127.0.0.1 --subscriptions-url "http://127.0.0.1:$SP" \
  --data-dir "$WORK/sqlite" --rate-capacity 1000000 --workers 1
AG_IR=$IR AG_COUNT=$COUNT
count floor "$FLOOR" --service "http://127.0.0.1:$SP" --data-dir "$WORK/floor" --workers 1
FLOOR_IR=$IR FLOOR_COUNT=$COUNT
count floor-store "$FLOOR" --service "http://127.0.0.1:$SP" --data-dir "$WORK/floor-store" --workers 1 \
  --store actiongate
STORE_IR=$IR STORE_COUNT=$COUNT

PARTS=$(callgrind_annotate --inclusive=yes --threshold=100 "$WORK/actiongate.out" 2>/dev/null |
  python3 "$ROOT/bench/instruction_parts.py" "$AG_COUNT")

{
  echo "# Instructions per new change: actiongate and the path's floor, counted by callgrind"
  echo
  echo "Produced by \`bash bench/instructions_new_changes.sh\` on $(date -u +%Y-%m-%d): the SQLite row of \`bench/new_changes.sh\` (a new record each change: select → question → \"yes\" → apply), each server on one worker thread under valgrind's callgrind, counted only while \`apply_load --concurrency 4\` ran for ${DURATION} s. User-space instructions only (the kernel's socket and file work is not counted); read beside \`new-changes.md\`'s CPU time."
  echo
  echo "| server | changes counted | instructions per change |"
  echo "|---|---:|---:|"
  echo "| actiongate (SQLite, \`--workers 1\`) | $(thousands "$AG_COUNT") | $(thousands "$AG_IR") |"
  echo "| the path's floor (\`change_floor --workers 1\`: the same calls and commits, no guard) | $(thousands "$FLOOR_COUNT") | $(thousands "$FLOOR_IR") |"
  echo "| the floor with actiongate's store (\`change_floor --workers 1 --store actiongate\`: its reads, claim, budget, outcome and audit entries, no guard) | $(thousands "$STORE_COUNT") | $(thousands "$STORE_IR") |"
  echo
  echo "Where actiongate's go, per change (inclusive, so a part holds the parts it calls; the two requests of a change together; plain functions only, since callgrind's inclusive count of an async function depends on how its polls nest):"
  echo
  echo "$PARTS"
} | tee "$OUT"
