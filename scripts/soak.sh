#!/usr/bin/env bash
# Load and soak: mixed list/select/apply/health traffic at a fixed rate for a bounded
# time while the subscription service is slow for 5% of calls and failing for 2%.
#
#   bash scripts/soak.sh [--duration SECS] [--rate PER_SEC]    (default 120 s at 200/s)
#
# Builds in release mode, starts the subscription service (with its injected faults) and
# actiongate on loopback, runs crates/tools/examples/soak.rs, stops both. Passes when nothing fails
# unexpectedly, no change is doubled, and the server's RSS stays flat.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
DURATION=120
RATE=200
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) DURATION="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    *) echo "usage: $0 [--duration SECS] [--rate PER_SEC]" >&2; exit 2 ;;
  esac
done
cargo build --release --quiet --bin actiongate --example soak
WORK=$(mktemp -d "${TMPDIR:-/tmp}/actiongate-soak.XXXXXX")
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'; }
SERVICE_PORT=$(free_port)
SERVER_PORT=$(free_port)
target/release/actiongate subscription-service --port "$SERVICE_PORT" --data-dir "$WORK/service" \
  --fault-slow-percent 5 --fault-slow-ms 2500 --fault-fail-percent 2 --quiet 2>"$WORK/service.log" &
PIDS+=($!)
target/release/actiongate serve --host 127.0.0.1 --port "$SERVER_PORT" --endpoints /dev/null \
  --data-dir "$WORK/server" --subscriptions-url "http://127.0.0.1:$SERVICE_PORT" --subscriptions-timeout 1 \
  --rate-capacity 1000000 --reconcile-interval 5 --quiet 2>"$WORK/server.log" &
SERVER_PID=$!
PIDS+=("$SERVER_PID")
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$SERVER_PORT/health" >/dev/null 2>&1 && curl -s "http://127.0.0.1:$SERVICE_PORT/v1/changes/x" >/dev/null 2>&1 && break
  sleep 0.1
done
# The server's warnings (the injected faults) go to a log; its tail is shown on failure.
if ! target/release/examples/soak --server "http://127.0.0.1:$SERVER_PORT" --service "http://127.0.0.1:$SERVICE_PORT" \
  --pid "$SERVER_PID" --duration "$DURATION" --rate "$RATE"; then
  echo "---- last lines of the server's log ----" >&2
  tail -n 30 "$WORK/server.log" >&2
  exit 1
fi
