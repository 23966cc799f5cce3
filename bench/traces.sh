#!/usr/bin/env bash
# What traces cost: the new-change path (select, the question, "yes", apply, on a fresh
# record each time, 16 customers at once: crates/tools/examples/apply_load.rs) against two
# `actiongate serve` processes in one run, one without a `tracing:` section and one
# exporting every span with OTLP/gRPC to a collector (crates/tools/examples/otlp_sink.rs,
# from OpenTelemetry's own protocol definitions), both calling one subscription service.
# Prints changes/s, p50/p99 and actiongate's CPU per change for each, alternating the two
# twice, and how many spans the collector received.
#
# Usage: bench/traces.sh [--duration SECONDS] [--no-build] [--out FILE]
# Needs: python3, cargo, curl. Everything listens on 127.0.0.1 and is stopped on exit.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DURATION=10
BUILD=1
OUT="bench/results/traces.md"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_args "$@"
bench_workdir traces
if [[ "$BUILD" == 1 ]]; then
  cargo build --release --quiet --bin actiongate
  cargo build --release --quiet -p tools --example apply_load --example otlp_sink
fi
BIN="$ROOT/target/release/actiongate"
APPLY_LOAD="$ROOT/target/release/examples/apply_load"
SINK="$ROOT/target/release/examples/otlp_sink"

SP=$(free_port); OFF=$(free_port); ON=$(free_port); CP=$(free_port)
setsid "$BIN" subscription-service --port "$SP" --data-dir "$WORK/service" >"$WORK/service.log" 2>&1 &
PIDS+=($!)
setsid "$SINK" --port "$CP" >"$WORK/sink.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$SP/v1/subscriptions/WS-SUB-3304"
mkdir -p "$WORK/off" "$WORK/on"
printf 'action_endpoint:\n  url: http://127.0.0.1:%s/webhook\n' "$OFF" >"$WORK/off/endpoints.yml"
printf 'action_endpoint:\n  url: http://127.0.0.1:%s/webhook\ntracing:\n  type: otlp\n  endpoint: 127.0.0.1:%s\n  insecure: true\n' "$ON" "$CP" >"$WORK/on/endpoints.yml"
declare -A PID
for mode in off on; do
  port=$([[ $mode == off ]] && echo "$OFF" || echo "$ON")
  (cd "$WORK/$mode" && exec setsid "$BIN" serve --host 127.0.0.1 --port "$port" --subscriptions-url "http://127.0.0.1:$SP" \
    --data-dir "$WORK/$mode/data" --endpoints "$WORK/$mode/endpoints.yml" --rate-capacity 1000000) >"$WORK/$mode.log" 2>&1 &
  PIDS+=($!); PID[$mode]=$!
  wait_http "http://127.0.0.1:$port/health"
done

RESULTS=()
first=100000
for round in 1 2; do
  for mode in off on; do
    port=$([[ $mode == off ]] && echo "$OFF" || echo "$ON")
    line=$("$APPLY_LOAD" --server "http://127.0.0.1:$port" --service "http://127.0.0.1:$SP" --duration "$DURATION" \
      --concurrency 16 --records 40000 --first-record "$first" --cpu-pid "${PID[$mode]}" | grep '^apply_load pair ')
    first=$((first + 50000))
    log "round $round, traces $mode: $line"
    RESULTS+=("$round|$mode|$line")
  done
done
sleep 7 # one batch delay (5 s) and a little: the last spans reach the collector
SPANS=$(tail -n 1 "$WORK/sink.log")
log "$SPANS"

field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }
{
  echo "# What traces cost: a new change with and without OTLP export"
  echo
  echo "\`bash bench/traces.sh --duration $DURATION\` on $(nproc) cores, $(date -u +%Y-%m-%d): release build,"
  echo "SQLite, 16 customers at once, a fresh record per change; the same binary twice, once"
  echo "without \`tracing:\` and once exporting every span (about 12 per change) with OTLP/gRPC to"
  echo "a collector on the same machine. CPU is actiongate's own per change (select + apply)."
  echo
  echo "| round | traces | changes/s | p50 ms | p99 ms | actiongate CPU µs/change |"
  echo "|---|---|---|---|---|---|"
  for r in "${RESULTS[@]}"; do
    IFS='|' read -r round mode line <<<"$r"
    echo "| $round | $mode | $(field per_s "$line") | $(field p50_ms "$line") | $(field p99_ms "$line") | $(field cpu_us "$line") |"
  done
  echo
  echo "The collector received: \`$SPANS\`."
} | tee "$OUT"
