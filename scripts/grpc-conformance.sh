#!/usr/bin/env bash
# The gRPC conformance suite: rasa-sdk 3.21.1 with --grpc and actiongate's SDK with --grpc,
# serving the same actions (bench/rasa_sdk_actions, crates/actionserver/examples/
# bench_server.rs), answer the same requests from rasa-sdk's own client
# (tests/grpc/conformance.py): status codes, details and payloads compared.
#
# Needs: python3 (3.11), cargo. The venv (.venv-grpc) is made from the pinned list
# tests/grpc/requirements.txt when missing or different. GRPC_VENV overrides its place.
# Both servers listen on 127.0.0.1 only and are stopped on exit.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${GRPC_VENV:-$ROOT/.venv-grpc}"
REQUIREMENTS="$ROOT/tests/grpc/requirements.txt"
log() { printf '[grpc-conformance] %s\n' "$*"; }

stamp="$VENV/.requirements"
if ! cmp -s "$REQUIREMENTS" "$stamp" 2>/dev/null; then
  log "making $VENV from tests/grpc/requirements.txt"
  [[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -r "$REQUIREMENTS"
  cp "$REQUIREMENTS" "$stamp"
fi

cargo build --quiet --example bench_server
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
SDK_PORT=$(free_port)
OURS_PORT=$(free_port)
LOGS=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$LOGS"; }
trap cleanup EXIT

"$VENV/bin/python" -m rasa_sdk --actions bench.rasa_sdk_actions --grpc -p "$SDK_PORT" \
  >"$LOGS/rasa-sdk.log" 2>&1 &
pids+=($!)
target/debug/examples/bench_server "$OURS_PORT" 2 --grpc >"$LOGS/actiongate.log" 2>&1 &
pids+=($!)

ready() {
  "$VENV/bin/python" - "$1" <<'PY' >/dev/null 2>&1
import sys, grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
channel = grpc.insecure_channel(f"127.0.0.1:{sys.argv[1]}")
health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service="ActionServer"), timeout=1)
PY
}
for port in "$SDK_PORT" "$OURS_PORT"; do
  for _ in $(seq 1 100); do ready "$port" && break; sleep 0.2; done
  ready "$port" || { log "nothing serves on $port"; cat "$LOGS"/*.log; exit 1; }
done
log "rasa-sdk on :$SDK_PORT, actiongate on :$OURS_PORT"
"$VENV/bin/python" tests/grpc/conformance.py "$SDK_PORT" "$OURS_PORT"
